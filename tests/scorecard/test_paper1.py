"""Paper 1's row families (causalpos.scorecard.paper1): the closed form, the simulations and the
pretrained models' index, share and first keys, §3's amplification (the trained models against
their init twins in logit units, measured, and by the scale-free share, judged; the pretrained
models against their random-init twins), each reaching differs on tables made to contradict the
paper."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.paper1.theory import theory_table
from tests.scorecard.paper1_tables import FLAT, HIGH, LOW, UP, WIDE, ZERO, _llm_p1
from tests.scorecard_tables import D, I, R, _card, _one, _rule


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


def _sink_store(n_layers: int = 3, t: int = 12, n_groups: int = 8):
    """A score store whose maps are relative plus a fixed token's key-0 column (4 logits) at every
    layer, and from layer 2 on a query-dependent (non-relative) pattern on keys >= 1."""
    import xarray as xr

    rng = np.random.default_rng(40)
    q, k = np.indices((t, t))
    base = np.where(q >= k, np.exp(-(q - k) / 3.0), np.nan)
    base[1:, 0] += 4.0
    maps = np.stack(
        [base + (layer > 0) * 0.3 * np.log1p(q) * (k >= 1) for layer in range(n_layers)]
    )
    groups = maps[None] + 2e-3 * rng.standard_normal((n_groups, *maps.shape))
    return xr.Dataset(
        {"score_group_mean": (("group", "layer", "query", "key"), groups.astype(np.float32))},
        attrs={"n_sequences": 8 * n_groups},
    )


def test_fig5_is_judged_with_key0_out_and_prints_the_key0_column(tmp_path):
    from causalpos.paper1.tables import llm_index_table

    table = llm_index_table({("m", "d", "causal"): _sink_store()}, n_boot=200)
    card = _card(tmp_path, llm_index=table)
    row = _one(card, "Fig. 5 (m, d)")
    # layer 1 is relative but for key 0: at noise without key 0 (with it, its spread column alone
    # puts layer 1 far above the margin, which made this row differ)
    assert row["verdict"] == R
    assert table["index_with_key0"].iloc[0] > 0.5 and table["ci_hi"].iloc[0] < 0.01
    assert "key 0 out of the index" in row["measured"]
    assert (
        "its own column (RMS of its deviation from its offsets' level) L1 4 [4, 4]"
        in (row["measured"])
    )
    assert (
        f"with key 0 in the index L1 {table['index_with_key0_debiased'].iloc[0]:.3g}"
        in (row["measured"])
    )
    assert "key 0 out of the share" in _one(card, "Fig. 5 layer-1 contrast (m, d)")["measured"]
    old = _card(tmp_path, llm_index=_llm("m", [(0.001, 0.0, 0.003), (0.3, 0.25, 0.35)]))
    assert S.paper1.KEY0_IN in _one(old, "Fig. 5 (m, d)")["measured"]


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
    # the paper's sign is data (targets.yaml: each's rule): the other sign turns the verdicts
    # around, and falsified_if states its side
    spec = S.load_targets()
    t = spec["targets"]["llm_first_keys"]
    t["each"]["rule"], t["other"] = "positive", "at or below"
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
