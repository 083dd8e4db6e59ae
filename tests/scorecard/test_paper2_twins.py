"""Claim 1 beside its random-init / init twin (causalpos.scorecard.paper2_twins): the
trained-minus-twin contrast, a measured row."""

from __future__ import annotations

import pandas as pd

from causalpos import scorecard as S
from tests.scorecard_tables import _card, _one


def _lead(model, leak, **kw):
    """A headline row: a causal run's logit leakage ``leak`` = (est, lo, hi)."""
    row = {"model": model, "dataset": "d", "variant": "causal", "window": "all"}
    row |= {"target": "logit", "reading": "expected-map", "position_free": False}
    row |= {"leakage": leak[0], "leakage_lo": leak[1], "leakage_hi": leak[2]}
    row |= {"per_prompt": 0.1, "per_prompt_lo": 0.09, "per_prompt_hi": 0.11}
    return row | kw


def test_claim1_beside_its_init_twin_is_a_measured_contrast(tmp_path):
    """Claim 1's trained model minus its random-init twin on the same dataset: a measured row
    (never a test or a check), the two intervals combined as independent samples, its note
    saying on which side of 0 the trained model's position lies."""
    from causalpos.verdicts import difference_ci

    trained, twin = (0.009, 0.006, 0.0123), (0.139, 0.123, 0.157)
    head = pd.DataFrame(
        [
            _lead("m", trained),
            _lead("m-random", twin, init_of="m"),
            _lead("g", (0.02, 0.01, 0.03)),
            _lead("g-random", (0.001, -0.001, 0.003), init_of="g"),
            _lead("h", (0.01, 0.0, 0.02)),
            _lead("h-random", (0.009, 0.0, 0.018), init_of="h"),
            _lead("lonely-random", twin, init_of="absent"),  # its trained model is not here
        ]
    )
    card = _card(tmp_path, headline=head)
    row = _one(card, "claim 1, trained minus init twin (m - m-random, d)")
    d, lo, hi = difference_ci(trained, twin)
    assert (row["verdict"], row["section"]) == (S.MEASURED, "paper 2")
    assert row["falsified_if"].startswith("none:") and row["paper_value"] == "n/a"
    assert row["measured"].startswith(f"{d:.3g} [{lo:.3g}, {hi:.3g}]")
    assert "(twin / trained x15.4)" in row["measured"]
    assert row["note"].startswith("the trained model's logit position is below its untrained")
    assert "independent samples" in row["note"]
    above = _one(card, "claim 1, trained minus init twin (g - g-random, d)")
    assert above["note"].startswith("the trained model's logit position is above")
    assert _one(card, "claim 1, trained minus init twin (h - h-random, d)")["note"].startswith(
        "the interval covers 0"
    )
    assert _one(card, "claim 1 (lonely-random, d)")["verdict"] == S.MEASURED
    assert not card["target"].str.contains("- lonely-random", regex=False).any()
    # one contrast per landmark reading
    both = pd.concat([head.assign(landmark="modelled"), head.assign(landmark="counted")])
    card = _card(tmp_path, headline=both)
    for lm in ("modelled", "counted"):
        target = f"claim 1, trained minus init twin (m - m-random, d, landmark {lm})"
        assert _one(card, target)["verdict"] == S.MEASURED


def test_claim1_twin_contrast_is_paired_where_the_twin_table_pairs_them(tmp_path):
    """With the twin table (causalpos.paper2.tables.twins), a pair on the same resampled prompts
    takes the table's paired interval of the replicates' differences; a pair whose prompts'
    digests differ falls back to the independent combination and says so in its note."""
    from causalpos.verdicts import difference_ci

    trained, twin = (0.009, 0.006, 0.0123), (0.139, 0.123, 0.157)
    head = pd.DataFrame(
        [
            _lead("m", trained),
            _lead("m-random", twin, init_of="m"),
            _lead("g", trained),
            _lead("g-random", twin, init_of="g"),
        ]
    )
    base = {"dataset": "d", "window": "all", "target": "logit", "reading": "expected-map"}
    base |= {"leakage": 0.009, "leakage_twin": 0.139, "difference": -0.13}
    other = "independent: the two summaries resampled different prompts (counts_digest a vs b)"
    pairs = pd.DataFrame(
        [
            base
            | {"model": "m", "twin": "m-random", "difference_lo": -0.1395}
            | {"difference_hi": -0.1205, "paired": True}
            | {"pairing": "paired: the same resampled prompts (counts_digest a)"},
            base
            | {"model": "g", "twin": "g-random", "difference_lo": float("nan")}
            | {"difference_hi": float("nan"), "paired": False, "pairing": other},
        ]
    )
    card = _card(tmp_path, headline=head, twin_contrast=pairs)
    m = _one(card, "claim 1, trained minus init twin (m - m-random, d)")
    assert m["verdict"] == S.MEASURED
    assert m["measured"].startswith("-0.13 [-0.14, -0.12]; m 0.009 [0.006, 0.0123]")
    assert "Same prompts, paired: the same resampled prompts (counts_digest a)" in m["note"]
    assert "independent" not in m["note"]
    g = _one(card, "claim 1, trained minus init twin (g - g-random, d)")
    d, lo, hi = difference_ci(trained, twin)
    assert g["measured"].startswith(f"{d:.3g} [{lo:.3g}, {hi:.3g}]")
    assert (
        f"intervals combined as independent samples, which overstates the width ({other})"
        in (g["note"])
    )
