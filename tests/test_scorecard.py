"""The scorecard's verdicts: every rule can say reproduced, differs and inconclusive, every row
family says "differs" on tables made to contradict the paper, every row states what would have
made it fail."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.paper1.theory import theory_table

R, D, I = V.REPRODUCED, V.DIFFERS, V.INCONCLUSIVE


def _card(tmp_path, **tables) -> pd.DataFrame:
    """The scorecard of the given tables (name -> DataFrame), written as CSVs under tmp_path."""
    paths = {}
    for name, df in tables.items():
        paths[name] = tmp_path / f"{name}.csv"
        df.to_csv(paths[name], index=False)
    return S.build_scorecard(paths)


def _rule(card: pd.DataFrame, target: str) -> str:
    """The verdict of a row's rule: the row's verdict, or for a row not scored (its quantity
    fails its negative control) the verdict its note keeps."""
    row = _one(card, target)
    m = re.search(r"its rule says (reproduced|differs|inconclusive)", str(row["note"]))
    if row["verdict"] == S.MEASURED and m:
        return m.group(1)
    return row["verdict"]


def _one(card: pd.DataFrame, target: str) -> pd.Series:
    rows = card[card["target"] == target]
    assert len(rows) == 1, (target, card["target"].tolist())
    return rows.iloc[0]


# --------------------------------------------------------------------------------------------
# The rules: each one reaches all three verdicts


def test_equivalent():
    assert V.equivalent((0.80, 0.84), 0.82, 0.10) == R
    assert V.equivalent((0.30, 0.35), 0.82, 0.10) == D
    assert V.equivalent((0.93, 0.99), 0.82, 0.10) == D
    assert V.equivalent((0.50, 0.90), 0.82, 0.10) == I  # straddles the band's lower edge
    assert V.equivalent((-math.inf, math.inf), 0.82, 0.10) == I
    assert V.equivalent((math.nan, 0.8), 0.82, 0.10) == I


def test_positive():
    assert V.positive((0.02, 0.05), 0.01) == R
    assert V.positive((-0.01, 0.005), 0.01) == D
    assert V.positive((0.0, 0.05), 0.01) == I
    assert V.positive((0.001, 0.002)) == R and V.positive((-0.2, 0.0)) == D
    assert V.positive((0.001, math.nan)) == I


def test_exact():
    assert V.exact(0.15352, 0.154, 0.0005) == R
    assert V.exact(0.15082, 0.150, 0.0005) == D
    assert V.exact(0.1504, 0.150, 0.0005, err=0.0003) == I  # the value's error straddles the edge
    assert V.exact(math.nan, 0.0, 1e-10) == I


def test_fraction():
    assert V.fraction(10, 0, 10, 1.0) == R
    assert V.fraction(9, 0, 10, 1.0) == D
    assert V.fraction(9, 1, 10, 1.0) == I
    assert V.fraction(6, 3, 10, 0.5) == R and V.fraction(2, 2, 10, 0.5) == D
    assert V.fraction(0, 0, 0, 0.0) == I  # nothing counted decides nothing


def test_nearly_identical_and_difference_ci():
    d, lo, hi = V.difference_ci((0.5, 0.4, 0.6), (0.2, 0.1, 0.3))
    assert d == pytest.approx(0.3) and lo == pytest.approx(0.3 - math.hypot(0.1, 0.1))
    assert hi == pytest.approx(0.3 + math.hypot(0.1, 0.1))
    assert V.nearly_identical([(0.50, 0.48, 0.52), (0.52, 0.50, 0.54)], 0.10) == R
    assert V.nearly_identical([(0.80, 0.76, 0.84), (0.50, 0.45, 0.55)], 0.10) == D
    assert V.nearly_identical([(0.50, 0.30, 0.70), (0.55, 0.35, 0.75)], 0.10) == I
    # three conditions: one far pair is enough to differ
    assert V.nearly_identical([(0.5, 0.49, 0.51), (0.5, 0.49, 0.51), (0.9, 0.89, 0.91)], 0.1) == D
    assert V.nearly_identical([(0.5, 0.49, 0.51)], 0.10) == I
    # paired differences (a joint bootstrap) replace the independent-samples combination: wide
    # shares whose difference is known tightly are nearly identical, or clearly not
    wide = [(0.50, 0.30, 0.70), (0.52, 0.32, 0.72)]
    assert V.nearly_identical(wide, 0.10) == I
    assert V.nearly_identical(wide, 0.10, [(-0.02, -0.04, 0.0)]) == R
    assert V.nearly_identical(wide, 0.10, [(-0.2, -0.25, -0.15)]) == D
    assert V.nearly_identical(wide, 0.10, [(-0.1, -0.2, 0.0)]) == I


def test_increasing():
    assert V.increasing([(1, 2), (3, 4), (5, 6)]) == R
    assert V.increasing([(3, 4), (1, 2)]) == D
    assert V.increasing([(1, 3), (2, 4)]) == I
    assert V.increasing([(1, 2)]) == I


def test_beyond_control_reads_the_model_against_the_controls_upper_limit():
    # model (est, lo, hi) and the control's upper limit, both in the model's units
    assert V.beyond_control((0.0086, 0.0050, 0.0129), 0.0026) == R  # lo above the control's hi
    assert V.beyond_control((6.2e-4, 2.9e-4, 9.2e-4), 0.0026) == D  # hi at or below it
    assert V.beyond_control((0.0026, 0.0010, 0.0026), 0.0026) == D  # at: no larger than none
    assert V.beyond_control((0.003, 0.001, 0.005), 0.0026) == I  # the intervals overlap
    assert V.beyond_control((0.003, math.nan, 0.005), 0.0026) == I
    assert V.beyond_control((0.003, 0.001, 0.005), math.nan) == I
    # the rule is the threshold rule with the control's upper limit as the threshold
    for lo, hi, c in [(0.1, 0.2, 0.05), (0.0, 0.04, 0.05), (0.0, 0.2, 0.05)]:
        assert V.beyond_control((0.5 * (lo + hi), lo, hi), c) == V.positive((lo, hi), c)


def test_controls_and_checks_have_labels_of_their_own():
    assert {V.control(v) for v in V.TESTED} == set(V.CONTROL) == {"passed", "failed"}
    assert V.control(R) == V.PASSED and V.control(D) == V.control(I) == V.FAILED
    assert V.check(R) == V.HOLDS and V.check(D) == V.check(I) == V.FAILS
    assert not set(V.CONTROL + V.CHECK) & set(V.TESTED)
    assert V.covers((0.8, 1.2), 1.0) == R and V.covers((0.5, 0.9), 1.0) == D
    assert V.covers((math.nan, 1.2), 1.0) == I
    # a section refuses a verdict it does not allow
    card = pd.DataFrame(
        {"section": ["controls", "checks"], "target": ["a", "b"], "verdict": [R, V.HOLDS]}
    )
    with pytest.raises(ValueError, match="'a': section 'controls', verdict 'reproduced'"):
        S.check_sections(card)
    S.check_sections(card.assign(verdict=[V.PASSED, V.HOLDS]))


def test_all_of():
    assert V.all_of([R, R]) == R
    assert V.all_of([R, I, D]) == D
    assert V.all_of([R, I]) == I
    assert V.all_of([]) == I


# --------------------------------------------------------------------------------------------
# The targets file


def test_targets_file_holds_every_target_with_its_falsification_condition():
    spec = S.load_targets()
    T = spec["targets"]
    for key, t in T.items():
        if key == "unscored":
            assert all(u["falsified_if"] and u["why"] for u in t)
            continue
        assert t["paper"] in ("paper 1", "paper 2") and t["rule"] and t["why"], key
        assert t.get("section", t["paper"]) in S.SECTIONS, key
        assert any(k.startswith("falsified_if") for k in t), key
        # the positive control's bound is its own CI around the planted share
        assert {"margin", "threshold", "tolerance"} & set(t) or key in (
            "sim_depth",
            "control_positive",
            "additivity",  # a measurement: no verdict
            "additivity_ablation",  # idem
        ), key
    # paper values keyed by the papers' own model ids
    assert T["claim4_share"]["values"]["meta-llama/Llama-3.2-1B"] == 0.82
    assert S.paper_model_id("llama-3.2-1b", spec) == "meta-llama/Llama-3.2-1B"
    assert S.paper_model_id("Llama-3.2-3B", spec) == "meta-llama/Llama-3.2-3B"
    assert S.paper_model_id("llama-3.2-1b-random", spec) is None


def test_missing_tables_are_not_run_rather_than_dropped():
    card = S.build_scorecard({})
    assert set(card["verdict"]) == {S.NOT_RUN}
    assert {"paper 1", "paper 2"} == set(card["paper"])
    assert set(card["section"]) == set(S.SECTIONS) and list(card.columns)[0] == "section"
    assert (card["reading"] != "").all()  # every row names its reading
    for label in ("Table 9", "Fig. 5", "claim 1", "claim 7", "§4.1"):
        assert card["target"].str.contains(label, regex=False).any(), label
    assert (card["note"].str.len() > 0).all()  # every "not run" says why
    assert (card["falsified_if"].str.len() > 0).all()


def test_empty_or_header_only_tables_are_not_run(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("model,dataset,intervention,bos_window,effect\n")
    card = S.build_scorecard(
        {"bos_effects": tmp_path / "empty.csv", "decomposition": tmp_path / "header.csv"}
    )
    rows = card[card["target"].isin(["Table 9", "claim 4", "claim 10"])]
    assert len(rows) == 3 and (rows["verdict"] == S.NOT_RUN).all()


def test_each_input_table_is_read_once_and_a_table_lacking_columns_gives_not_run(
    tmp_path, monkeypatch
):
    from causalpos.scorecard.rows import SOURCES

    assert {i.key for f in S.FAMILIES for i in f.inputs} == set(SOURCES)
    paths = {}
    for key in SOURCES:  # a table with none of the columns any family needs (theory: empty)
        paths[key] = tmp_path / f"{key}.csv"
        paths[key].write_text("" if key == "theory" else "unrelated\n1\n")
    reads = []
    read_csv = pd.read_csv
    monkeypatch.setattr(pd, "read_csv", lambda p, *a, **k: reads.append(p) or read_csv(p, *a, **k))
    card = S.build_scorecard(paths)
    assert sorted(reads) == sorted(paths.values())  # llm_index.csv feeds four families
    assert len(card) == len(S.build_scorecard({}))
    assert (card["verdict"] == S.NOT_RUN).all()
    # each row names the table it came from (or none: unscored rows, the exact computation)
    assert set(card["source"]) - set(SOURCES.values()) <= {
        "",
        "exact computation (causalpos.paper1.theory.monotonicity_violations)",
    }


@pytest.mark.parametrize("config", ["config.yaml", "configs/smoke.yaml", "configs/paper.yaml"])
def test_the_sources_rows_name_are_the_tables_the_config_makes(config):
    import yaml
    from snakemake.utils import validate

    from causalpos.config import Resolved
    from causalpos.scorecard.rows import SOURCES

    repo = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((repo / config).read_text())
    validate(cfg, str(repo / "workflow" / "schemas" / "config.schema.yaml"))
    inputs = Resolved(cfg).scorecard_inputs()
    assert inputs == {k: SOURCES[k] for k in inputs}


# --------------------------------------------------------------------------------------------
# Paper 1 row families


def test_theory_rows_and_what_makes_them_differ(tmp_path):
    theory = theory_table(None, n=5, alphas=[0.0, 0.2])
    card = _card(tmp_path, theory=theory)
    assert _one(card, "Fig. 1 S(2,1)")["verdict"] == R
    assert _one(card, "Fig. 1 S(3,1)")["verdict"] == R
    # the paper prints 0.150 for S(3,2) = 0.15082 (rounds to 0.151)
    s32 = _one(card, "Fig. 1 S(3,2)")
    assert s32["verdict"] == D and "0.151" in s32["note"]
    # the closed form against itself and the proven layer-2 monotonicity: checks, not tests
    for label in ("§3 closed form", "§3 monotonicity (layer 2)"):
        row = _one(card, label)
        assert (row["verdict"], row["section"]) == (V.HOLDS, "checks"), label
        assert row["falsified_if"].startswith("fails if"), label
    assert _one(card, "Fig. 1 S(3,2)")["section"] == "paper 1"
    # the exact computation at the paper's 50 positions: layers 3-4 are not strictly increasing
    deep = _one(card, "§4.1 nearby keys score higher (layers 3-4)")
    assert deep["verdict"] == D
    assert "layer 3: 223 of 1225" in deep["measured"] and "layer 4: 110 of 1225" in deep["measured"]

    bad = theory.copy()
    cell = (bad["alpha"] == 0) & (bad["query"] == 3) & (bad["key"] == 1)
    bad.loc[cell, "closed_form"] += 0.03  # no longer 0.132, and now above S(3,2)
    bad.loc[bad.index[5], "exact_gram"] += 1e-6
    card = _card(tmp_path, theory=bad)
    assert _one(card, "Fig. 1 S(3,1)")["verdict"] == D
    assert _one(card, "§3 closed form")["verdict"] == V.FAILS
    assert _one(card, "§3 monotonicity (layer 2)")["verdict"] == V.FAILS


def test_monotonicity_beyond_layer_2_can_also_come_out_reproduced(tmp_path):
    theory_table(None, n=5, alphas=[0.0]).to_csv(tmp_path / "theory.csv", index=False)
    spec = S.load_targets()
    spec["targets"]["monotone_deep"]["n_positions"] = 20  # violations start at query 27
    card = S.build_scorecard({"theory": tmp_path / "theory.csv"}, targets=spec)
    assert _one(card, "§4.1 nearby keys score higher (layers 3-4)")["verdict"] == R


def _sim(setting, layers, *, alpha=0.0, norm="l2", scaling="none", rope=False, causal=True):
    """simulation_index rows of one setting: ``layers`` = [(estimate, lo, hi), ...]."""
    return pd.DataFrame(
        {
            "setting": setting,
            "alpha": alpha,
            "norm": norm,
            "scaling": scaling,
            "rope": rope,
            "causal": causal,
            "residual": True,
            "layer": range(1, len(layers) + 1),
            "index": [x[0] for x in layers],
            "index_debiased": [x[0] for x in layers],
            "ci_lo": [x[1] for x in layers],
            "ci_hi": [x[2] for x in layers],
        }
    )


def test_simulation_rows_follow_the_cis(tmp_path):
    good = [(0.0, 0.0, 0.0004), (0.014, 0.0139, 0.0140), (0.024, 0.0237, 0.0239)]
    noise = [(0.0, 0.0, 0.0004)] * 3
    table = pd.concat(
        [
            _sim("l2_a000", good),
            _sim("rope_bidir_a000", noise, rope=True, causal=False),
            _sim("ln_sqrtd_a000", noise, norm="layernorm", scaling="sqrt_d"),
            _sim("ln_sqrtd_a020", good, alpha=0.2, norm="layernorm", scaling="sqrt_d"),
            _sim("custom", good, alpha=0.3),
        ]
    )
    card = _card(tmp_path, sim_index=table)
    assert _one(card, "Fig. 2 (l2_a000)")["verdict"] == R
    assert _one(card, "Fig. 2, depth (l2_a000)")["verdict"] == R
    assert _one(card, "Fig. 10 (rope_bidir_a000)")["verdict"] == R
    assert _one(card, "Fig. 7 (ln_sqrtd_a000)")["verdict"] == R
    assert _one(card, "Fig. 7 (ln_sqrtd_a020)")["verdict"] == S.MEASURED
    assert _one(card, "simulation (custom)")["verdict"] == S.NOT_APPLICABLE

    layer1_pattern = [(0.02, 0.019, 0.021)] + good[1:]
    flat_later = [good[0], (0.001, 0.0, 0.002), good[2]]
    shrinking = [good[0], (0.03, 0.029, 0.031), (0.02, 0.019, 0.021)]
    table = pd.concat(
        [
            _sim("l2_a000", layer1_pattern),
            _sim("l2_a020", flat_later, alpha=0.2),
            _sim("l2_a080", shrinking, alpha=0.8),
            _sim("rope_a000", good, rope=True),
            _sim("rope_bidir_a000", good, rope=True, causal=False),
            _sim("ln_sqrtd_a000", good, norm="layernorm", scaling="sqrt_d"),
        ]
    )
    card = _card(tmp_path, sim_index=table)
    assert _one(card, "Fig. 2 (l2_a000)")["verdict"] == D
    assert _one(card, "Fig. 2 (l2_a020)")["verdict"] == D
    assert _one(card, "Fig. 6 (l2_a080)")["verdict"] == R  # a pattern from layer 2 ...
    assert _one(card, "Fig. 4 (rope_a000)")["verdict"] == R
    assert _one(card, "Fig. 10 (rope_bidir_a000)")["verdict"] == D
    assert _one(card, "Fig. 7 (ln_sqrtd_a000)")["verdict"] == D
    shr = pd.concat([_sim("l2_a000", shrinking)])
    assert _one(_card(tmp_path, sim_index=shr), "Fig. 2, depth (l2_a000)")["verdict"] == D
    wide = [good[0], (0.01, 0.0, 0.02), (0.012, 0.0, 0.024)]
    card = _card(tmp_path, sim_index=_sim("l2_a000", wide))
    assert _one(card, "Fig. 2 (l2_a000)")["verdict"] == I
    assert _one(card, "Fig. 2, depth (l2_a000)")["verdict"] == I


def _llm(model, layers):
    return pd.DataFrame(
        {
            "model": model,
            "dataset": "d",
            "variant": "causal",
            "layer": range(1, len(layers) + 1),
            "index": [x[0] for x in layers],
            "index_debiased": [x[0] for x in layers],
            "ci_lo": [x[1] for x in layers],
            "ci_hi": [x[2] for x in layers],
        }
    )


def test_fig5_rows_score_the_layer_1_contrast(tmp_path):
    noise, pattern = (0.001, 0.0, 0.003), (0.3, 0.25, 0.35)
    table = pd.concat(
        [
            _llm("good", [noise, pattern, pattern, pattern]),
            _llm("l1", [pattern, pattern, pattern]),  # layer 1 carries the pattern too
            _llm("flat", [noise, pattern, noise, pattern]),  # one later layer at noise
            _llm("wide", [noise, pattern, (0.02, 0.0, 0.05)]),
        ]
    )
    card = _card(tmp_path, llm_index=table)
    assert _one(card, "Fig. 5 (good, d)")["verdict"] == R
    assert _one(card, "Fig. 5 (l1, d)")["verdict"] == D
    assert _one(card, "Fig. 5 (flat, d)")["verdict"] == D
    assert _one(card, "Fig. 5 (wide, d)")["verdict"] == I
    assert "2 of 3 above 0.01" in _one(card, "Fig. 5 (flat, d)")["measured"]


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


def _llm_p1(model, l1diff, bands, share1=(0.1, 0.05, 0.15), twin=None, twin_diff=None):
    """llm_index rows with the share and first-keys columns: ``l1diff`` one (est, lo, hi) of
    share(L) - share(1) per layer from 2 on, ``bands`` one (est, lo, hi) per layer from 1 on."""
    n = len(bands)
    nan3 = (math.nan,) * 3
    diffs = [nan3, *l1diff]
    df = pd.DataFrame(
        {
            "model": model,
            "dataset": "d",
            "variant": "causal",
            "layer": range(1, n + 1),
            "share": [share1[0] + d[0] if i else share1[0] for i, d in enumerate(diffs)],
            "share_lo": share1[1],
            "share_hi": share1[2],
            "share_minus_l1": [d[0] for d in diffs],
            "share_minus_l1_lo": [d[1] for d in diffs],
            "share_minus_l1_hi": [d[2] for d in diffs],
            "band_keys": 4,
            "band": [b[0] for b in bands],
            "band_lo": [b[1] for b in bands],
            "band_hi": [b[2] for b in bands],
            "band_with_sink": [b[0] - 1 for b in bands],
            "band_with_sink_lo": [b[1] - 1 for b in bands],
            "band_with_sink_hi": [b[2] - 1 for b in bands],
        }
    )
    df["share_pooled"], df["share_pooled_lo"], df["share_pooled_hi"] = 0.3, 0.25, 0.35
    if twin is not None:
        df["twin"] = twin
        df["share_pooled_minus_twin"] = twin_diff[0]
        df["share_pooled_minus_twin_lo"] = twin_diff[1]
        df["share_pooled_minus_twin_hi"] = twin_diff[2]
    return df


UP, FLAT, WIDE = (0.2, 0.1, 0.3), (-0.05, -0.08, -0.01), (0.01, -0.02, 0.04)
LOW, HIGH, ZERO = (-0.3, -0.4, -0.2), (0.3, 0.2, 0.4), (0.0, -0.1, 0.1)


def test_fig5_layer1_share_contrast_rows(tmp_path):
    table = pd.concat(
        [
            _llm_p1("good", [UP, UP, UP], [ZERO, LOW, LOW, LOW]),
            _llm_p1("flat", [UP, FLAT, UP], [ZERO, LOW, LOW, LOW]),  # layer 3 at layer 1's share
            _llm_p1("wide", [UP, WIDE, UP], [ZERO, LOW, LOW, LOW]),
        ]
    )
    card = _card(tmp_path, llm_index=table)
    assert _one(card, "Fig. 5 layer-1 contrast (good, d)")["verdict"] == R
    assert _one(card, "Fig. 5 layer-1 contrast (flat, d)")["verdict"] == D
    assert _one(card, "Fig. 5 layer-1 contrast (wide, d)")["verdict"] == I
    assert "2 of 3 above layer 1" in _one(card, "Fig. 5 layer-1 contrast (flat, d)")["measured"]
    one = _llm_p1("one", [], [ZERO])
    assert _one(_card(tmp_path, llm_index=one), "Fig. 5 layer-1 contrast (one, d)")["verdict"] == I


def test_fig5_first_keys_rows_score_the_sign_at_layers_2_to_4(tmp_path):
    table = pd.concat(
        [
            _llm_p1("lower", [UP] * 4, [HIGH, LOW, LOW, LOW, HIGH]),  # layers 1, 5 not scored
            _llm_p1("bright", [UP] * 4, [ZERO, LOW, HIGH, LOW, LOW]),  # the heat-map reading
            _llm_p1("zero", [UP] * 4, [ZERO, LOW, ZERO, LOW, LOW]),  # a CI containing 0
            _llm_p1("short", [], [LOW]),  # only layer 1: none of the scored layers
        ]
    )
    card = _card(tmp_path, llm_index=table)
    row = _one(card, "Fig. 5 first keys (lower, d)")
    assert row["verdict"] == R
    assert "keys 1..4" in row["measured"] and "3 below 0, 1 above" in row["measured"]
    assert "with key 0 kept" in row["measured"]
    bright = _one(card, "Fig. 5 first keys (bright, d)")
    assert bright["verdict"] == D and "layer(s) 3" in bright["note"]
    assert "at or above 0" in bright["falsified_if"] and "2, 3, 4" in bright["falsified_if"]
    assert _one(card, "Fig. 5 first keys (zero, d)")["verdict"] == I
    assert _one(card, "Fig. 5 first keys (short, d)")["verdict"] == I
    # the paper's sign is data (targets.yaml): the other sign turns the verdicts around
    spec = S.load_targets()
    spec["targets"]["llm_first_keys"]["sign"] = "positive"
    paths = {"llm_index": tmp_path / "llm_index.csv"}
    flipped = S.build_scorecard(paths, targets=spec)
    assert _one(flipped, "Fig. 5 first keys (lower, d)")["verdict"] == D
    assert _one(flipped, "Fig. 5 first keys (zero, d)")["verdict"] == D  # layers 2, 4 below 0
    assert "at or below 0" in _one(flipped, "Fig. 5 first keys (zero, d)")["falsified_if"]


def test_new_paper1_rows_are_not_run_on_tables_made_before_their_columns(tmp_path):
    old = _llm("m", [(0.001, 0.0, 0.003), (0.3, 0.25, 0.35)])
    card = _card(tmp_path, llm_index=old)
    for label in ("Fig. 5 layer-1 contrast", "Fig. 5 first keys", "§3 amplification, share"):
        row = _one(card, label if "share" not in label else "§3 amplification, share (pretrained)")
        assert row["verdict"] == S.NOT_RUN and "aggregate_llm_stats" in row["note"], label
    assert _one(card, "Fig. 5 (m, d)")["verdict"] == R  # the logit-index row is unaffected


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


# --------------------------------------------------------------------------------------------
# Paper 2 row families


def _headline_rows(model: str, logits: np.ndarray, *, free: bool = False) -> pd.DataFrame:
    """headline rows of synthetic logit maps (prompt, T, T), through the real estimator (the
    reducer's per-prompt sums, the expected-map U-statistic, a bootstrap CI over prompts)."""
    import torch

    from causalpos.paper2.expected import expected_leakage
    from causalpos.paper2.reducers import LeakageReducer

    red = LeakageReducer(fits=("saturated+query",), windows=("all",), expected_stats=True)
    red.update(0, torch.tensor(logits[:, None], dtype=torch.float32), np.arange(len(logits)))
    est = expected_leakage(red.result(), target="logit", n_boot=500)
    return pd.DataFrame(
        [
            {"model": model, "dataset": "d", "variant": "causal", "window": "all"}
            | {"target": "logit", "reading": "expected-map", "position_free": free}
            | {k: float(est[f"exp_pooled{s}"]) for k, s in (("leakage", ""),)}
            | {"leakage_lo": float(est["exp_pooled_lo"]), "leakage_hi": float(est["exp_pooled_hi"])}
            | {"per_prompt": np.nan, "per_prompt_lo": np.nan, "per_prompt_hi": np.nan}
        ]
    )


def test_claim1_is_judged_against_the_position_free_control(tmp_path):
    T, n = 48, 24
    rng = np.random.default_rng(0)
    i, j = np.indices((T, T))
    causal = j <= i
    toeplitz = np.cos(0.3 * (i - j)) + 0.05 * (i - j) + 0.3 * rng.standard_normal((n, T, T))
    noise = rng.standard_normal((n, T, T))  # i.i.d. logits: no position at all
    absolute = noise + np.log1p(i) / 2  # a query-position effect
    control = rng.standard_normal((n, T, T)) + 2.0 * (i == j)  # position-free content
    mask = lambda y: np.where(causal, y, np.nan)  # noqa: E731
    table = pd.concat(
        [
            _headline_rows("toeplitz", mask(toeplitz)),
            _headline_rows("noise", mask(noise)),
            _headline_rows("absolute", mask(absolute)),
            _headline_rows("ctl", mask(control), free=True).assign(
                variant="identity_rope+bidirectional"
            ),
        ]
    )
    card = _card(tmp_path, headline=table)
    assert _one(card, "claim 1 (toeplitz, d)")["verdict"] == D
    # i.i.d. logits: the expected map is flat, its ΔR² a ratio of two noises; never reproduced
    assert _one(card, "claim 1 (noise, d)")["verdict"] == I
    assert _one(card, "claim 1 (absolute, d)")["verdict"] == R
    assert _one(card, "claim 1 (absolute, d)")["reading"] == "expected-map"
    # a twin is a baseline; a dataset without a control is not run
    twin = table.assign(init_of=np.where(table["model"] == "absolute", "trained-x", ""))
    assert _one(_card(tmp_path, headline=twin), "claim 1 (absolute, d)")["verdict"] == S.MEASURED
    # a trained model's control is preferred to an init model's uninformative one
    wide = _headline_rows("ctl-init", mask(noise), free=True).assign(init_of="ctl")
    with_init = pd.concat([table, wide])
    row = _one(_card(tmp_path, headline=with_init), "claim 1 (absolute, d)")
    assert row["verdict"] == R and "minus the control ctl " in row["measured"]
    alone = table[table["model"] != "ctl"]
    assert _one(_card(tmp_path, headline=alone), "claim 1 (absolute, d)")["verdict"] == S.NOT_RUN
    row = _one(card, "claim 1 (absolute, d)")
    assert "negative control's tolerance" in row["note"] and "control_model_units_hi" in row["note"]
    # a NoPE model: the claim is about RoPE decoders, not applicable (it stays in paper 2)
    nope = table.assign(positional=np.where(table["model"] == "absolute", "nope", ""))
    row = _one(_card(tmp_path, headline=nope), "claim 1 (absolute, d)")
    assert (row["verdict"], row["section"]) == (S.NOT_APPLICABLE, "paper 2")
    assert row["falsified_if"].startswith("none: not applicable") and "RoPE" in row["note"]


def _lead(model, leak, ctl=None, **kw):
    """A headline row (causal logit leakage ``leak`` = (est, lo, hi)) with, where given, the
    negative control in the model's units ``ctl`` = (est, lo, hi)."""
    row = {"model": model, "dataset": "d", "variant": "causal", "window": "all"}
    row |= {"target": "logit", "reading": "expected-map", "position_free": False}
    row |= {"leakage": leak[0], "leakage_lo": leak[1], "leakage_hi": leak[2]}
    row |= {"per_prompt": 0.1, "per_prompt_lo": 0.09, "per_prompt_hi": 0.11}
    if ctl is not None:
        row |= dict(zip(("control_model_units", "control_model_units_lo"), ctl[:2]))
        row["control_model_units_hi"] = ctl[2]
    return row | kw


def test_claim1_is_judged_against_the_control_in_the_models_units_where_the_table_has_it(
    tmp_path,
):
    ctl = (0.0004, -0.0016, 0.0026)
    free = _lead("free", (0.0, -0.001, 0.001), variant="identity_rope+bidirectional")
    head = pd.DataFrame(
        [
            _lead("above", (0.0086, 0.0050, 0.0129), ctl),  # lo above the control's hi
            _lead("below", (6.2e-4, 2.9e-4, 9.2e-4), ctl),  # a real effect, smaller than none
            _lead("overlap", (0.003, 0.001, 0.005), ctl),
            _lead("no-control", (0.05, 0.04, 0.06), (np.nan, np.nan, np.nan)),
            free | {"position_free": True},
        ]
    )
    card = _card(tmp_path, headline=head)
    above = _one(card, "claim 1 (above, d)")
    assert (
        above["verdict"] == R
        and "in the model's units 0.0004 [-0.0016, 0.0026]" in (above["measured"])
    )
    below = _one(card, "claim 1 (below, d)")
    assert below["verdict"] == D and "(0.0026)" in below["falsified_if"]
    assert _one(card, "claim 1 (overlap, d)")["verdict"] == I
    # no control in the model's units on this row: the largest position-free control, 0.01
    fallback = _one(card, "claim 1 (no-control, d)")
    assert fallback["verdict"] == R and "minus the control free" in fallback["measured"]
    # the old rule would have called "below" differs only through the borrowed 0.01 threshold;
    # without the columns the pipeline keeps that rule
    old = head.drop(columns=[c for c in head if c.startswith("control_model_units")])
    assert _one(_card(tmp_path, headline=old), "claim 1 (below, d)")["verdict"] == D
    # two landmark readings: one row each, each against its own control
    both = pd.concat(
        [
            head.assign(landmark="modelled"),
            head.assign(landmark="counted", control_model_units_hi=0.01),
        ]
    )
    card = _card(tmp_path, headline=both)
    assert _one(card, "claim 1 (above, d, landmark modelled)")["verdict"] == R
    assert _one(card, "claim 1 (above, d, landmark counted)")["verdict"] == I


def _ctl(variant, neg, planted=0.1, rec=(0.1, 0.08, 0.12), pp=(0.4, 0.3, 0.5)):
    return {"model": "m", "dataset": "d", "variant": variant, "target": "logit"} | {
        "negative": neg[0],
        "negative_lo": neg[1],
        "negative_hi": neg[2],
        "per_prompt": pp[0],
        "per_prompt_lo": pp[1],
        "per_prompt_hi": pp[2],
        "per_prompt_control": "failed",
        "planted": planted,
        "planted_estimate": rec[0],
        "planted_estimate_lo": rec[1],
        "planted_estimate_hi": rec[2],
    }


def test_control_rows_pass_fail_and_say_why(tmp_path):
    ctl = pd.DataFrame(
        [
            _ctl("a", (0.002, -0.01, 0.02)),  # covers 0: passes
            _ctl("b", (0.005, 0.003, 0.007)),  # excludes 0 but below the tolerance: passes
            _ctl("c", (0.2, 0.1, 0.3), rec=(0.3, 0.2, 0.25)),  # leaks; planted not recovered
            _ctl("d", (np.nan, np.nan, np.nan), planted=np.nan),
        ]
    )
    card = _card(tmp_path, controls=ctl)
    neg = lambda v: _one(card, f"negative control (m, d, {v}, logit)")  # noqa: E731
    pos = lambda v: _one(card, f"positive control (m, d, {v}, logit)")  # noqa: E731
    # controls pass or fail in their own section; never "reproduced"
    assert neg("a")["verdict"] == V.PASSED and neg("b")["verdict"] == V.PASSED
    assert neg("c")["verdict"] == V.FAILED
    assert neg("d")["verdict"] == V.FAILED and "not finite" in neg("d")["note"]
    assert pos("a")["verdict"] == V.PASSED and pos("c")["verdict"] == V.FAILED
    assert pos("d")["verdict"] == S.NOT_RUN
    ctl_rows = card[card["target"].str.contains(" control (m, d", regex=False)]
    assert len(ctl_rows) == 8 and set(ctl_rows["section"]) == {"controls"}
    assert set(ctl_rows["paper"]) == {"paper 2"}
    assert ctl_rows["falsified_if"].str.startswith("failed if").all()
    assert pos("a")["paper_value"] == "0.1 (planted)" and neg("a")["reading"] == "expected-map"
    assert "per-prompt reading 0.4 [0.3, 0.5] (failed)" in neg("a")["measured"]
    bad = ctl.assign(planted_estimate_lo=np.nan)
    row = _one(_card(tmp_path, controls=bad), "positive control (m, d, a, logit)")
    assert row["verdict"] == V.FAILED


def test_negative_controls_in_the_models_units_use_the_equivalence_bound(tmp_path):
    """With the model's units in the table, a control passes only when its upper limit lies
    below the bound (half the model's estimate): a control whose own ratio covers 0 but whose
    interval in the model's units reaches the bound fails (no power to tell the model from
    none); the counted reading on prompts with a fixed BOS is not run, and says why."""

    def units(lm, est, lo, hi, bound):
        p = f"negative_{lm}_"
        return {
            f"{p}model_units": est,
            f"{p}model_units_lo": lo,
            f"{p}model_units_hi": hi,
            f"{p}bound": bound,
        }

    ok = _ctl("a", (0.002, -0.01, 0.02)) | units("modelled", 0.0, -0.001, 0.002, 0.005)
    ok |= units("counted", 0.0, -0.002, 0.003, 0.01)
    wide = _ctl("b", (0.002, -0.01, 0.02)) | units("modelled", 0.001, -0.004, 0.006, 0.005)
    wide |= units("counted", 0.001, -0.004, 0.006, 0.01)
    card = _card(tmp_path, controls=pd.DataFrame([ok | {"fixed_bos": 0}, wide | {"fixed_bos": 1}]))
    neg = lambda v, lm: _one(card, f"negative control (m, d, {v}, logit, landmark {lm})")  # noqa: E731
    assert neg("a", "modelled")["verdict"] == V.PASSED
    assert neg("a", "counted")["verdict"] == V.PASSED
    assert neg("b", "modelled")["verdict"] == V.FAILED  # 0.006 >= 0.005
    assert (
        neg("b", "counted")["verdict"] == S.NOT_RUN and "fixed BOS" in neg("b", "counted")["note"]
    )
    assert "in the model's units" in neg("a", "modelled")["measured"]
    # a positive control whose interval reaches 0 has not passed
    zero = _ctl("c", (0.0, -0.01, 0.01), planted=0.05, rec=(0.04, -0.01, 0.09))
    card = _card(tmp_path, controls=pd.DataFrame([zero | units("modelled", 0, -1e-3, 1e-3, 0.01)]))
    assert _one(card, "positive control (m, d, c, logit)")["verdict"] == V.FAILED


def _h(rows) -> pd.DataFrame:
    """Rows of the headline decomposition table (log-attention, window all)."""
    return pd.DataFrame(rows).assign(window="all", target="logattn")


def _dec(model, dataset, share, half=0.02, condition="rope"):
    return {
        "model": model,
        "dataset": dataset,
        "condition": condition,
        "total": 0.1,
        "total_lo": 0.09,
        "total_hi": 0.11,
        "share_causal_mask": share,
        "share_causal_mask_lo": share - half,
        "share_causal_mask_hi": share + half,
    }


def test_decomposition_rows_claims_4_and_10(tmp_path):
    dec = pd.DataFrame(
        [
            _dec("llama-3.2-1b", "wiki", 0.80),
            _dec("llama-3.2-1b", "random", 0.50),
            _dec("meta-llama/Llama-3.2-3B", "wiki", 0.66),
            _dec("llama-3.1-8b", "wiki", 0.64, half=0.3),
            _dec("smollm2", "wiki", 0.04),
            _dec("smollm2", "random", 0.05),
        ]
    )
    card = _card(tmp_path, decomposition_headline=_h(dec))
    # claim 4 is read on the one-unit components table only (the reading matching the paper's)
    assert _one(card, "claim 4")["verdict"] == S.NOT_RUN
    comp = pd.DataFrame(
        [
            _comp("llama-3.2-1b", "counted", 0.80, 0.1),
            _comp("meta-llama/Llama-3.2-3B", "counted", 0.66, 0.1),
            _comp("llama-3.1-8b", "counted", 0.64, 0.1, half=0.3),
            _comp("smollm2", "counted", 0.04, 0.1),
        ]
    )
    card = _card(tmp_path, decomposition_headline=_h(dec), decomposition_components=comp)
    assert _one(card, "claim 4 (llama-3.2-1b, wiki)")["verdict"] == R  # 82 % in the paper
    assert _one(card, "claim 4 (meta-llama/Llama-3.2-3B, wiki)")["verdict"] == R  # 64 %
    assert _one(card, "claim 4 (llama-3.1-8b, wiki)")["verdict"] == I
    smol = _one(card, "claim 4 (smollm2, wiki)")
    assert smol["verdict"] == S.MEASURED and smol["paper_value"] == "n/a"
    assert "[0.72, 0.92]" in _one(card, "claim 4 (llama-3.2-1b, wiki)")["falsified_if"]
    assert _one(card, "claim 10 (llama-3.2-1b)")["verdict"] == D  # 0.80 vs 0.50
    assert _one(card, "claim 10 (smollm2)")["verdict"] == R


def _comp(model, landmark, paper_share, free_share, half=0.02):
    d = {"model": model, "dataset": "wiki", "condition": "rope", "landmark": landmark}
    for name, v in (("share_causal_mask_paper", paper_share), ("share_causal_mask", free_share)):
        d.update({name: v, f"{name}_lo": v - half, f"{name}_hi": v + half})
    return d | {"window": "all", "share_artefact": 0.9}


def test_claim4_is_judged_on_the_counted_landmark_and_the_papers_reading(tmp_path):
    """Claim 4 reads the components table's paper reading with the key-0 column counted (the
    reconstructed fit); the artefact-free share and the modelled landmark are only reported.
    A share far from the paper's comes out differs whatever the other readings say."""
    comp = pd.DataFrame(
        [
            _comp("llama-3.2-1b", "counted", 0.80, 0.10),
            _comp("llama-3.2-1b", "modelled", 0.20, 0.05),
            _comp("meta-llama/Llama-3.2-3B", "counted", 0.30, 0.64),
            _comp("meta-llama/Llama-3.2-3B", "modelled", 0.64, 0.64),
        ]
    )
    dec = pd.DataFrame(
        [_dec("llama-3.2-1b", "wiki", 0.1), _dec("meta-llama/Llama-3.2-3B", "wiki", 0.64)]
    )
    card = _card(tmp_path, decomposition_headline=_h(dec), decomposition_components=comp)
    one = _one(card, "claim 4 (llama-3.2-1b, wiki)")
    assert one["verdict"] == R  # 0.80 [0.78, 0.82] within 82 % ± 10 points
    assert "landmark counted" in one["measured"] and "artefact-free 0.1" in one["measured"]
    assert _one(card, "claim 4 (meta-llama/Llama-3.2-3B, wiki)")["verdict"] == D  # 0.30 vs 64 %
    only_modelled = comp[comp["landmark"] == "modelled"]
    card = _card(tmp_path, decomposition_headline=_h(dec), decomposition_components=only_modelled)
    assert _one(card, "claim 4 (llama-3.2-1b, wiki)")["verdict"] == S.NOT_RUN


def _card_with(tmp_path, targets, **tables) -> pd.DataFrame:
    """:func:`_card` under the targets ``targets`` (a mapping, e.g. a changed copy)."""
    paths = {}
    for name, df in tables.items():
        paths[name] = tmp_path / f"{name}.csv"
        df.to_csv(paths[name], index=False)
    return S.build_scorecard(paths, targets=targets)


def _only_identity_free() -> dict:
    """The targets with only identity RoPE position-free (scrambled RoPE then carries position
    and is compared with RoPE, as a run whose scramble is shared by every prompt would)."""
    spec = S.load_targets()
    spec["targets"]["table6_controls"]["position_free_conditions"] = ["identity_rope"]
    return spec


def test_table6_position_free_conditions_are_checks_and_the_forced_comparison_is_not_a_test(
    tmp_path,
):
    check = "Table 6, position-free condition"
    rows = [
        _dec("m", "d", 0.24, half=0.17, condition="rope"),
        _dec("m", "d", 1.00, half=0.20, condition="identity_rope"),
        _dec("m", "d", 1.00, half=0.08, condition="scrambled_rope"),
        _dec("n", "d", 0.60, condition="rope"),
        _dec("n", "d", 0.61, condition="identity_rope"),  # reads position where none is
        _dec("o", "d", 0.60, condition="rope"),
        _dec("o", "d", float("nan"), condition="identity_rope") | {"obs_share_softmax": 0.6},
    ]
    card = _card(tmp_path, decomposition_headline=_h(rows))
    # the position-free conditions' share is 1 by construction: checks, never reproductions
    for cond in ("identity_rope", "scrambled_rope"):
        row = _one(card, f"{check} (m, d, {cond})")
        assert (row["verdict"], row["section"], row["paper"]) == (V.HOLDS, "checks", "paper 2")
        assert row["falsified_if"].startswith("fails if the CI")
    # ... and a check that can fail: a "position-free" condition whose share excludes 1
    assert _one(card, f"{check} (n, d, identity_rope)")["verdict"] == V.FAILS
    # comparing RoPE with them is forced to differ whenever RoPE's residual is > 0: not a test
    est = [(0.24, 0.07, 0.41), (1.0, 0.8, 1.2), (1.0, 0.92, 1.08)]
    assert V.nearly_identical(est, 0.10) == D  # what the forced comparison would say
    m = _one(card, "Table 6 (m, d)")
    assert m["verdict"] == S.NOT_APPLICABLE and m["section"] == "paper 2"
    assert m["falsified_if"].startswith("none: not applicable") and "rope: 0.24" in m["measured"]
    # no fallback to another quantity when the share is missing: the check is not run
    o = _one(card, f"{check} (o, d, identity_rope)")
    assert o["verdict"] == S.NOT_RUN and o["section"] == "checks"
    assert _one(card, "Table 6 (o, d)")["verdict"] == S.NOT_APPLICABLE
    only_rope = pd.DataFrame([_dec("m", "d", 0.6)])
    assert (
        _one(_card(tmp_path, decomposition_headline=_h(only_rope)), "Table 6")["verdict"]
        == S.NOT_RUN
    )
    # a NoPE model: every condition is position-free
    nope = _h(rows[:3]).assign(positional="nope")
    card = _card(tmp_path, decomposition_headline=nope)
    assert _one(card, f"{check} (m, d, rope)")["verdict"] == V.FAILS  # 0.24: not 1
    assert _one(card, "Table 6 (m, d)")["verdict"] == S.NOT_APPLICABLE
    # the conditions that can carry position are compared, and can differ
    two = _card_with(tmp_path, _only_identity_free(), decomposition_headline=_h(rows[:3]))
    assert _one(two, "Table 6 (m, d)")["verdict"] == D  # rope 0.24 vs scrambled 1.0
    assert _one(two, f"{check} (m, d, identity_rope)")["verdict"] == V.HOLDS


def _paired(rows, diffs):
    """Rows of the rope_controls table with paired difference columns ``diffs[(cond, ref)]``."""
    conds = [r["condition"] for r in rows]
    out = []
    for r in rows:
        r = dict(r, status="measured")
        for ref in conds:
            d, lo, hi = diffs.get((r["condition"], ref), (0.0, 0.0, 0.0))
            name = f"share_causal_mask_minus_{ref}"
            r.update({name: d, f"{name}_lo": lo, f"{name}_hi": hi})
        out.append(r)
    return out


def test_table6_judged_by_the_paired_differences_and_missing_runs_are_not_run(tmp_path):
    # rope and scrambled RoPE compared (identity RoPE alone position-free, a check): wide shares
    # (independently they decide nothing), tight paired differences
    spec = _only_identity_free()
    rows = [
        _dec("m", "d", 0.60, half=0.2, condition="rope"),
        _dec("m", "d", 1.00, half=0.2, condition="identity_rope"),
        _dec("m", "d", 0.62, half=0.2, condition="scrambled_rope"),
    ]
    close = {
        ("rope", "identity_rope"): (-0.4, -0.43, -0.37),
        ("rope", "scrambled_rope"): (-0.02, -0.05, 0.01),
        ("identity_rope", "scrambled_rope"): (0.38, 0.35, 0.41),
    }
    card = _card_with(tmp_path, spec, decomposition_headline=_h(_paired(rows, close)))
    row = _one(card, "Table 6 (m, d)")
    assert row["verdict"] == R
    assert "largest paired difference" in row["measured"]
    far = dict(close) | {("rope", "scrambled_rope"): (-0.3, -0.35, -0.25)}
    card = _card_with(tmp_path, spec, decomposition_headline=_h(_paired(rows, far)))
    assert _one(card, "Table 6 (m, d)")["verdict"] == D
    # without the paired columns the shares' CIs are combined as independent: inconclusive here
    card = _card_with(tmp_path, spec, decomposition_headline=_h(rows))
    assert _one(card, "Table 6 (m, d)")["verdict"] == I
    # a compared condition whose bidirectional run is missing: not run, saying which run
    missing = _paired(rows[:2], close) + [
        _dec("m", "d", float("nan"), condition="scrambled_rope")
        | {"status": "not run: no 'scrambled_rope+bidirectional' run"}
    ]
    card = _card_with(tmp_path, spec, decomposition_headline=_h(missing))
    row = _one(card, "Table 6 (m, d)")
    assert row["verdict"] == S.NOT_RUN and "'scrambled_rope+bidirectional'" in row["note"]


def test_claims_4_and_10_skip_conditions_not_run_and_compare_like_prefixes(tmp_path):
    ok = {"status": "measured"}
    dec = pd.DataFrame(
        [
            _dec("smol", "text-bos", 0.50) | ok | {"prefix_ids": "[1]"},
            _dec("smol", "random-bos", 0.52) | ok | {"prefix_ids": "[1]"},
            _dec("smol", "text", 0.10) | ok | {"prefix_ids": "[]"},  # token 0 varies
            {"model": "llama-3.2-1b", "dataset": "wiki", "condition": "rope", "prefix_ids": "[1]"}
            | {"status": "not run: no 'bidirectional' run"},
        ]
    )
    card = _card(tmp_path, decomposition_headline=_h(dec))
    llama = _one(card, "claim 4 (llama-3.2-1b, wiki)")
    assert llama["verdict"] == S.NOT_RUN and "'bidirectional'" in llama["note"]
    # text vs random tokens after the same BOS: the BOS / no-BOS contrast is not a content effect
    assert _one(card, "claim 10 (smol, token-0 prefix [1])")["verdict"] == R
    assert not card["target"].str.contains("claim 10 (smol, token-0 prefix []", regex=False).any()


def _bos(model, intervention, effect, window="early16", half=0.05):
    return {
        "model": model,
        "dataset": "d",
        "intervention": intervention,
        "bos_window": window,
        "target": "logattn",
        "effect": effect,
        "effect_lo": effect - half,
        "effect_hi": effect + half,
    }


def _p0(model, std, fixed=1, layers=3):
    return pd.DataFrame(
        {
            "model": model,
            "dataset": "d",
            "condition": "causal",
            "layer": range(layers),
            "std": [0.0] + [std] * (layers - 1),
            "max_abs_dev": [0.0] + [10 * std] * (layers - 1),
            "token0_fixed": fixed,
        }
    )


def test_table9_bos_rows(tmp_path):
    bos = pd.DataFrame(
        [
            _bos("a", "mean", 0.42),
            _bos("a", "mean", 0.0, window="early64"),  # the smallest early window is scored
            _bos("a", "mean", 0.9, window="late"),
            _bos("a", "all_gaussian", 0.30),
            _bos("a", "zeros", 0.1),
            _bos("q", "mean", 0.40),
        ]
    )
    p0 = pd.concat([_p0("a", 0.0), _p0("q", 0.3, fixed=0)])
    card = _card(tmp_path, bos_effects=bos, position0=p0)
    assert _rule(card, "Table 9 (a, mean, early16)") == R
    assert _rule(card, "Table 9 (a, all_gaussian, early16)") == D  # paper -28 %
    assert _one(card, "Table 9 (a, zeros, early16)")["verdict"] == S.MEASURED
    assert _one(card, "Table 9 (q, mean, early16)")["verdict"] == S.NOT_APPLICABLE


def test_table9_scores_the_residual_stream_component_only(tmp_path):
    """Table 9's C_res is the bidirectional-ablation leakage: interventions measured on a causal
    run's logits are not scored against the paper; missing runs are not run."""

    def row(intervention, replacement, measure, effect, status="measured", window="early16"):
        return _bos("a", intervention, effect, window=window) | {
            "replacement": replacement,
            "measure": measure,
            "status": status,
        }

    bos = pd.DataFrame(
        [
            row("mean+bidirectional", "mean", "residual_stream", 0.41),
            row("all_gaussian+bidirectional", "all_gaussian", "residual_stream", -0.30),
            row("zeros+bidirectional", "zeros", "residual_stream", 0.2),
            row("mean", "mean", "logit", 0.9),  # observational: not Table 9's quantity
            row(
                "token+bidirectional", "token", "residual_stream", np.nan, "not run: no 'x' run", ""
            ),
        ]
    )
    card = _card(tmp_path, bos_effects=bos, position0=_p0("a", 0.0))
    assert _rule(card, "Table 9 (a, mean+bidirectional, early16)") == R  # paper 40 %
    assert _rule(card, "Table 9 (a, all_gaussian+bidirectional, early16)") == R
    assert _one(card, "Table 9 (a, zeros+bidirectional, early16)")["verdict"] == S.MEASURED
    assert not card["target"].str.contains("Table 9 (a, mean,", regex=False).any()
    token = _one(card, "Table 9 (a, token+bidirectional)")
    assert token["verdict"] == S.NOT_RUN and "'x'" in token["note"]
    causal_only = bos[bos["measure"] == "logit"]
    row = _one(_card(tmp_path, bos_effects=causal_only), "Table 9")
    assert row["verdict"] == S.NOT_RUN and "+bidirectional" in row["note"]


def test_table_names_repeated_in_the_scorecard_equal_the_librarys():
    from causalpos.paper2 import bos, tables

    assert S.TABLE_MEASURED == tables.MEASURED
    assert S.RESIDUAL_STREAM == bos.RESIDUAL_STREAM


def test_claim7_position0_rows(tmp_path):
    p0 = pd.concat([_p0("fixed", 0.0), _p0("leaky", 0.3), _p0("varies", 0.3, fixed=0)])
    card = _card(tmp_path, position0=p0)
    # with a fixed token 0 the std is 0 by construction (causal mask): a check, not a test
    fixed = _one(card, "claim 7 (fixed, d)")
    assert (fixed["verdict"], fixed["section"]) == (V.HOLDS, "checks")
    leaky = _one(card, "claim 7 (leaky, d)")  # fixed token 0, nonzero std: the check fails
    assert (leaky["verdict"], leaky["section"]) == (V.FAILS, "checks")
    varies = _one(card, "claim 7 (varies, d)")
    assert (varies["verdict"], varies["section"]) == (S.NOT_APPLICABLE, "paper 2")
    assert fixed["falsified_if"].startswith("fails if token 0 is fixed")
    # a table that does not say whether token 0 is fixed decides nothing
    card = _card(tmp_path, position0=_p0("old", 0.0).drop(columns="token0_fixed"))
    old = _one(card, "claim 7 (old, d)")
    assert old["verdict"] == S.NOT_RUN and "token0_fixed" in old["note"]


# --------------------------------------------------------------------------------------------
# Every row states its falsification condition; the Markdown counts the rows that could fail


def test_markdown_counts_the_rows_that_could_have_failed_per_section(tmp_path):
    from causalpos.scorecard.markdown import JUDGED

    card = _card(
        tmp_path,
        theory=theory_table(None, n=5, alphas=[0.0]),
        position0=pd.concat([_p0("fixed", 0.0), _p0("varies", 0.3, fixed=0)]),
    )
    md = S.to_markdown(card)
    assert md.startswith("# Reproduction scorecard")
    for section, g in card.groupby("section"):
        n = int(g["verdict"].isin(JUDGED[section]).sum())
        assert f"**{section}**: {len(g)} rows; {n} " in md
    # the closed form, the layer-2 monotonicity and claim 7 with a fixed BOS are checks
    assert "- **checks**: 3 rows; 3 checks of identities (3 holds, 0 fails)" in md
    p2 = card[card["section"] == "paper 2"]
    assert "0 tests of the paper's claims (0 reproduced, 0 differs, 0 inconclusive)" in md
    assert f"{len(p2)} are not tests" in md
    assert "- **controls**: 2 rows; 0 controls (0 passed, 0 failed); 2 are not tests" in md
    # one table per section, in order
    heads = [md.index(f"\n## {s}\n") for s in S.SECTIONS]
    assert heads == sorted(heads)
    assert "falsified if" in md
    assert sum(md.count(f"\n| {p} |") for p in card["paper"].unique()) == len(card)
    assert (card["falsified_if"].str.len() > 0).all()


def test_position0_table_says_whether_token0_is_fixed():
    """Claim 7's premise comes from the position-0 store's attrs into its table."""
    import xarray as xr

    from causalpos.paper2.tables import paper2_tables

    def store(fixed):
        ds = xr.Dataset(
            {"std": (("condition", "layer"), np.zeros((1, 2)))},
            coords={"condition": ["causal"], "layer": [0, 1]},
        )
        if fixed is not None:
            ds.attrs["token0_fixed"] = fixed
        return ds

    tab = paper2_tables({}, {("a", "d"): store(1), ("b", "d"): store(0), ("c", "d"): store(None)})
    p0 = tab["position0"].groupby("model")["token0_fixed"].first()
    assert p0["a"] == 1 and p0["b"] == 0 and np.isnan(p0["c"])


# --------------------------------------------------------------------------------------------
# Claims 3, 6, 8 and the sink-reading heads


def test_at_most():
    assert V.at_most((-0.05, 0.08), 0.10) == R
    assert V.at_most((0.15, 0.40), 0.10) == D
    assert V.at_most((-0.05, 0.25), 0.10) == I
    assert V.at_most((math.nan, 0.0), 0.10) == I


def _c3dec(model, share, half, positional="", init_of="", dataset="d"):
    return {
        "model": model,
        "dataset": dataset,
        "condition": "rope",
        "status": "measured",
        "positional": positional,
        "init_of": init_of,
        "share_residual": share,
        "share_residual_lo": share - half,
        "share_residual_hi": share + half,
        "residual": 0.01,
        "residual_lo": 0.005,
        "residual_hi": 0.015,
    }


def _c3trend(model, slope, half, positional="", init_of="", variant="bidirectional"):
    return {
        "model": model,
        "dataset": "d",
        "variant": variant,
        "target": "logattn",
        "trend": "slope",
        "estimate": slope,
        "lo": slope - half,
        "hi": slope + half,
        "positional": positional,
        "init_of": init_of,
    }


def test_claim3_rows_on_trained_variants_and_paper_models(tmp_path):
    dec = pd.DataFrame(
        [
            _c3dec("trained-rope", 0.40, 0.05, "rope"),
            _c3dec("trained-ntk", 0.20, 0.05, "ntk"),  # clearly below: reproduced
            _c3dec("trained-ntk-init", 0.90, 0.05, "ntk", "trained-rope"),  # a twin: ignored
            _c3dec("qwen2.5-7b", 0.30, 0.05, dataset="wiki"),
            _c3dec("llama-3.2-1b", 0.50, 0.05, dataset="wiki"),  # above the standard: differs
            _c3dec("llama-3.2-3b", 0.30, 0.20, dataset="wiki"),  # straddles: inconclusive
        ]
    )
    trend = pd.DataFrame(
        [
            _c3trend("trained-swa", 0.02, 0.01, "swa"),
            _c3trend("trained-swa", -0.5, 0.01, "swa", variant="causal"),  # not the component
            _c3trend("trained-swa-init", 0.0, 0.01, "swa", "trained-swa"),
            _c3trend("trained-rope", 0.01, 0.01, "rope"),
            _c3trend("mistral-7b", -0.02, 0.01),  # shrinking with depth: differs
        ]
    )
    card = _card(tmp_path, decomposition_headline=_h(dec), depth_trend=trend)
    assert _one(card, "claim 3 (NTK) (trained-ntk vs trained-rope, d)")["verdict"] == R
    assert _one(card, "claim 3 (NTK) (llama-3.2-1b vs qwen2.5-7b, wiki)")["verdict"] == D
    assert _one(card, "claim 3 (NTK) (llama-3.2-3b vs qwen2.5-7b, wiki)")["verdict"] == I
    assert not card["target"].str.contains("trained-ntk-init").any()
    swa = _one(card, "claim 3 (sliding window) (trained-swa, d)")
    assert _rule(card, swa["target"]) == R and "trained-swa-init" in swa["measured"]
    # the per-prompt depth trend fails its negative control: measured, the rule's verdict noted
    assert swa["verdict"] == S.MEASURED and swa["reading"] == "per-prompt"
    mistral = _one(card, "claim 3 (sliding window) (mistral-7b, d)")
    assert _rule(card, mistral["target"]) == D and "masks nothing" in mistral["note"]
    card = _card(tmp_path, depth_trend=pd.DataFrame([_c3trend("trained-swa", 0.0, 0.01, "swa")]))
    assert _rule(card, "claim 3 (sliding window) (trained-swa, d)") == I
    # no NTK / standard pair and no sliding-window model: not run, saying why
    card = _card(
        tmp_path,
        decomposition_headline=_h([_c3dec("trained-rope", 0.4, 0.05, "rope")]),
        depth_trend=pd.DataFrame([_c3trend("trained-rope", 0.01, 0.01, "rope")]),
    )
    ntk, swa = _one(card, "claim 3 (NTK)"), _one(card, "claim 3 (sliding window)")
    assert ntk["verdict"] == swa["verdict"] == S.NOT_RUN
    assert "same dataset" in ntk["note"] and "sliding-window model" in swa["note"]


def _c6base(model, diff, half, init_of=""):
    rows = []
    for b, est in (("saturated", 0.05), ("linear", 0.05 + diff), ("linear_minus_saturated", diff)):
        for m in ("raw", "corrected"):
            rows.append(
                {
                    "model": model,
                    "dataset": "d",
                    "variant": "causal",
                    "target": "logit",
                    "baseline": b,
                    "measure": m,
                    "estimate": est,
                    "lo": est - half,
                    "hi": est + half,
                    "init_of": init_of,
                }
            )
    return rows


def test_claim6_linear_baseline_rows(tmp_path):
    base = pd.DataFrame(
        _c6base("up", 0.03, 0.01)
        + _c6base("down", -0.03, 0.01)
        + _c6base("wide", 0.0, 0.05)
        + _c6base("twin", 0.03, 0.01, init_of="up")
    )
    card = _card(tmp_path, baseline_comparison=base)
    assert _rule(card, "claim 6 (up, d)") == R
    assert _rule(card, "claim 6 (down, d)") == D
    assert _rule(card, "claim 6 (wide, d)") == I
    assert _one(card, "claim 6 (twin, d)")["verdict"] == S.MEASURED
    assert "linear - saturated" in _one(card, "claim 6 (up, d)")["measured"]
    assert _one(_card(tmp_path), "claim 6")["verdict"] == S.NOT_RUN


def _c8probe(model, acc, n=32, null=0.2, fixed=0, note=""):
    from causalpos.stats import wilson_ci

    lo, hi = wilson_ci(acc, n) if np.isfinite(acc) else (np.nan, np.nan)
    return {
        "model": model,
        "dataset": "d",
        "token0_fixed": fixed,
        "probe_n_prompts": n,
        "probe_n_classes": 5,
        "probe_note": note,
        "best_layer": 2,
        "best_layer_accuracy": 0.3,
        "best_layer_p_value": 0.2,
        "embedding_accuracy": 0.3,
        "embedding_p_value": 0.2,
        "n_sink_heads": 3,
        "sink_probe_accuracy": acc,
        "sink_probe_chance": 0.2,
        "sink_probe_null_mean": null,
        "sink_probe_p_value": 0.5,
        "sink_probe_accuracy_lo": lo,
        "sink_probe_accuracy_hi": hi,
        "sink_probe_note": "",
    }


def test_claim8_probe_rows(tmp_path):
    pr = pd.DataFrame(
        [
            _c8probe("null-level-many", 0.2, n=2000),  # Wilson half-width ~0.02: reproduced
            _c8probe("decodes", 0.7),  # Wilson lower bound ~0.52 > 0.2 + 0.1: differs
            _c8probe("few", 0.2),  # 32 prompts: the CI reaches above the margin
            _c8probe("bos", 0.2, fixed=1),
            _c8probe("refused", np.nan, note="no probe: 1 label class(es) with >= 5 prompts"),
        ]
    )
    card = _card(tmp_path, position0_probes=pr)
    assert _one(card, "claim 8 (null-level-many, d)")["verdict"] == R
    assert _one(card, "claim 8 (decodes, d)")["verdict"] == D
    assert _one(card, "claim 8 (few, d)")["verdict"] == I
    bos = _one(card, "claim 8 (bos, d)")
    assert bos["verdict"] == S.NOT_APPLICABLE and "by construction" in bos["note"]
    refused = _one(card, "claim 8 (refused, d)")
    assert refused["verdict"] == S.NOT_RUN and "1 label class" in refused["note"]
    old = pr.drop(columns=["sink_probe_accuracy_lo", "token0_fixed"])
    assert _one(_card(tmp_path, position0_probes=old), "claim 8")["verdict"] == S.NOT_RUN


def _sinkrow(model, n, lo, hi, init_of="", tau=0.5):
    return {
        "model": model,
        "dataset": "d",
        "tau": tau,
        "variant": "causal",
        "n_sink_heads": n,
        "n_sink_heads_lo": lo,
        "n_sink_heads_hi": hi,
        "fraction": n / 100,
        "n_heads": 100,
        "init_of": init_of,
    }


def test_sink_head_rows(tmp_path):
    sk = pd.DataFrame(
        [
            _sinkrow("a", 12, 10, 14),
            _sinkrow("a-random", 0, 0, 0, "a"),
            _sinkrow("a", 0, 0, 0, tau=0.8),  # another tau: not this row
            _sinkrow("b", 0, 0, 0),
            _sinkrow("b-random", 1, 0, 2, "b"),  # no more than the twin: differs
            _sinkrow("c", 2, 0, 4),
            _sinkrow("c-init", 1, 0, 2, "c"),  # overlapping: inconclusive
            _sinkrow("lonely", 5, 4, 6),
        ]
    )
    card = _card(tmp_path, sink_heads=sk)
    assert _one(card, "sink-reading heads (a, d, tau 0.5)")["verdict"] == R
    assert _one(card, "sink-reading heads (b, d, tau 0.5)")["verdict"] == D
    assert _one(card, "sink-reading heads (c, d, tau 0.5)")["verdict"] == I
    lonely = _one(card, "sink-reading heads (lonely, d, tau 0.5)")
    assert lonely["verdict"] == S.NOT_RUN and "twin" in lonely["note"]


def test_probe_table_carries_the_refusal_and_wilson_ci():
    """paper2_position0_probes.csv says why a probe was refused and gives accuracy CIs."""
    import xarray as xr

    from causalpos.paper2.tables import paper2_tables
    from causalpos.stats import wilson_ci

    acc = np.array([[0.2, 0.5, 0.4]])
    ds = xr.Dataset(
        {
            "std": (("condition", "layer"), np.zeros((1, 3))),
            **{
                f"probe_{k}": (("condition", "layer"), v)
                for k, v in {
                    "accuracy": acc,
                    "chance": np.full((1, 3), 0.2),
                    "null_mean": np.full((1, 3), 0.21),
                    "p_value": np.array([[0.6, 0.01, 0.05]]),
                }.items()
            },
        },
        coords={"condition": ["causal"], "layer": [0, 1, 2]},
        attrs={
            "token0_fixed": 0,
            "probe_n_prompts": 30,
            "probe_n_classes": 5,
            "probe_condition": "causal",
            "probe_note": "5 classes, 30 prompts (2 smaller classes dropped)",
            "n_sink_heads": 2,
            "sink_probe_accuracy": 0.3,
        },
    )
    row = paper2_tables({}, {("m", "d"): ds})["position0_probes"].iloc[0]
    assert row["best_layer"] == 1 and row["best_layer_accuracy"] == 0.5
    assert row["embedding_accuracy"] == 0.2 and row["token0_fixed"] == 0
    assert "dropped" in row["probe_note"]
    assert (row["best_layer_accuracy_lo"], row["best_layer_accuracy_hi"]) == wilson_ci(0.5, 30)
    assert (row["sink_probe_accuracy_lo"], row["sink_probe_accuracy_hi"]) == wilson_ci(0.3, 30)
    lo, hi = wilson_ci(0.5, 30)
    assert lo == pytest.approx(0.3315, abs=1e-3) and hi == pytest.approx(0.6685, abs=1e-3)


def test_readme_summary_counts_per_section_and_names_the_findings(tmp_path):
    from causalpos.cli import main

    card = pd.DataFrame(
        {
            "section": ["paper 1", "checks", "checks", "paper 2", "paper 2", "controls"]
            + ["controls"],
            "paper": ["paper 1", "paper 1", "paper 2", "paper 2", "paper 2", "paper 2", "paper 2"],
            "target": ["Fig. 1 (3,2)", "§3 closed form", "claim 7 (m, d)", "claim 8", "Table 9"]
            + ["negative control (m)", "positive control (m)"],
            "claim": ["c"] * 7,
            "paper_value": ["0.150", "exact", "0.0000", "qualitative", "40 %", "0", "0.1"],
            "measured": ["0.15082", "9e-16", "0.3", "n/a", "12 % [3, 20]", "0 [-1, 1]", "0 [0, 0]"],
            "verdict": ["differs", "holds", "fails", "not applicable", "inconclusive", "passed"]
            + ["failed"],
            "falsified_if": ["x"] * 7,
            "note": [""] * 7,
        }
    )
    text = S.readme_summary(card)
    assert text.startswith(S.SUMMARY_BEGIN) and text.rstrip().endswith(S.SUMMARY_END)
    assert (
        "7 rows. The papers' claims: 2 tests (0 reproduced, 1 differs, 1 inconclusive); beside "
        "them 2 controls (1 passed, 1 failed) and 2 checks of identities (1 holds, 1 fails); the "
        "other 1 rows are not tests"
    ) in text
    assert "[docs/findings.md](docs/findings.md#in-short)" in text
    assert "[the scorecard](results/report/scorecard.md)" in text
    assert "- **paper 1**: 1 rows; 1 tests of the paper's claims (0 reproduced, 1 differs" in text
    assert "- **controls**: 2 rows; 2 controls (1 passed, 1 failed)\n" in text
    assert "- **checks**: 2 rows; 2 checks of identities (1 holds, 1 fails)\n" in text
    # controls and checks never count as reproductions
    assert not re.search(r"\*\*(controls|checks)\*\*.*reproduced", text)
    assert "*Differs* (1):\n\n- paper 1, Fig. 1 (3,2): 0.15082 (paper: 0.150)\n" in text
    # inconclusive rows are counted, not listed (the scorecard and findings list them)
    assert "Inconclusive" not in text and "Table 9" not in text
    assert (
        "*Failed controls* (1):\n\n- paper 2, positive control (m): 0 [0, 0] (paper: 0.1)\n"
    ) in text
    assert "*Failing checks* (1):\n\n- paper 2, claim 7 (m, d): 0.3 (paper: 0.0000)\n" in text
    # the CLI rewrites exactly the block between the markers
    csv = tmp_path / "scorecard.csv"
    card.to_csv(csv, index=False)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{S.SUMMARY_BEGIN}\nold\n{S.SUMMARY_END}\nafter\n")
    assert main(["summary", str(csv), "--update", str(readme)]) == 0
    new = readme.read_text()
    assert new.startswith("# x\n\nbefore\n" + S.SUMMARY_BEGIN) and new.endswith("\nafter\n")
    assert "\nold\n" not in new and "The papers' claims: 2 tests (" in new
    with pytest.raises(ValueError, match="no summary block"):
        S.update_readme("# no markers\n", text)
    # a scorecard written before the sections: say what to do
    with pytest.raises(ValueError, match="no section column.*rerun the scorecard rule"):
        S.readme_summary(card.drop(columns="section"))


def test_a_digest_line_is_the_rows_first_clause_within_the_short_limit():
    """One line per row: paper, target, the first clause of the measured value (asides in
    brackets and everything after the first ';' dropped), the paper's value; cut after a whole
    interval, never past :data:`SHORT_LINE`, where the row is long."""
    from causalpos.scorecard.markdown import MIN_MEASURED, SHORT_LINE, short_line

    row = {
        "paper": "paper 1",
        "target": "Fig. 5 first keys (m, d)",
        "measured": "keys 1..4: L2 -0.198 [-0.302, -0.0944]; L3 0.926 [0.817, 1.04] (logit units)",
        "paper_value": "first keys lower (text; one reading (heat maps) shows them brighter)",
    }
    assert short_line(row) == (
        "- paper 1, Fig. 5 first keys (m, d): keys 1..4: L2 -0.198 [-0.302, -0.0944] "
        "(paper: first keys lower)"
    )
    # a row of the length the README listed before (386 characters) gets one line within limit
    long = {
        **row,
        "target": "negative control (trained-rope, kjv-heldout128, identity_rope+bidirectional, "
        "logit, landmark modelled)",
        "measured": "-0.00045 [-0.00135, 0.000422] in the model's units (causal run's "
        "expected-map variance); bound 0.000291 (half the model's own estimate); own ratio "
        "-0.0078 [-0.0238, 0.00717]",
        "paper_value": "0",
    }
    line = short_line(long)
    assert len(line) <= SHORT_LINE and "\n" not in line
    assert line.endswith(": -0.00045 [-0.00135, 0.000422]… (paper: 0)")
    # no interval to cut after: a word boundary, and at least MIN_MEASURED characters kept
    words = {**long, "measured": "a measured value in words " * 10}
    line = short_line(words)
    cut = line.split(": ", 1)[1].removesuffix(" (paper: 0)")
    assert len(line) <= SHORT_LINE and cut.endswith("…") and len(cut) >= MIN_MEASURED
    assert words["measured"].startswith(cut[:-1]) and words["measured"][len(cut) - 1] == " "
    # the limit holds even where the target alone fills the line
    huge = {**long, "target": "t" * 300}
    assert len(short_line(huge)) == SHORT_LINE and short_line(huge).endswith("…")


def _block_counts(line: str, labels) -> list[int]:
    return [int(re.search(rf"(\d+) {v}\b", line).group(1)) for v in labels]


def test_the_readme_holds_a_generated_summary_block():
    """The README's digest is consistent with itself (its numbers come from a real scorecard,
    which the tests do not have): per section the judged rows add up, the sections add up to the
    total, every *differs* test and failed control is one short line under its count and nothing
    else is listed, and it links to the scorecard and docs/findings.md. The README stays a front
    door: at most 180 lines."""
    from causalpos.scorecard.markdown import JUDGED, KIND, SHORT_LINE

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert len(text.splitlines()) <= 180
    i, j = text.index(S.SUMMARY_BEGIN), text.index(S.SUMMARY_END)
    block = text[i:j]
    lines = block.split("\n")
    first = lines[1]
    n_rows = int(re.search(r": (\d+) rows\.", first).group(1))
    n_tests = int(re.search(r"The papers' claims: (\d+) tests \(", first).group(1))
    r, d, inc = _block_counts(first, V.TESTED)
    passed, failed = _block_counts(first, V.CONTROL)
    holds, fails = _block_counts(first, V.CHECK)
    n_ctl = int(re.search(r"(\d+) controls \(", first).group(1))
    n_chk = int(re.search(r"(\d+) checks of identities", first).group(1))
    rest = int(re.search(r"the other (\d+) rows are not tests", first).group(1))
    assert r + d + inc == n_tests > 0 and passed + failed == n_ctl and holds + fails == n_chk
    assert n_tests + n_ctl + n_chk + rest == n_rows
    assert "[docs/findings.md](docs/findings.md#in-short)" in lines[2]
    assert "[the scorecard](results/report/scorecard.md)" in lines[2]
    sections = {}
    for line in lines:
        m = re.match(
            r"- \*\*(.+?)\*\*: (\d+) rows; (\d+) (.+?) \(([^)]*)\)(?:; (\d+) are not tests)?", line
        )
        if m:
            sec, n, k, kind, got = m.group(1, 2, 3, 4, 5)
            assert sec in S.SECTIONS and kind == KIND[sec], line
            assert sum(_block_counts(got, JUDGED[sec])) == int(k), line
            assert int(k) + int(m.group(6) or 0) == int(n), line
            sections[sec] = (int(n), _block_counts(got, JUDGED[sec]))
    assert list(sections) == [s for s in S.SECTIONS if s in sections] and len(sections) == 4
    assert sum(n for n, _ in sections.values()) == n_rows
    paper = [sum(x) for x in zip(sections["paper 1"][1], sections["paper 2"][1])]
    assert paper == [r, d, inc]
    assert sections["controls"][1] == [passed, failed] and sections["checks"][1] == [holds, fails]
    # every differs test, failed control and failing check is one short line under its count
    named = 0
    for title, count in (("Differs", d), ("Failed controls", failed), ("Failing checks", fails)):
        head = f"*{title}* ({count}):"
        assert (head in block) == (count > 0), head
        if count:
            after = block.split(head, 1)[1].strip().split("\n\n")[0].split("\n")
            assert len(after) == count and all(x.startswith("- ") for x in after), head
            assert all(len(x) <= SHORT_LINE for x in after), head
            named += count
    assert "Inconclusive" not in block
    assert len([x for x in lines if x.startswith("- ") and "**" not in x]) == named


def test_additivity_rows_are_measured_with_the_cross_term(tmp_path):
    obs = pd.DataFrame(
        [
            {"model": "m", "dataset": "d", "causal_variant": "causal"}
            | {
                f"{k}{s}": v + d
                for k, v in (("logit", 0.2), ("logz", 0.14), ("cross", -0.2), ("logattn", 0.14))
                for s, d in (("", 0), ("_lo", -0.01), ("_hi", 0.01))
            }
        ]
    )
    row = _one(_card(tmp_path, observational_split=obs), "Eq. 5 additivity (m, d, causal)")
    assert row["verdict"] == S.MEASURED and row["reading"] == "per-prompt"
    assert row["measured"].startswith("cross -0.2 [-0.21, -0.19]")
    assert _one(S.build_scorecard({}), "Eq. 5 additivity")["verdict"] == S.NOT_RUN


def test_claim2_both_components_positive_on_the_headline(tmp_path):
    def row(model, res, cm, window="all", **kw):
        return (
            {"model": model, "dataset": "d", "condition": "rope", "window": window}
            | {
                "target": "logattn",
                "residual": res[0],
                "residual_lo": res[1],
                "residual_hi": res[2],
                "causal_mask": cm[0],
                "causal_mask_lo": cm[1],
                "causal_mask_hi": cm[2],
                "total": 1.0,
                "total_lo": 0.9,
                "total_hi": 1.1,
                "share_causal_mask": 0.5,
                "share_causal_mask_lo": 0.4,
                "share_causal_mask_hi": 0.6,
            }
            | kw
        )

    pos, zero, neg = (0.1, 0.05, 0.15), (0.0, -0.05, 0.05), (-0.1, -0.15, -0.05)
    dec = pd.DataFrame(
        [
            row("both", pos, pos),
            row("one", pos, neg),
            row("wide", pos, zero),
            row("twin", pos, pos, init_of="both"),
            row("nope", zero, pos, positional="nope"),
            # a sliding-window model is read on its full-window rows
            row("swa", neg, pos, positional="swa"),
            row("swa", pos, pos, window="full32", positional="swa"),
        ]
    )
    card = _card(tmp_path, decomposition_headline=dec)
    assert _one(card, "claim 2 (both, d)")["verdict"] == R
    assert _one(card, "claim 2 (one, d)")["verdict"] == D
    assert _one(card, "claim 2 (wide, d)")["verdict"] == I
    assert _one(card, "claim 2 (twin, d)")["verdict"] == S.MEASURED
    assert _one(card, "claim 2 (nope, d)")["verdict"] == S.NOT_APPLICABLE
    swa = _one(card, "claim 2 (swa, d)")
    assert swa["verdict"] == R and "(window full32)" in swa["measured"]


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
    # a twin does not count; without all three architectures: not run
    twin_only = [row("n", "ntk", lo), row("r", "rope", mid), row("s", "swa", hi, init_of="x")]
    assert _one(card(twin_only), "claim 3 (ordering)")["verdict"] == S.NOT_RUN


def test_logit_unit_fig5_rows_on_a_random_twin_are_measured(tmp_path):
    llm = pd.concat(
        [
            _llm_p1("big", [UP], [ZERO, LOW], twin="big-random", twin_diff=(0.2, 0.1, 0.3)),
            _llm_p1("big-random", [UP], [ZERO, LOW]),
        ]
    )
    first = llm["layer"] == 1
    llm = llm.assign(
        index=np.where(first, 0.0, 0.5),
        ci_lo=np.where(first, -0.005, 0.4),
        ci_hi=np.where(first, 0.005, 0.6),
    )
    card = _card(tmp_path, llm_index=llm)
    for label in ("Fig. 5", "Fig. 5 first keys"):
        twin = _one(card, f"{label} (big-random, d)")
        assert twin["verdict"] == S.MEASURED and "random-init twin of big" in twin["note"]
        assert _one(card, f"{label} (big, d)")["verdict"] in V.TESTED
    # its scale-free row is still a test
    assert _one(card, "Fig. 5 layer-1 contrast (big-random, d)")["verdict"] in V.TESTED


def _bh(model, replacement, reading, effect, half=0.05, window="early32", init_of=""):
    return {
        "model": model,
        "dataset": "d",
        "replacement": replacement,
        "bos_reading": reading,
        "window": window,
        "reading": "expected-map",
        "target": "logattn",
        "effect": effect,
        "effect_lo": effect - half,
        "effect_hi": effect + half,
        "c": 0.1,
        "c_lo": 0.09,
        "c_hi": 0.11,
        "c_baseline": 0.2,
        "c_baseline_lo": 0.19,
        "c_baseline_hi": 0.21,
        "n_sink_heads": 7.0 if reading == "sink_heads" else np.nan,
        "sink_tau": 0.5,
        "init_of": init_of,
    }


def test_table9_on_the_headline_every_replacement_and_reading_by_its_own_row(tmp_path):
    bos = pd.DataFrame(
        [
            _bh("a", "mean", "residual_stream", 0.41),  # paper 40 %: reproduced
            _bh("a", "mean", "causal_total", 0.0),  # differs
            _bh("a", "mean", "sink_heads", 0.3, half=0.15),  # straddles the band's edge
            _bh("a", "mean", "sink_heads", 0.9, window="early64"),  # not the smallest window
            _bh("a", "all_gaussian", "causal_total", -0.28),  # "replace all": -28 %
            _bh("a", "zeros", "causal_total", 0.1),  # no paper value
            _bh("r", "mean", "causal_total", 0.4, init_of="a"),  # a twin
            _bh("q", "mean", "causal_total", 0.4),  # token 0 varies
        ]
    )
    p0 = pd.concat([_p0("a", 0.0), _p0("r", 0.0), _p0("q", 0.3, fixed=0)])
    card = _card(tmp_path, bos_headline=bos, position0=p0)
    lab = "Table 9, headline"
    assert _one(card, f"{lab} (a, mean, residual_stream, early32)")["verdict"] == R
    assert _one(card, f"{lab} (a, mean, causal_total, early32)")["verdict"] == D
    sink = _one(card, f"{lab} (a, mean, sink_heads, early32)")
    assert sink["verdict"] == I and "7 sink heads" in sink["measured"]
    assert "sink heads only" in sink["note"] and sink["reading"] == "expected-map"
    allr = _one(card, f"{lab} (a, all_gaussian, causal_total, early32)")
    assert allr["verdict"] == R and allr["paper_value"] == "-28%"
    assert _one(card, f"{lab} (a, zeros, causal_total, early32)")["verdict"] == S.MEASURED
    assert _one(card, f"{lab} (r, mean, causal_total, early32)")["verdict"] == S.MEASURED
    q = _one(card, f"{lab} (q, mean, causal_total, early32)")
    assert q["verdict"] == S.NOT_APPLICABLE
    assert not card["target"].str.contains("early64").any()
    none = _one(_card(tmp_path, bos_headline=bos[bos.window == "late"]), lab)
    assert none["verdict"] == S.NOT_RUN


def test_claim6_on_the_headline_is_judged_by_size(tmp_path):
    def row(model, d, half, init_of=""):
        return {
            "model": model,
            "dataset": "d",
            "variant": "causal",
            "window": "all",
            "target": "logit",
            "reading": "expected-map",
            "leakage": 0.02,
            "leakage_lo": 0.01,
            "leakage_hi": 0.03,
            "position_free": False,
            "linear_minus_saturated": d,
            "linear_minus_saturated_lo": d - half,
            "linear_minus_saturated_hi": d + half,
            "init_of": init_of,
        }

    head = pd.DataFrame(
        [
            row("big", 0.03, 0.005),  # well above 0.01
            row("small", 0.004, 0.002),  # positive, but below the size that matters
            row("edge", 0.012, 0.005),  # straddles 0.01
            row("twin", 0.03, 0.005, init_of="big"),
        ]
    )
    card = _card(tmp_path, headline=head)
    lab = "claim 6, headline"
    assert _one(card, f"{lab} (big, d)")["verdict"] == R
    assert _one(card, f"{lab} (small, d)")["verdict"] == D
    assert _one(card, f"{lab} (edge, d)")["verdict"] == I
    assert _one(card, f"{lab} (twin, d)")["verdict"] == S.MEASURED
    assert "negative control's tolerance" in _one(card, f"{lab} (big, d)")["note"]
    old = head.drop(columns=[c for c in head if c.startswith("linear_minus")])
    assert _one(_card(tmp_path, headline=old), lab)["verdict"] == S.NOT_RUN
    # the threshold from the data: the negative control's upper limit in the model's units.
    # A positive inflation (least squares makes it >= 0 for any non-linear offset profile)
    # that is no larger than what a run without position reads differs
    ctl = {"control_model_units": 0.002, "control_model_units_lo": -0.01}
    ctl["control_model_units_hi"] = 0.02
    card = _card(tmp_path, headline=head.assign(**ctl))
    big = _one(card, f"{lab} (big, d)")
    assert big["verdict"] == R  # [0.025, 0.035] above the control's 0.02
    assert (
        "(0.02)" in big["falsified_if"] and "model's units 0.002 [-0.01, 0.02]" in big["measured"]
    )
    assert _one(card, f"{lab} (edge, d)")["verdict"] == D  # [0.007, 0.017] <= 0.02
    ctl["control_model_units_hi"] = 0.03
    card = _card(tmp_path, headline=head.assign(**ctl))
    assert _one(card, f"{lab} (big, d)")["verdict"] == I  # the control reaches into it
    ctl["control_model_units_hi"] = 0.001
    card = _card(tmp_path, headline=head.assign(**ctl))
    assert _one(card, f"{lab} (small, d)")["verdict"] == R  # [0.002, 0.006] > 0.001
    assert _one(card, f"{lab} (twin, d)")["verdict"] == S.MEASURED


def test_claim4_scale_shift_as_a_paired_contrast(tmp_path):
    def row(a, b, diff, half, init_b=""):
        return {
            "model": a,
            "dataset": "d",
            "model_b": b,
            "condition": "rope",
            "window": "all",
            "target": "logattn",
            "reading": "expected-map",
            "share_causal_mask": 0.8,
            "share_causal_mask_b": 0.8 + diff,
            "difference": diff,
            "difference_lo": diff - half,
            "difference_hi": diff + half,
            "paired": True,
            "init_of": "",
            "init_of_b": init_b,
        }

    sc = pd.DataFrame(
        [
            row("llama-3.2-1b", "llama-3.2-3b", -0.17, 0.03),  # paper -18 points: reproduced
            row("llama-3.2-1b", "llama-3.1-8b", 0.05, 0.03),  # differs
            row("llama-3.2-3b", "llama-3.1-8b", 0.0, 0.15),  # paper 0; too wide: inconclusive
            row("llama-3.2-1b", "llama-3.2-3b-random", -0.2, 0.03, init_b="x"),
            row("smollm2-135m", "llama-3.2-1b", 0.1, 0.03),  # no paper value for one of them
        ]
    )
    sc.loc[3, "model_b"] = "meta-llama/Llama-3.2-3B"  # a twin named like the paper's model
    card = _card(tmp_path, scale_contrast=sc)
    lab = "claim 4, scale shift"
    r = _one(card, f"{lab} (llama-3.2-3b - llama-3.2-1b, d)")
    assert r["verdict"] == R and r["paper_value"].startswith("-18%")
    assert _one(card, f"{lab} (llama-3.1-8b - llama-3.2-1b, d)")["verdict"] == D
    assert _one(card, f"{lab} (llama-3.1-8b - llama-3.2-3b, d)")["verdict"] == I
    twin = _one(card, f"{lab} (meta-llama/Llama-3.2-3B - llama-3.2-1b, d)")
    assert twin["verdict"] == S.MEASURED
    assert not card["target"].str.contains("smollm2").any()
    one = _one(_card(tmp_path, scale_contrast=sc.iloc[[4]]), lab)
    assert one["verdict"] == S.NOT_RUN and "Llama-3.2-1B" in one["note"]


def test_fig3_nearby_rows(tmp_path):
    def row(model, panel, x, half, nope=True):
        return {
            "model": model,
            "panel": panel,
            "nearby": x,
            "nearby_lo": x - half,
            "nearby_hi": x + half,
            "n_samples": 60,
            "rope_identity": nope,
        }

    g = pd.DataFrame(
        [
            row("nope", "f", 0.3, 0.05),
            row("nope", "i", -0.2, 0.05),
            row("flat", "i", 0.01, 0.05),
            row("rope", "i", 0.5, 0.05, nope=False),
        ]
    )
    card = _card(tmp_path, gram_nearby=g)
    assert _one(card, "Fig. 3 (f)/(i) (nope, panel f)")["verdict"] == R
    assert _one(card, "Fig. 3 (f)/(i) (nope, panel i)")["verdict"] == D
    assert _one(card, "Fig. 3 (f)/(i) (flat, panel i)")["verdict"] == I
    assert _one(card, "Fig. 3 (f)/(i) (rope, panel i)")["verdict"] == S.MEASURED
    assert _one(_card(tmp_path), "Fig. 3 (f)/(i)")["verdict"] == S.NOT_RUN


def test_additivity_layer_local_vs_whole_forward_is_measured(tmp_path):
    def row(variant, x, d=np.nan):
        return {
            "model": "m",
            "dataset": "d",
            "variant": variant,
            "window": "all",
            "target": "logattn",
            "leakage": x,
            "leakage_lo": x - 0.01,
            "leakage_hi": x + 0.01,
            "position_free": False,
            "local_minus_whole": d,
            "local_minus_whole_lo": d - 0.005,
            "local_minus_whole_hi": d + 0.005,
        }

    head = pd.DataFrame(
        [row("bidirectional", 0.02), row("layer_bidirectional", 0.05, 0.03), row("causal", 0.1)]
    )
    r = _one(
        _card(tmp_path, headline=head), "Eq. 5 additivity, layer-local vs whole-forward (m, d)"
    )
    assert r["verdict"] == S.MEASURED and r["reading"] == "expected-map"
    assert r["measured"].startswith("layer-local - whole-forward 0.03 [0.025, 0.035]")
    assert "whole-forward 0.02 [0.01, 0.03]" in r["measured"]
    none = _card(tmp_path, headline=head[head.variant != "layer_bidirectional"])
    assert _one(none, "Eq. 5 additivity, layer-local vs whole-forward")["verdict"] == S.NOT_RUN
