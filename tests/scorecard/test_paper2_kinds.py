"""Paper 2's rows per layer kind (the declarative targets claim2_kinds and claim3_kinds): claim 2
on each kind's layers, claim 3 within one model (sliding vs global layers), not applicable where
the window masks nothing at the run's length, and the sample an inconclusive row would need
(causalpos.scorecard.paper2_kinds)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos.scorecard import paper2_kinds as K
from causalpos.scorecard.engine import declared_rows
from causalpos.scorecard.rows import MEASURED, NOT_APPLICABLE, NOT_RUN
from causalpos.verdicts import DIFFERS, INCONCLUSIVE, REPRODUCED

T = {
    "claim2_kinds": {
        "paper": "paper 2",
        "label": "claim 2 (per layer kind)",
        "claim": "c",
        "paper_value": "> 0",
        "falsified_if": "at or below {threshold}",
        "threshold": 0.002,
    },
    "claim3_kinds": {
        "paper": "paper 2",
        "label": "claim 3 (sliding vs global layers)",
        "claim": "c",
        "paper_value": "above",
        "falsified_if": "at or below {threshold}",
        "threshold": 0.002,
    },
}


def _claim2_rows(d, T):
    """Claim 2's per-kind rows, the declarative target ``claim2_kinds`` (the packaged one with
    this module's fields) judged by the engine."""
    return declared_rows(d, S.load_targets()["targets"]["claim2_kinds"] | T["claim2_kinds"])


def _claim3_rows(d, T):
    """Claim 3's sliding-vs-global rows, the declarative target ``claim3_kinds`` (the packaged
    one with this module's fields) judged by the engine."""
    return declared_rows(d, S.load_targets()["targets"]["claim3_kinds"] | T["claim3_kinds"])


def table(model, sliding, glob, contrast, *, masks=True, n=16):
    """A by-kind table of one model: (est, lo, hi) of the residual-stream component on its
    sliding and global layers and of their contrast."""
    rows = []
    for kind, vals in (
        ("sliding512", sliding),
        ("global", glob),
        ("sliding512 minus global", contrast),
    ):
        e, lo, hi = vals
        rows.append(
            {
                "model": model,
                "dataset": "d",
                "condition": "rope",
                "landmark": "modelled",
                "window": "all",
                "layer_kind": kind,
                "residual_stream": e,
                "residual_stream_lo": lo,
                "residual_stream_hi": hi,
                "total": 0.02,
                "total_lo": 0.01,
                "total_hi": 0.03,
                "n_layers": {"sliding512": 15, "global": 3}.get(kind, pd.NA),
                "window_masks": masks if kind != "global" else False,
                "init_of": "",
                "n_sequences": n,
                "ring_run": "rope+ring",
            }
        )
    return pd.DataFrame(rows)


def test_prompts_needed_is_the_normal_sample_size_formula():
    # SE 0.001 at n = 16 (half-width 1.96e-3); est 0.003 vs 0.002: (2.80 * 0.001 / 0.001)^2 * 16
    got = K.prompts_needed(0.003, 0.003 - 1.959964e-3, 0.003 + 1.959964e-3, 0.002, 16)
    assert got == int(np.ceil(16 * (1.959964 + 0.841621) ** 2))
    assert K.prompts_needed(0.002, 0.0, 0.004, 0.002, 16) is None  # the estimate on the threshold
    assert K.prompts_needed(np.nan, 0.0, 0.004, 0.002, 16) is None


def test_prompts_needed_reads_the_arm_that_must_clear_the_threshold():
    # the default run's lopsided intervals (issue 49): SmolLM2's claim-2 residual component
    # 0.00377 [0.00131, 0.00702] at 32 prompts lies above the threshold, so its lower arm
    # (0.00246) must shrink below 0.00177; the symmetric half-width (0.002855) asked for 171
    z = (K.Z_INTERVAL + K.Z_POWER) / K.Z_INTERVAL
    up = K.prompts_needed(0.00377, 0.00131, 0.00702, 0.002, 32)
    assert up == int(np.ceil(32 * (z * 0.00246 / 0.00177) ** 2)) == 127
    # Gemma's sliding-layer residual 9.98e-05 [-0.00126, 0.00334] at 16 lies below it: the upper
    # arm (0.0032402) must shrink below 0.0019002 (the symmetric half-width asked for 49)
    down = K.prompts_needed(9.98e-05, -0.00126, 0.00334, 0.002, 16)
    assert down == int(np.ceil(16 * (z * 0.0032402 / 0.0019002) ** 2)) == 96
    # mirrored: the same interval read from the other side gives the other arm's n
    assert K.prompts_needed(0.00377, 0.00052, 0.00623, 0.002, 32) != up
    assert K.resolves_as(0.00377, 0.002) == REPRODUCED
    assert K.resolves_as(9.98e-05, 0.002) == DIFFERS


def test_power_note_says_the_direction_and_the_summary_cost_at_that_n():
    note = K.power_note(INCONCLUSIVE, (9.98e-05, -0.00126, 0.00334), 0.002, 16, ("m", "d"))
    assert note.startswith("about 96 prompts would resolve it at 80 % power (16 here)")
    assert "would resolve differs if the estimate held" in note
    assert "at most ~36× this run's (Gram terms grow as n²)" in note  # (96 / 16)²
    # a pair measured in the default run: its CPU-s scaled by (n' / n0)²
    cpu, n0 = K.SUMMARY_CPU_S[("gemma3-270m", "kjv-chunks640-bos")]
    gemma = ("gemma3-270m", "kjv-chunks640-bos")
    note = K.power_note(INCONCLUSIVE, (0.00377, 0.00131, 0.00702), 0.002, 16, gemma)
    need = K.prompts_needed(0.00377, 0.00131, 0.00702, 0.002, 16)
    assert "would resolve reproduced" in note
    assert (
        f"at most ~{cpu * (need / n0) ** 2:,.0f} CPU-s there ({cpu} CPU-s measured at {n0}" in note
    )
    assert K.power_note(REPRODUCED, (0.00377, 0.00131, 0.00702), 0.002, 16, gemma) == ""


def test_claim3_within_a_model_reads_each_outcome_and_says_what_would_decide():
    yes = table("gemma", (0.01, 0.008, 0.012), (0.001, 0.0, 0.002), (0.009, 0.006, 0.012))
    no = table("g2", (0.001, 0.0, 0.002), (0.001, 0.0, 0.002), (0.0, -0.001, 0.001))
    maybe = table("g3", (0.004, 0.0, 0.008), (0.001, 0.0, 0.002), (0.003, -0.001, 0.007))
    short = table(
        "g4", (0.01, 0.008, 0.012), (0.001, 0.0, 0.002), (0.009, 0.006, 0.012), masks=False
    )
    # a random-init twin (the tables' init_of names its model): a baseline, measured
    twin = table("gemma-random", (0.01, 0.008, 0.012), (0.0, -0.001, 0.001), (0.01, 0.008, 0.012))
    twin["init_of"] = "gemma"
    # every layer sliding (trained-swa): a contrast row but one kind, so no comparison in-model
    swa = table("swa", (0.01, 0.008, 0.012), (0.0, 0.0, 0.0), (0.01, 0.008, 0.012))
    swa = swa[swa["layer_kind"] != "global"]
    ringless = table("g5", (0.01, 0.008, 0.012), (0.001, 0.0, 0.002), (0.009, 0.006, 0.012))
    ringless = ringless.assign(ring_run="", status="not run: no 'ring' run")
    rows = _claim3_rows(pd.concat([yes, no, maybe, short, twin, swa, ringless]), T)
    got = {r.target.rsplit("(", 1)[1].split(",")[0]: r for r in rows}
    assert list(got) == ["gemma", "g2", "g3", "g4", "gemma-random", "g5"]
    assert (
        got["gemma"].target == "claim 3 (sliding vs global layers) (gemma, d, sliding512 vs global)"
    )
    assert got["gemma"].measured == (
        "sliding512 minus global 0.009 [0.006, 0.012] (residual-stream component)"
    )
    assert got["g5"].verdict == NOT_RUN and got["g5"].note.startswith("no 'ring' run: the resid")
    assert got["gemma"].verdict == REPRODUCED
    # a contrast of layer kinds, not of the window alone: every judged row says so
    for m in ("gemma", "g2", "g3"):
        assert got[m].note.startswith("observational: sliding and global layers differ in the ")
        assert "RoPE base, depth and role" in got[m].note
    assert got["g2"].verdict == DIFFERS
    assert got["g3"].verdict == INCONCLUSIVE and "prompts would resolve it" in got["g3"].note
    assert got["g4"].verdict == NOT_APPLICABLE and "window ≥ T" in got["g4"].note
    assert got["gemma-random"].verdict == MEASURED
    assert _claim3_rows(None, T)[0].verdict == NOT_RUN
    (one,) = _claim3_rows(yes[yes["layer_kind"] != "global"], T)
    assert (one.verdict, one.note) == (NOT_RUN, "no model with several layer kinds")


def test_claim2_per_kind_rows_judge_each_kind_against_the_threshold():
    d = table("gemma", (0.01, 0.008, 0.012), (0.001, 0.0, 0.002), (0.009, 0.006, 0.012))
    rows = _claim2_rows(d, T)
    assert [r.verdict for r in rows] == [REPRODUCED, DIFFERS]
    assert "sliding512: 15 layers" in rows[0].target and "global: 3 layers" in rows[1].target
    # one kind only (a model whose layers all mask alike): nothing to split by kind
    one = d[d["layer_kind"] == "global"]
    assert _claim2_rows(one, T)[0].verdict == NOT_RUN


def test_claim2_per_kind_is_not_applicable_where_token_0_is_not_fixed():
    """The per-kind residual stream is the mask-free route: without a fixed token 0 it reads 0 by
    symmetry, so each kind's row is not applicable with the table's reason (the global kind's
    numbers would say differs)."""
    why = "not applicable: token 0 is not one fixed id across the prompts (ids 2, 5)"
    d = table("gemma", (0.01, 0.008, 0.012), (0.001, 0.0, 0.002), (0.009, 0.006, 0.012))
    rows = _claim2_rows(d.assign(mask_free_status=why), T)
    assert [r.verdict for r in rows] == [NOT_APPLICABLE, NOT_APPLICABLE]
    assert all(r.note == why for r in rows)
    measured = _claim2_rows(d.assign(mask_free_status="measured"), T)
    assert [r.verdict for r in measured] == [REPRODUCED, DIFFERS]


@pytest.mark.parametrize("col", ["residual_stream_lo", "residual_stream_hi"])
def test_a_non_finite_bound_decides_nothing(col):
    d = table("gemma", (0.01, 0.008, 0.012), (0.001, 0.0, 0.002), (0.009, 0.006, 0.012))
    d.loc[d["layer_kind"] == "sliding512 minus global", col] = np.nan
    (row,) = _claim3_rows(d, T)
    assert row.verdict == INCONCLUSIVE


def test_a_models_own_threshold_judges_its_rows():
    # 0.004 [0.003, 0.005]: above the section's 0.002, below gemma's own 0.006 (leakage.per_model)
    d = table("gemma", (0.004, 0.003, 0.005), (0.004, 0.003, 0.005), (0.0, -0.001, 0.001))
    other = table("g2", (0.004, 0.003, 0.005), (0.004, 0.003, 0.005), (0.0, -0.001, 0.001))
    own = {k: {**t, "thresholds": {"gemma": 0.006}} for k, t in T.items()}
    rows = _claim2_rows(pd.concat([d, other]), own)
    verdicts = {(r.target.rsplit("(", 1)[1].split(",")[0], r.verdict) for r in rows}
    assert verdicts == {("gemma", DIFFERS), ("g2", REPRODUCED)}
    gemma = [r for r in rows if "(gemma," in r.target]
    assert all("at or below 0.006" in r.falsified_if for r in gemma)
