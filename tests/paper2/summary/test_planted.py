"""The positive control planted in the model (variant ``plant_query``, causalpos.paper2.summary.planted):
the variant's term in the captured scores and the model's attention, the truth's closed form
against dense least squares, the estimator's recovery on synthetic maps, and the control end to
end through the extraction stage on a tiny random model."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import xarray as xr

from causalpos.capture import hook
from causalpos.capture.settings import CaptureRun, ExtractSettings
from causalpos.models.variants import (
    PLANT_PROFILE,
    compose,
    parse_variant,
    plant_layer,
    plant_term,
    variant_names,
    without_plant,
)
from causalpos.paper2.estimator import pairgrams as PG
from causalpos.paper2.extraction.design import build_design, pair_mask
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary.planted import planted_recovery, planted_truth, recover

PLANTED = "identity_rope+plant_query+bidirectional"
TWIN = "identity_rope+bidirectional"


# ---------------------------------------------------------------------------------------------
# The variant


def test_plant_variant_grammar_and_term():
    v = parse_variant(PLANTED)
    assert (v.plant, v.rope, v.causal) == ("query", "identity", False)
    assert parse_variant("plant_query").plant == "query" and parse_variant("plant_query").causal
    assert parse_variant(TWIN).plant is None
    assert without_plant(PLANTED) == TWIN and without_plant("plant_query") == "causal"
    assert compose("bidirectional", "plant_query", "identity_rope") == PLANTED
    assert PLANTED in variant_names() and "scrambled_rope+plant_query" in variant_names()
    with pytest.raises(
        ValueError, match="canonical order rotary, position 0, stream, scores, mask"
    ):
        parse_variant("identity_rope+bidirectional+plant_query")
    np.testing.assert_array_equal(plant_term(5, 2.0), 2.0 * np.log(np.arange(1, 6)))
    assert PLANT_PROFILE == "log(1+i)"
    assert [plant_layer(k, 4) for k in (0, 3, -1, -4)] == [0, 3, 3, 0]
    for bad in (4, -5):
        with pytest.raises(ValueError, match=r"leakage.plant.layer = .* outside the model's 4"):
            plant_layer(bad, 4)


def _tiny_llama(layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(copy.deepcopy(cfg)).eval()


def _collect(model, tok, variant, collect, plant=None, reducers=()):
    c = collect()
    hook.capture_scores(
        model,
        tok,
        CaptureRun(variant, 3, seed=0, plant=plant, progress=False),
        reducers=[c, *reducers],
    )
    return c


@pytest.mark.parametrize("mask", ["causal", "bidirectional"])
def test_plant_adds_exactly_b_to_the_planted_layer_and_leaves_the_rest(collect, mask):
    model = _tiny_llama(layers=3)
    tok = np.random.default_rng(1).integers(3, 64, (6, 10))
    tok[:, 0] = 1
    base = "causal" if mask == "causal" else "bidirectional"
    planted = "plant_query" if mask == "causal" else "plant_query+bidirectional"
    ref = _collect(model, tok, base, collect)
    b = plant_term(10, 0.7)
    b32 = torch.as_tensor(b, dtype=torch.float32).view(1, 1, 10, 1)
    # at the last layer: the layers below are bit for bit the unplanted ones, the planted layer
    # is the unplanted scores plus b_i (the same float32 addition), masked cells still NaN
    last = _collect(model, tok, planted, collect, plant={"layer": -1, "scale": 0.7})
    for layer in (0, 1):
        torch.testing.assert_close(
            last.scores(layer), ref.scores(layer), rtol=0, atol=0, equal_nan=True
        )
    torch.testing.assert_close(last.scores(2), ref.scores(2) + b32, rtol=0, atol=0, equal_nan=True)
    # log-attention: the query term cancels in the softmax (float rounding only)
    la = lambda s: torch.log_softmax(s.nan_to_num(nan=-torch.inf).double(), -1)  # noqa: E731
    np.testing.assert_allclose(la(last.scores(2)), la(ref.scores(2)), rtol=0, atol=2e-6)
    # planted in layer 0, which attends with it (eagerly): the layers above see its output,
    # equal to the unplanted one within float rounding, because the query term cancels
    first = _collect(model, tok, planted, collect, plant={"layer": 0, "scale": 0.7})
    torch.testing.assert_close(first.scores(0), ref.scores(0) + b32, rtol=0, atol=0, equal_nan=True)
    for layer in (1, 2):
        torch.testing.assert_close(
            first.scores(layer), ref.scores(layer), rtol=0, atol=2e-6, equal_nan=True
        )


def test_plant_settings_are_required_exactly_where_a_variant_plants(collect):
    model = _tiny_llama()
    tok = np.full((2, 6), 5)
    with pytest.raises(ValueError, match="needs plant="):
        _collect(model, tok, PLANTED, collect)
    with pytest.raises(ValueError, match="plants nothing"):
        _collect(model, tok, TWIN, collect, plant={"layer": 0, "scale": 1.0})
    with pytest.raises(ValueError, match="outside the model's 2 layers"):
        _collect(model, tok, PLANTED, collect, plant={"layer": 2, "scale": 1.0})
    ds = hook.capture_scores(
        model,
        tok,
        CaptureRun(PLANTED, 2, seed=0, plant={"layer": -1, "scale": 0.5}, progress=False),
        reducers=[collect()],
    )
    assert {k: ds.attrs[k] for k in ("plant_term", "plant_layer", "plant_scale")} == {
        "plant_term": "query",
        "plant_layer": 1,
        "plant_scale": 0.5,
    }


# ---------------------------------------------------------------------------------------------
# The truth: ‖P_Δ b‖², closed form vs dense least squares and vs the estimator's solver


def _dense_delta_ss(b_map: np.ndarray, mask: np.ndarray, fit: str, landmark: bool) -> float:
    base, _ = fit.split("+")
    i, j = np.nonzero(mask)
    T = mask.shape[0]
    d = i - j
    x = (
        (d[:, None] == np.arange(T)).astype(float)
        if base == "saturated"
        else np.stack([np.ones(d.size), d], 1)
    )
    if landmark:
        x = np.concatenate([x, (j == 0)[:, None].astype(float)], axis=1)
    f = np.concatenate([x, (i[:, None] == np.arange(T)).astype(float)], axis=1)
    y = b_map[mask]

    def fitted(a):
        return a @ np.linalg.lstsq(a, y, rcond=None)[0]

    p = fitted(f) - fitted(x)
    return float(p @ p)


@pytest.mark.parametrize("fit", ["saturated+query", "linear+query"])
@pytest.mark.parametrize("landmark", [True, False])
@pytest.mark.parametrize("window", ["all", "early8", "late"])
def test_truth_closed_form_equals_dense_least_squares_and_the_estimator(fit, landmark, window):
    T = 14
    sub = np.random.default_rng(3).random((T, T)) < 0.8  # a pair subsample, key 0 kept
    sub[:, 0] = True
    mask = pair_mask(T, window=window, subsample=sub)
    b = plant_term(T, 0.9)
    b_map = np.where(mask, b[:, None], 0.0)
    got = planted_truth(b, mask, fit, landmark=landmark)
    dense = _dense_delta_ss(b_map, mask, fit, landmark)
    assert got > 0.1
    np.testing.assert_allclose(got, dense, rtol=1e-10)
    # the estimator's own route (FWL c-vectors of the per-offset, row and key-0 sums)
    g = PG.prompt_grams(
        PG.stats_from_maps(b_map[None], mask), build_design(mask, fit, landmark=landmark)
    )
    np.testing.assert_allclose(got, g["num"][0, 0], rtol=1e-9)
    with pytest.raises(ValueError, match="no query effects"):
        planted_truth(b, mask, "saturated+key")


# ---------------------------------------------------------------------------------------------
# Recovery by the estimator on synthetic position-free maps


def _position_free_maps(rng, n: int, T: int, heads: int) -> np.ndarray:
    """Maps y_p = μ + ε_p with μ in the span of the baseline with the key-0 column (an offset
    profile and a key-0 level) and content ε_p shared by each query row (a token per row) plus
    cell noise: the expected map of a position-free run."""
    i, j = np.indices((T, T))
    mu = np.cos(0.7 * (i - j)) + 1.5 * (j == 0)
    row = rng.normal(0, 1.0, (n, heads, T, 1))
    cell = rng.normal(0, 0.5, (n, heads, T, T))
    return mu + row + cell


def test_recovery_on_synthetic_position_free_maps_covers_the_truth():
    """Two layers: b planted in layer 1 only. The layer's N̂ interval contains the truth
    n_heads·‖P_Δ b‖² and excludes 0 in (nearly) every replicate, layer 0's covers 0; across
    replicates the mean ratio recovered / truth is 1 within its Monte Carlo error."""
    T, n, heads, reps = 12, 24, 2, 60
    mask = pair_mask(T, window="all")
    design = build_design(mask, "saturated+query", landmark=True)
    b = plant_term(T, 1.0)  # planted share ≈ 14 % of the expected maps' variance
    truth = np.array([0.0, heads * planted_truth(b, mask)])
    rng = np.random.default_rng(0)
    covered, excl0, ratio, null_cov = 0, 0, [], 0
    for _ in range(reps):
        layers = [_position_free_maps(rng, n, T, heads) for _ in range(2)]
        layers[1] = layers[1] + b[:, None]
        grams = [PG.prompt_grams(PG.stats_from_maps(y, mask), design) for y in layers]
        g = {k: np.stack([gr[k] for gr in grams]) for k in grams[0]}
        counts = rng.multinomial(n, np.full(n, 1 / n), size=300)
        r = recover(g, truth, counts)
        covered += r["plant_num_lo"][1] <= truth[1] <= r["plant_num_hi"][1]
        excl0 += bool(r["plant_passed"]) or r["plant_num_lo"][1] > 0
        null_cov += r["plant_num_lo"][0] <= 0 <= r["plant_num_hi"][0]
        ratio.append(r["plant_ratio"][1])
    ratio = np.asarray(ratio)
    assert excl0 == reps  # the planted share is far from 0: every interval excludes it
    assert 0.85 * reps <= covered <= reps
    assert 0.85 * reps <= null_cov <= reps
    assert abs(ratio.mean() - 1) < 3 * ratio.std(ddof=1) / np.sqrt(reps) + 1e-3
    with pytest.raises(ValueError, match="exactly one layer"):
        recover(g, np.zeros(2), counts)


# ---------------------------------------------------------------------------------------------
# End to end: the extraction stage on a tiny random model, then the estimator


def _write_data(tmp_path, n: int, T: int):
    from causalpos.io.store import write_dataset

    tok = np.random.default_rng(0).integers(3, 200, size=(n, T))
    tok[:, 0] = 1  # a fixed token 0: the landmark the headline models
    ds = xr.Dataset(
        {"tokens": (("sequence", "position"), tok)},
        coords={"sequence": np.arange(n), "position": np.arange(T)},
        attrs={"corpus": "{}", "mode": "chunks"},
    )
    return write_dataset(ds, tmp_path / "data.zarr")


def test_planted_control_end_to_end_through_extraction(tmp_path):
    from causalpos.io.store import open_dataset
    from causalpos.models.load import build_model_dir
    from causalpos.stages.extract import extract_scores

    n, T = 32, 12
    model_dir = build_model_dir(
        "tiny",
        {"source": "random_init", "architecture": "llama", "seed": 0},
        tmp_path / "models" / "tiny",
    )
    data = _write_data(tmp_path, n, T)
    leak = {"fits": ["saturated+query"], "windows": ["all"], "expected_stats": ["all"]}
    plant = {"layer": -1, "scale": 0.05}
    variants = {
        TWIN: {"reducers": ["leakage"], "leakage": leak},
        PLANTED: {"reducers": ["leakage"], "leakage": leak, "plant": plant},
    }
    paths = extract_scores(model_dir, data, tmp_path / "scores", bounds=(0, n), variants=variants, settings=ExtractSettings(batch_size=8, n_groups=2, seed=0))  # fmt: skip
    planted, twin = open_dataset(paths[PLANTED]), open_dataset(paths[TWIN])
    assert planted.attrs["plant_layer"] == 1 and "plant_layer" not in twin.attrs
    draws = np.random.default_rng(0).multinomial(n, np.full(n, 1.0 / n), size=400)
    r = planted_recovery(planted, twin, counts=draws)
    # the truth from the term and the measured pairs alone
    mask = pair_mask(T, window="all")
    truth = planted.sizes["head"] * planted_truth(plant_term(T, 0.05), mask)
    np.testing.assert_allclose(r["plant_truth"].values, [0.0, truth], rtol=1e-12)
    # recovered within its interval, which excludes 0; the unplanted twin and layer 0 read ≈ 0
    assert bool(r["plant_passed"])
    lo, hi = float(r["plant_num_lo"][1]), float(r["plant_num_hi"][1])
    assert 0 < lo <= truth <= hi and hi - lo < 0.5 * truth
    assert float(r["twin_num_lo"][1]) <= 0 <= float(r["twin_num_hi"][1])
    assert float(r["plant_num_lo"][0]) <= 0 <= float(r["plant_num_hi"][0])
    # exact checks: logits = the twin's + b, log-attention = the twin's, within float32 rounding
    assert bool(r["check_passed"])
    assert float(r["check_logit"].max()) < float(r["check_tol"]) / 10
    assert float(r["check_logattn"].max()) < float(r["check_tol"]) / 10
    np.testing.assert_array_equal(r["check_logit"].values[0], 0.0)  # layer 0 is bit for bit
    # the summary carries it (the twin is position-free on chunks), the controls table and the
    # scorecard judge it: recovered here, not recovered once the truth is moved outside the
    # interval
    from causalpos.paper2.summary.assemble import leakage_summary
    from causalpos.paper2.tables.assemble import paper2_tables
    from causalpos.scorecard.controls import with_verdicts
    from causalpos.scorecard.paper2_headline import control_rows
    from causalpos.scorecard.rows import load_targets

    summ = leakage_summary({TWIN: twin, PLANTED: planted}, LeakageSettings(n_boot=400, n_perm=0, bos_windows=("all",)), position_free_runs=[TWIN])  # fmt: skip
    st = summ["plant_model"].sel(plant_variant=PLANTED)
    assert float(st.sel(plant_stat="truth")) == pytest.approx(truth, rel=1e-12)
    assert int(summ["plant_model_passed"].sel(plant_variant=PLANTED)) == 1
    ctl = paper2_tables({("m", "d"): summ})["controls"]
    row = ctl[(ctl["variant"] == TWIN) & (ctl["target"] == "logit")].iloc[0]
    assert (
        with_verdicts("controls", ctl.loc[[row.name]])["planted_model_control"].item()
        == "recovered"
    )
    T_ = load_targets()["targets"]
    card = [c for c in control_rows(ctl, T_) if "planted in the model" in c.target]
    assert [c.verdict for c in card] == ["recovered"]
    moved = ctl.assign(planted_model_truth=2 * ctl["planted_model_hi"])
    card = [c for c in control_rows(moved, T_) if "planted in the model" in c.target]
    assert [c.verdict for c in card] == ["not recovered"]
    # a planted variant without plant settings (and the reverse) stops before the model loads
    with pytest.raises(ValueError, match="no plant settings"):
        extract_scores(model_dir, data, tmp_path / "bad", bounds=(0, n), variants={PLANTED: {"reducers": ["leakage"], "leakage": leak}}, settings=ExtractSettings(batch_size=8, n_groups=2, seed=0))  # fmt: skip
    with pytest.raises(ValueError, match="no planted term"):
        planted_recovery(twin)


# ---------------------------------------------------------------------------------------------
# Config: leakage.plant reaches the planted extraction's params, and only those; its layer is
# checked against the models' layers where known


def _resolved(name: str, edit=None):
    from pathlib import Path

    import yaml
    from snakemake.utils import validate

    from causalpos.config import Resolved

    repo = Path(__file__).resolve().parents[3]
    cfg = yaml.safe_load((repo / name).read_text())
    if edit is not None:
        edit(cfg)
    validate(cfg, str(repo / "workflow" / "schemas" / "config.schema.yaml"))
    return Resolved(cfg)


def test_plant_settings_reach_only_the_planted_extraction():
    r = _resolved("configs/smoke.yaml")
    params = r.extraction_params("trained-rope", "kjv-first24")
    assert PLANTED in params and TWIN in params
    assert params[PLANTED]["plant"] == {"layer": -1, "scale": 0.5}
    assert [v for v, spec in params.items() if "plant" in spec] == [PLANTED]
    assert params[PLANTED]["leakage"] == params[TWIN]["leakage"]
    assert r.planted_models() == ["trained-rope"]
    # the default config runs no last-layer query plant (the dose series replaces it there)
    default = _resolved("config.yaml")
    p = default.extraction_params("smollm2-135m", "kjv-chunks128-bos")
    assert not [v for v, spec in p.items() if "plant" in spec] and default.planted_models() == []


def test_plant_layer_outside_a_models_layers_fails_at_config_time():
    from causalpos.config import ConfigError

    def edit(layer):
        return lambda cfg: cfg["leakage"].update(plant={"layer": layer, "scale": 1.0})

    assert _resolved("configs/smoke.yaml").model_layers("trained-rope") == 2
    _resolved("configs/smoke.yaml", edit(-2)).check_plant()
    for layer in (2, -3):
        with pytest.raises(ConfigError, match=rf"leakage.plant.layer = {layer} is outside the 2"):
            _resolved("configs/smoke.yaml", edit(layer)).check_plant()
    # SmolLM2's layer count is known only once its directory is built: checked at extraction
    assert _resolved("config.yaml").model_layers("smollm2-135m") is None
    _resolved("config.yaml", edit(99)).check_plant()
