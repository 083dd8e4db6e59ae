"""Claim 3's ordering across models (causalpos.scorecard.paper2_claim3): NTK < standard RoPE <
sliding window on the headline's residual-stream component, at one common query window, each
step above its materiality threshold."""

from __future__ import annotations

import pandas as pd
from scorecard_tables import D, I, R, _card, _one

from causalpos import scorecard as S


def test_claim3_ordering_on_a_common_window(tmp_path):
    def row(model, arch, res, window="full32", **kw):
        return (
            {"model": model, "dataset": "d", "condition": "rope", "window": window}
            | {
                "target": "logattn",
                "positional": arch,
                "residual": res[0],
                "residual_lo": res[1],
                "residual_hi": res[2],
            }
            | kw
        )

    lo, mid, hi = (0.01, 0.005, 0.015), (0.05, 0.045, 0.055), (0.1, 0.09, 0.11)

    def card(rows):
        return _card(tmp_path, decomposition_headline=pd.DataFrame(rows))

    ordered = [row("n", "ntk", lo), row("r", "rope", mid), row("s", "swa", hi)]
    # the window "all" is ignored where a full-window one exists
    ordered += [row("n", "ntk", hi, window="all"), row("s", "swa", lo, window="all")]
    r = _one(card(ordered), "claim 3 (ordering) (d)")
    assert r["verdict"] == R and "(window full32)" in r["measured"]
    swapped = [row("n", "ntk", lo), row("r", "rope", hi), row("s", "swa", mid)]
    assert _one(card(swapped), "claim 3 (ordering) (d)")["verdict"] == D
    wide = [row("n", "ntk", lo), row("r", "rope", mid), row("s", "swa", (0.06, 0.0, 0.12))]
    assert _one(card(wide), "claim 3 (ordering) (d)")["verdict"] == I
    # each difference must be material (leakage.materiality.claim3_order)
    assert (
        _one(
            _card(
                tmp_path,
                materiality={"claim3_order": 0.05},
                decomposition_headline=pd.DataFrame(ordered),
            ),
            "claim 3 (ordering) (d)",
        )["verdict"]
        == D
    )  # the steps are 0.04 and 0.05 apart: neither above 0.05
    # a twin does not count; without all three architectures: not run
    twin_only = [row("n", "ntk", lo), row("r", "rope", mid), row("s", "swa", hi, init_of="x")]
    assert _one(card(twin_only), "claim 3 (ordering)")["verdict"] == S.NOT_RUN
