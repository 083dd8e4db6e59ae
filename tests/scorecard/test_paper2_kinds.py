"""Paper 2's rows within one model (the declarative targets claim2_kinds, claim3_kinds,
claim3_window and claim3_base): claim 2 on each kind's layers, claim 3 between its layer kinds
(sliding vs global layers) and by intervention (the window's slope over the sliding layers, the
global base's effect: a planted effect reads reproduced, a null does not, the opposite sign
differs), not applicable where the window masks nothing at the run's length, "not run" naming the
variants a factor needs, and the sample an inconclusive row would need
(causalpos.scorecard.paper2_kinds)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos.paper2.summary import assemble as A
from causalpos.paper2.tables.factors import factors_frame
from causalpos.scorecard import paper2_kinds as K
from causalpos.scorecard.engine import declared_rows
from causalpos.scorecard.materiality import Materiality
from causalpos.scorecard.rows import MEASURED, NOT_APPLICABLE, NOT_RUN, load_targets
from causalpos.verdicts import DIFFERS, INCONCLUSIVE, REPRODUCED, negative
from tests.paper2_factor_runs import SETTINGS, factor_runs

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
    # the default run's lopsided intervals: SmolLM2's claim-2 residual component
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
    # a pair measured in this run (at the row's 16 prompts): its CPU-s scaled by (n' / 16)²
    gemma = ("gemma3-270m", "kjv-chunks640-bos")
    need = K.prompts_needed(0.00377, 0.00131, 0.00702, 0.002, 16)
    with K.measured_summaries({gemma: K.Measured(61.75)}):
        note = K.power_note(INCONCLUSIVE, (0.00377, 0.00131, 0.00702), 0.002, 16, gemma)
        assert K.power_note(REPRODUCED, (0.00377, 0.00131, 0.00702), 0.002, 16, gemma) == ""
    assert "would resolve reproduced" in note
    assert (
        f"at most ~{61.75 * (need / 16) ** 2:,.0f} CPU-s there (61.8 CPU-s measured at 16 "
        "prompts in this run" in note
    )
    # with its peak memory (2,816 MiB = 2.75 GiB) the same (need / 16)² prices the memory
    with K.measured_summaries({gemma: K.Measured(61.75, 2816.0)}):
        note = K.power_note(INCONCLUSIVE, (0.00377, 0.00131, 0.00702), 0.002, 16, gemma)
    assert (
        f"at most ~{61.75 * (need / 16) ** 2:,.0f} CPU-s and ~{2.75 * need / 16:,.0f}–"
        f"{2.75 * (need / 16) ** 2:,.0f} GiB of memory there (61.8 CPU-s and 2.8 GiB measured "
        "at 16 prompts in this run, Gram terms grow as n², the runs' statistics as n)" in note
    )
    # outside the block no measurement is set: the factor alone
    assert "at most ~" in K.power_note(INCONCLUSIVE, (0.00377, 0.00131, 0.00702), 0.002, 16, gemma)
    assert "CPU-s there" not in K.power_note(
        INCONCLUSIVE, (0.00377, 0.00131, 0.00702), 0.002, 16, gemma
    )


def test_the_summary_cost_is_read_from_the_leakage_jobs_cost_records(tmp_path):
    from causalpos.io.jobcost import write_job_cost
    from causalpos.io.joblog import process_cpu_s

    good = tmp_path / "good.cost.json"
    cpu_before = process_cpu_s()
    record = write_job_cost(good)
    # this process's CPU so far and its peak memory, read back as written
    assert cpu_before - 0.001 <= record["cpu_s"] <= process_cpu_s() + 0.001
    assert record["peak_rss_mib"] > 10
    inputs = {"summary_cost/gemma3-270m/kjv-chunks640-bos": str(good), "headline": "x.csv"}
    assert K.read_summary_costs(inputs) == {
        ("gemma3-270m", "kjv-chunks640-bos"): K.Measured(record["cpu_s"], record["peak_rss_mib"])
    }
    # a record that cannot be written is an error of the job, not a silent skip
    (tmp_path / "a_file").write_text("")
    with pytest.raises(OSError, match="cannot write the job's cost record"):
        write_job_cost(tmp_path / "a_file" / "x.cost.json")
    # a record without the peak memory: the CPU time alone
    cpu_only = tmp_path / "cpu_only.cost.json"
    cpu_only.write_text('{"cpu_s": 5.1}')
    got = K.read_summary_costs({"summary_cost/m/d": str(cpu_only)})
    assert got == {("m", "d"): K.Measured(5.1, None)}
    # anything else is refused, naming the file and the rerun
    for text in ("", "{}", '{"cpu_s": "x"}', "Traceback"):
        bad = tmp_path / "bad.cost.json"
        bad.write_text(text)
        with pytest.raises(ValueError, match="bad.cost.json: not a job cost record.*rerun"):
            K.read_summary_costs({"summary_cost/m/d": str(bad)})


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


# claim 3 by intervention within one model: the declarative targets claim3_window and
# claim3_base on the claim3_factors table of synthetic summaries
TF = Materiality().apply(dict(load_targets()["targets"]))
FACTORS = ("claim3_window", "claim3_base")


def factor_rows(df, T):
    """claim 3's factor rows: the declarative targets claim3_window and claim3_base (the
    packaged ones under the thresholds ``T``) judged by the engine."""
    return [r for key in FACTORS for r in declared_rows(df, T[key])]


def factor_frame(slope_size, base_scale=1.0, seed=5):
    df = factors_frame(A.leakage_summary(factor_runs(slope_size, seed, base_scale), SETTINGS))
    df.insert(0, "dataset", "d")
    df.insert(0, "model", "m")
    df["init_of"] = ""
    return df


def factor_verdicts(df):
    return {r.target.split(" (")[0]: r for r in factor_rows(df, TF)}


@pytest.fixture(scope="module")
def planted():
    return factor_frame(0.4, base_scale=0.3)


def test_a_planted_slope_and_a_suppressing_base_are_reproduced(planted):
    got = factor_verdicts(planted)
    w, b = got["claim 3, window"], got["claim 3, RoPE base"]
    assert w.verdict == REPRODUCED and b.verdict == REPRODUCED
    assert w.target == "claim 3, window (within one model) (m, d)"
    assert "slope" in w.measured and "change across them" in w.measured
    assert "mask-free route (ring twins) 0 [0, 0]" in b.measured
    assert "at or below 0.002" in w.falsified_if and "at or above -0.002" in b.falsified_if
    assert "mechanism mapping" in w.measured
    n = int(planted["n_sequences"].iloc[0])
    assert w.note == b.note == f"{n} prompts, paired replicates"


def test_an_inconclusive_base_row_says_the_prompts_its_negated_interval_needs(planted):
    """claim3_base's rule is negative (below -threshold): its power note is the negated
    interval's against the threshold (-0.001 [-0.005, 0.003] reads 0.001 [-0.003, 0.005])."""
    d = planted.copy()
    row = (d["factor"] == "rope_base") & (d["reading"] == "logit") & (d["level"] == "kind")
    row &= d["layer_kind"].str.startswith("sliding")
    d.loc[row, ["effect", "effect_lo", "effect_hi"]] = (-0.001, -0.005, 0.003)
    b = factor_verdicts(d)["claim 3, RoPE base"]
    n = int(d["n_sequences"].iloc[0])
    assert b.verdict == INCONCLUSIVE
    assert b.note == K.power_note(INCONCLUSIVE, (0.001, -0.003, 0.005), 0.002, n, ("m", "d"))
    assert b.note.startswith("about ") and "would resolve differs" in b.note
    # the mask-free route's row missing: the measured text says what it needs
    no_ring = d[~((d["factor"] == "rope_base") & (d["reading"] == "mask_free"))]
    assert "; mask-free route not run (needs ring and global_base+ring) (threshold 0.002" in (
        factor_verdicts(no_ring)["claim 3, RoPE base"].measured
    )


def test_each_model_is_judged_against_its_own_threshold(planted):
    """A model's own claim3_order threshold (leakage.per_model) decides its factor rows: the
    planted slope, reproduced at the config's 0.002, differs against a threshold above its
    whole interval; another model keeps the config's."""
    own = Materiality.from_params({"per_model": {"m": {"claim3_order": 10.0}}})
    T_own = own.apply(dict(load_targets()["targets"]))
    both = pd.concat([planted, planted.assign(model="other")])
    got = {r.target: r for r in factor_rows(both, T_own)}
    m, other = (got[f"claim 3, window (within one model) ({k}, d)"] for k in ("m", "other"))
    assert m.verdict == DIFFERS and "at or below 10" in m.falsified_if
    assert "(threshold 10, mechanism mapping)" in m.measured
    assert other.verdict == REPRODUCED and "at or below 0.002" in other.falsified_if


def test_a_null_is_not_reproduced_and_the_opposite_sign_differs():
    null = factor_verdicts(factor_frame(0.0, base_scale=1.0, seed=7))
    # no slope planted: the window's change across depth reads no material increase
    assert null["claim 3, window"].verdict in (INCONCLUSIVE, DIFFERS)
    # base_scale 1 adds a query term on the sliding layers: the base raises the component
    assert null["claim 3, RoPE base"].verdict == DIFFERS


def test_the_verdict_flips_with_the_sign_of_the_planted_slope(planted):
    flipped = planted.copy()
    sel = flipped["factor"] == "window"
    for c in ("effect", "change"):
        lo, hi = flipped.loc[sel, f"{c}_lo"].copy(), flipped.loc[sel, f"{c}_hi"].copy()
        flipped.loc[sel, c] *= -1
        flipped.loc[sel, f"{c}_lo"], flipped.loc[sel, f"{c}_hi"] = -hi, -lo
    assert factor_verdicts(flipped)["claim 3, window"].verdict == DIFFERS


def test_window_at_most_t_is_not_applicable_and_missing_factors_are_not_run(planted):
    wide = planted.assign(window_masks=False)
    assert factor_verdicts(wide)["claim 3, window"].verdict == NOT_APPLICABLE
    only_window = planted[planted["factor"] == "window"]
    base = factor_verdicts(only_window)["claim 3, RoPE base"]
    assert base.verdict == NOT_RUN and "global_base+ring" in base.note
    none = {r.target: r for r in factor_rows(None, TF)}
    assert {r.verdict for r in none.values()} == {NOT_RUN}
    assert "no_window" in none["claim 3, window (within one model)"].note
    twin = factor_verdicts(planted.assign(init_of="m0"))
    assert twin["claim 3, window"].verdict == "measured"


def test_negative_is_positive_of_the_negated_interval():
    assert negative((-0.01, -0.003), 0.002) == REPRODUCED
    assert negative((-0.001, 0.004), 0.002) == DIFFERS
    assert negative((-0.01, 0.0), 0.002) == INCONCLUSIVE


def test_a_summary_beyond_one_machines_reach_is_given_in_cpu_years():
    gemma = ("gemma3-270m", "kjv-chunks640-bos")
    with K.measured_summaries({gemma: K.Measured(61.75)}):
        # claim 4 on Gemma at 16 prompts: 45,778 needed, ~505 million CPU-s at most
        far = K.summary_cost(*gemma, 16, 45_778)
        near = K.summary_cost(*gemma, 16, 96)
    assert 61.75 * (45_778 / 16) ** 2 > K.REACH_CPU_S
    assert far == (
        "its leakage summary not within reach of one machine there (16 cores for 30 days): at "
        "most ~16 CPU-years (61.8 CPU-s measured at 16 prompts in this run, Gram terms grow "
        "as n²)"
    )
    # within reach: CPU-s, (96 / 16)² = 36 × 61.75
    assert near.startswith("its leakage summary at most ~2,223 CPU-s there")


def test_the_scorecard_stage_prices_its_power_notes_from_the_costs_it_is_given(
    tmp_path, monkeypatch
):
    import causalpos.stages.report as stage

    cost = tmp_path / "leakage.cost.json"
    cost.write_text('{"cpu_s": 12.5, "peak_rss_mib": 3523.4}')
    seen = {}

    def build(inputs, materiality=None):
        seen["inputs"], seen["measured"] = dict(inputs), dict(K.MEASURED.get())
        return pd.DataFrame({"section": ["p"], "paper": ["p"], "verdict": ["measured"]})

    monkeypatch.setattr(stage, "build_scorecard", build)
    monkeypatch.setattr(stage, "to_markdown", lambda card: "")
    monkeypatch.setattr(stage, "stamp_table", lambda *a: None)
    key = "summary_cost/smollm2-135m/kjv-chunks128-bos"
    stage.scorecard({key: str(cost)}, tmp_path / "c.csv", tmp_path / "c.md")
    assert seen == {
        "inputs": {},
        "measured": {("smollm2-135m", "kjv-chunks128-bos"): K.Measured(12.5, 3523.4)},
    }
    assert K.MEASURED.get() is None  # set for that build only
