"""Paper 1 §3's amplification rows (causalpos.scorecard.paper1_amplification): the trained models
against their init twins in logit units (measured) and by the scale-free share (judged), the
pretrained models against their random-init twins."""

from __future__ import annotations

import pandas as pd

from causalpos import scorecard as S
from tests.scorecard.paper1_tables import LOW, UP, ZERO, _llm_p1
from tests.scorecard_tables import D, I, R, _card, _one, _rule


def test_trained_vs_init_rows_follow_the_paired_interval_and_say_the_scale_caveat(tmp_path):
    cmp = pd.DataFrame(
        {
            "variant": ["rope", "nope", "swa"],
            "minus_init": [0.05, 0.01, -0.03],
            "minus_init_lo": [0.02, -0.01, -0.05],
            "minus_init_hi": [0.08, 0.03, -0.01],
            "amplification": [4.0, float("nan"), 0.5],
            "amplification_lo": [2.0, float("nan"), 0.3],
            "amplification_hi": [7.0, float("nan"), 0.8],
        }
    )
    card = _card(tmp_path, train_comparison=cmp)
    # logit units from init logits near 0: positive by construction, so measured (the rule's
    # verdict kept in the note); the scale-free share rows test the claim
    assert _rule(card, "§3 amplification (trained-rope vs init)") == R
    assert _rule(card, "§3 amplification (trained-nope vs init)") == I
    assert _rule(card, "§3 amplification (trained-swa vs init)") == D
    assert "x4 [2, 7]" in _one(card, "§3 amplification (trained-rope vs init)")["measured"]
    rows = card[card["target"].str.startswith("§3 amplification (")]  # the logit-unit rows
    assert rows["claim"].str.contains("scale").all() and rows["note"].str.contains("scale").all()
    assert (rows["verdict"] == S.MEASURED).all() and (rows["section"] == "paper 1").all()
    assert rows["falsified_if"].str.startswith("none: a measurement").all()
    assert rows["falsified_if"].str.contains("§3 amplification, share").all()


def test_share_amplification_rows_trained_and_pretrained(tmp_path):
    cmp = pd.DataFrame(
        {
            "variant": ["nope-up", "nope", "nope-down", "rope"],
            "minus_init": [0.05, 0.01, -0.03, 0.05],
            "minus_init_lo": [0.02, -0.01, -0.05, 0.02],
            "minus_init_hi": [0.08, 0.03, -0.01, 0.08],
            "share_pooled": [0.4, 0.2, 0.1, 0.1],
            "share_pooled_lo": [0.35, 0.15, 0.05, 0.05],
            "share_pooled_hi": [0.45, 0.25, 0.15, 0.15],
            "init_share_pooled": [0.1, 0.2, 0.3, 0.3],
            "init_share_pooled_lo": [0.05, 0.15, 0.25, 0.25],
            "init_share_pooled_hi": [0.15, 0.25, 0.35, 0.35],
            "share_pooled_minus_init": [0.3, 0.0, -0.2, -0.2],
            "share_pooled_minus_init_lo": [0.2, -0.05, -0.3, -0.3],
            "share_pooled_minus_init_hi": [0.4, 0.05, -0.1, -0.1],
        }
    )
    llm = pd.concat(
        [
            _llm_p1("big", [UP], [ZERO, LOW], twin="big-random", twin_diff=(0.2, 0.1, 0.3)),
            _llm_p1("big-random", [UP], [ZERO, LOW]),
            _llm_p1("same", [UP], [ZERO, LOW], twin="same-random", twin_diff=(0.0, -0.1, 0.1)),
            _llm_p1("less", [UP], [ZERO, LOW], twin="less-random", twin_diff=(-0.2, -0.3, -0.1)),
        ]
    )
    card = _card(tmp_path, train_comparison=cmp, llm_index=llm)
    label = "§3 amplification, share"
    assert _one(card, f"{label} (trained-nope-up vs init)")["verdict"] == R
    assert _one(card, f"{label} (trained-nope vs init)")["verdict"] == I
    assert _one(card, f"{label} (trained-nope-down vs init)")["verdict"] == D
    # with RoPE the target itself expects the share to fall: a measurement, not a test
    rope = _one(card, f"{label} (trained-rope vs init)")
    assert rope["verdict"] == S.MEASURED and "relative pattern" in rope["note"]
    measured = _one(card, f"{label} (trained-nope-up vs init)")["measured"]
    assert "trained 0.4 [0.35, 0.45], init 0.1 [0.05, 0.15]" in measured
    p = f"{label} (pretrained)"
    assert _one(card, f"{p} (big vs big-random, d)")["verdict"] == R
    assert _one(card, f"{p} (same vs same-random, d)")["verdict"] == I
    assert _one(card, f"{p} (less vs less-random, d)")["verdict"] == D
    assert (
        "big 0.3 [0.25, 0.35], big-random 0.3"
        in _one(card, f"{p} (big vs big-random, d)")["measured"]
    )
    # the logit-unit row is still there, measured, next to the scale-free one
    assert _one(card, "§3 amplification (trained-nope-up vs init)")["verdict"] == S.MEASURED
    assert _rule(card, "§3 amplification (trained-nope-up vs init)") == R
    no_twin = _card(tmp_path, llm_index=_llm_p1("alone", [UP], [ZERO, LOW]))
    assert _one(no_twin, p)["verdict"] == S.NOT_RUN
