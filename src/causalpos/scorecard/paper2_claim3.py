"""Claim 3's ordering across models on the headline decomposition: the residual-stream
component NTK < standard RoPE < sliding window, each difference above the materiality
threshold."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from causalpos.scorecard.materiality import for_model
from causalpos.scorecard.paper2 import architectures
from causalpos.scorecard.paper2_kinds import power_note, prompts_of
from causalpos.scorecard.rows import (
    SOURCES,
    Row,
    fmt_ci,
    not_run,
    ring_missing,
    target_row,
    text_column,
)
from causalpos.verdicts import INCONCLUSIVE, all_of, difference_ci, positive


def claim3_order_rows(dec: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 3's ordering on the headline: residual-stream component NTK < standard < sliding
    window, per dataset with one trained (not twin) model of each, at one common query window,
    each difference above the materiality threshold (``leakage.materiality.claim3_order``)."""
    src = SOURCES["decomposition_headline"]
    t = T["claim3_order"]
    why = (
        "no dataset with an NTK-scaled, a standard-RoPE and a sliding-window model (trained here: "
        "`positional`; the papers': targets.yaml claim3_ntk.architectures) decomposed on it"
    )
    if dec is None:
        return [not_run(t, t["label"], src, why)]
    d = dec[(dec["target"] == "logattn") & (dec["condition"] == "rope")]
    d = d.assign(arch_=architectures(d, T), init_=text_column(d, "init_of"))
    ring = pd.Series([not ring_missing(r) for _, r in d.iterrows()], index=d.index, dtype=bool)
    d = d[(d["init_"] == "") & ring]
    rows = []
    for dataset, g in d.groupby("dataset", sort=False):
        by = {a: g[g["arch_"] == a] for a in ("ntk", "rope", "swa")}
        if any(x.empty for x in by.values()):
            continue
        windows = [str(w) for w in dict.fromkeys(g["window"])]
        full = [w for w in windows if w.startswith("full")]
        window = full[0] if full else windows[0]
        pick, n_of = {}, {}
        for a, x in by.items():
            x = x[x["window"] == window]
            if x.empty:
                break
            r = x.iloc[0]
            pick[a] = (
                r["model"],
                (r["residual_stream"], r["residual_stream_lo"], r["residual_stream_hi"]),
            )
            n_of[a] = r
        if len(pick) < 3:
            continue
        d1 = difference_ci(pick["rope"][1], pick["ntk"][1])
        d2 = difference_ci(pick["swa"][1], pick["rope"][1])
        tm = for_model(t, *(m for m, _ in pick.values()))
        thr = float(tm["threshold"])
        verdicts = [positive(x[1:], thr) for x in (d1, d2)]
        verdict = all_of(verdicts)
        n = prompts_of(*n_of.values())
        power = [
            f"{name}: {note}"
            for name, d, v in (
                ("standard - NTK", d1, verdicts[0]),
                ("sliding window - standard", d2, verdicts[1]),
            )
            if (note := power_note(v, d, thr, n, (pick["rope"][0], str(dataset))))
        ]
        notes = ["CIs of two models combined as independent samples"]
        if verdict == INCONCLUSIVE:
            notes += power
        measured = (
            ", ".join(f"{a} {m} {fmt_ci(*v)}" for a, (m, v) in pick.items())
            + f"; standard - NTK {fmt_ci(*d1)}, sliding window - standard {fmt_ci(*d2)} "
            f"(window {window})"
        )
        rows.append(
            target_row(
                tm,
                f"{t['label']} ({dataset})",
                measured,
                verdict,
                src,
                note="; ".join(notes),
            )
        )
    return rows or [not_run(t, t["label"], src, why)]
