"""The decomposition block (paper2.summary.decomposition): the runs of each condition (the ring,
paper 2's bidirectional ablation), every run measured on its layers' pairs as trained, the
components pooled per layer kind and each kind's paired contrast to the global layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from paper2_maps import content_maps

from causalpos.models.layer_kinds import pattern
from causalpos.paper2.extraction import reducers as R
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as S
from causalpos.paper2.summary import decomposition as D

T, HEADS, N = 12, 2, 24
KINDS = ["sliding4", "global"]
KW = dict(fits=("saturated+query",), windows=("all",), expected_stats=["all"])


def kinds_store(maps: list[np.ndarray], causal: bool) -> xr.Dataset:  # noqa: F821
    """A leakage store of two layers (maps[k]: (n, heads, T, T)), each measured on its kind's
    trained pairs; the causal run masked by its kind's pattern."""
    red = R.LeakageReducer(**KW)
    red.set_layer_kinds(KINDS)
    for layer, y in enumerate(maps):
        y = np.asarray(y, dtype=np.float64)
        if causal:
            y = np.where(pattern(KINDS[layer], T), y, np.nan)
        red.update(layer, torch.tensor(y, dtype=torch.float32), np.arange(y.shape[0]))
    return red.result().assign_coords(layer_kind=("layer", KINDS))


@pytest.fixture(scope="module")
def runs():
    """A causal run with a query effect in both layers; a ring run with it in the sliding layer
    only (the global layer's ring map is position-free content)."""
    rng = np.random.default_rng(3)
    q = 1.2 * np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
    causal, ring = [], []
    for layer in range(2):
        free, _ = content_maps(N, HEADS, T, rng)
        leaky, _ = content_maps(N, HEADS, T, rng, planted=q)
        causal.append(leaky)
        ring.append(leaky if layer == 0 else free)
    return {"causal": kinds_store(causal, True), "ring": kinds_store(ring, False)}


def test_every_run_is_measured_on_its_layers_trained_pairs(runs):
    """The ring run's maps have every pair, but it is measured where the layer attends as
    trained: its pair counts equal the causal run's, layer by layer."""
    want = [int((pattern(k, T) & (np.arange(T)[:, None] >= 1)).sum()) for k in KINDS]
    for run in runs.values():
        got = run["leak_n_pairs"].sel(leak_window="all").values.tolist()
        assert got == want
    red = R.LeakageReducer(**KW)
    red.set_layer_kinds(KINDS)
    masked = np.where(pattern("sliding4", T), np.ones((1, HEADS, T, T)), np.nan)
    masked[..., 5, 4] = np.nan  # a run that removes a trained pair is refused
    with pytest.raises(ValueError, match=r"layer 0 \(sliding4\): this run masks pair \(5, 4\)"):
        red.update(0, torch.tensor(masked, dtype=torch.float32), np.arange(1))


def test_kinds_pool_their_layers_and_contrast_with_the_global_ones(runs):
    summ = S.leakage_summary(runs, LeakageSettings(n_boot=200, n_perm=0, bos_windows=("all",)))
    sel = dict(exp_condition="rope", exp_landmark="modelled", exp_window="all")
    kind = summ["exp_components_kind"].sel(**sel)
    layer = summ["exp_components_layer"].sel(**sel)
    assert list(kind["layer_kind_name"].values) == KINDS
    # one layer per kind: the kind's reading is its layer's, interval included
    for k, name in enumerate(KINDS):
        np.testing.assert_allclose(
            kind.sel(layer_kind_name=name).values, layer.sel(layer=k).values, rtol=1e-12
        )
    con = summ["exp_components_kind_contrast"].sel(**sel)
    assert con.sel(layer_kind_name="global").isnull().all()
    e = kind.sel(stat="estimate")
    np.testing.assert_allclose(
        con.sel(layer_kind_name="sliding4", stat="estimate").values,
        (e.sel(layer_kind_name="sliding4") - e.sel(layer_kind_name="global")).values,
    )
    res = con.sel(layer_kind_name="sliding4", component_full="residual_stream")
    assert float(res.sel(stat="lo")) > 0  # the ring keeps position in the sliding layer only
    g = kind.sel(layer_kind_name="global", component_full="residual_stream")
    assert float(g.sel(stat="lo")) <= 0 <= float(g.sel(stat="hi"))
    # no bidirectional run: paper 2's reading and the edge position are not made (NaN)
    pooled = summ["exp_components"].sel(**sel, stat="estimate")
    for name in ("residual_stream_paper", "edge_position", "artefact"):
        assert np.isnan(float(pooled.sel(component_full=name))), name
    assert np.isfinite(float(pooled.sel(component_full="residual_stream")))


def test_condition_runs_take_the_ring_twin_of_each_causal_run():
    assert D.ring_twin("causal") == "ring"
    assert D.ring_twin("identity_rope") == "identity_rope+ring"
    assert D.ring_twin("scrambled_rope+bidirectional") == "scrambled_rope+ring"
    assert D.ring_twin("bos_replace_mean") == "bos_replace_mean+ring"


def test_the_permutation_test_runs_per_mask_pattern(runs):
    """A sliding and a global layer at T > W have different pairs: the per-head test runs once
    per pattern (one call for every layer would refuse the maps), each on its trained pairs."""
    from causalpos.paper2.summary.per_prompt import pattern_groups

    summ = S.leakage_summary(
        runs, LeakageSettings(n_boot=50, n_perm=19, bos_windows=("all",), seed=1)
    )
    p = summ["p_value"].sel(variant="causal", target="logit")
    assert np.isfinite(p.values).all() and p.shape == (2, HEADS)
    maps = runs["ring"]["leak_map_sum"].values  # the summed logits (layer, head, T, T)
    groups = pattern_groups(runs["ring"], maps)
    assert [g.tolist() for g, _ in groups] == [[0], [1]]
    for (_idx, mask), kind in zip(groups, KINDS):
        np.testing.assert_array_equal(mask, pattern(kind, T))
