"""The decomposition block (paper2.summary.decomposition): the runs of each condition (the ring,
paper 2's bidirectional ablation), every run measured on its layers' pairs as trained, the
components pooled per layer kind and each kind's paired contrast to the global layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from causalpos.models.layer_kinds import pattern
from causalpos.paper2.extraction import reducers as R
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as S
from causalpos.paper2.summary import decomposition as D
from tests.paper2_maps import content_maps

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
    _MAPS.update(c=causal, r=ring)
    return {"causal": kinds_store(causal, True), "ring": kinds_store(ring, False)}


#: The fixture's maps (c: causal, r: ring; per layer (n, heads, T, T)), for independent sums.
_MAPS: dict[str, list] = {}


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
    sel = dict(condition="rope", landmark="modelled", window="all")
    kind = summ["components_kind"].sel(**sel)
    layer = summ["components_layer"].sel(**sel)
    assert list(kind["layer_kind_name"].values) == KINDS
    # one layer per kind: the kind's reading is its layer's, interval included
    for k, name in enumerate(KINDS):
        np.testing.assert_allclose(
            kind.sel(layer_kind_name=name).values, layer.sel(layer=k).values, rtol=1e-12
        )
    con = summ["components_kind_contrast"].sel(**sel)
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
    pooled = summ["components"].sel(**sel, stat="estimate")
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
    p = summ["per_prompt_p_value"].sel(variant="causal", target="logit")
    assert np.isfinite(p.values).all() and p.shape == (2, HEADS)
    maps = runs["ring"]["leak_map_sum"].values  # the summed logits (layer, head, T, T)
    groups = pattern_groups(runs["ring"], maps)
    assert [g.tolist() for g, _ in groups] == [[0], [1]]
    for (_idx, mask), kind in zip(groups, KINDS):
        np.testing.assert_array_equal(mask, pattern(kind, T))


def _routes(summ, landmark: str = "modelled"):
    """(layer, component_full, stat) of the rope condition's components per layer."""
    sel = dict(condition="rope", landmark=landmark, window="all")
    return summ["components_layer"].sel(**sel)


@pytest.mark.parametrize("landmark", ["modelled", "counted"])
def test_the_three_routes_add_up_to_the_total_on_a_summary(runs, landmark):
    """A real summary (causal and ring stores of two layer kinds): per layer, total = mask_free +
    indirect_mask + direct_mask to rounding once the cross terms are counted (direct = normaliser
    + direct_cross, indirect = indirect_own + indirect_cross); the indirect route's own part is
    the ΔSS of the per-prompt difference maps (causal − ring logits) computed independently from
    the maps; at layer 0, where the ring keeps the causal run's maps, it is 0 exactly."""
    from causalpos.paper2.estimator import pairgrams as PG
    from causalpos.paper2.extraction.design import build_design

    summ = S.leakage_summary(runs, LeakageSettings(n_boot=100, n_perm=0, bos_windows=("all",)))
    e = _routes(summ, landmark).sel(stat="estimate")
    part = {k: e.sel(component_full=k).values for k in D.NAMES}
    scale = np.abs(part["total"]).max()
    np.testing.assert_allclose(
        part["mask_free"] + part["indirect_mask"] + part["direct_mask"],
        part["total"],
        rtol=0,
        atol=1e-12 * scale,
    )
    np.testing.assert_allclose(
        part["normaliser"] + part["direct_cross"], part["direct_mask"], atol=1e-12 * scale
    )
    np.testing.assert_allclose(
        part["indirect_own"] + part["indirect_cross"], part["indirect_mask"], atol=1e-12 * scale
    )
    assert part["indirect_own"][0] == 0.0 and part["indirect_own"][1] > 1e-3 * scale
    # the aliases are the routes' sums
    np.testing.assert_allclose(part["residual_stream"], part["mask_free"], rtol=1e-12)
    np.testing.assert_allclose(
        part["causal_mask"], part["direct_mask"] + part["indirect_mask"], atol=1e-12 * scale
    )
    np.testing.assert_allclose(
        part["logit"], part["indirect_mask"] + part["mask_free"], atol=1e-12 * scale
    )
    # independent: the difference maps' own ΔSS over the ring's (the same unit cancels)
    own = []
    for layer, kind in enumerate(KINDS):
        mask = pattern(kind, T) & (np.arange(T)[:, None] >= 1)
        design = build_design(mask, "saturated+query", landmark=landmark == "modelled")
        c, r = (np.asarray(_MAPS[k][layer], dtype=np.float32).astype(float) for k in "cr")
        nums = []
        for y in (c - r, r):
            g = PG.numerator_grams(PG.stats_from_maps(np.where(mask, y, 0.0), mask), design)
            nums.append((g.sum((-2, -1)) - np.trace(g, axis1=-2, axis2=-1)).sum())
        own.append(nums)
    layer1 = own[1][0] / own[1][1]
    assert part["indirect_own"][1] / part["mask_free"][1] == pytest.approx(layer1, rel=1e-5)
    # intervals: each route's own, finite
    ci = _routes(summ, landmark).sel(component_full=["direct_mask", "indirect_mask", "mask_free"])
    assert np.isfinite(ci.values).all()
    assert (ci.sel(stat="lo") <= ci.sel(stat="estimate")).all()


#: The margin the mask-free and indirect routes must read within, in the one unit (the total of
#: the model below is about 0.77: the causal softmax's normaliser).
ZERO_MARGIN = 2e-4


@pytest.fixture(scope="module")
def iid_summary():
    """A random-init 3-layer Llama (queries and keys scaled ×3, so the causal run's logits carry
    position from causal averaging) through the real capture, causal and ring runs, on i.i.d.
    tokens whose token 0 varies."""
    from causalpos.api.paper2 import paper2_summary
    from causalpos.paper2.settings import LeakageReducerSettings
    from tests.conftest import tiny_pair

    model, _ = tiny_pair("llama", num_hidden_layers=3)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(3.0)
            layer.self_attn.k_proj.weight.mul_(3.0)
            layer.self_attn.v_proj.weight.mul_(4.0)
            layer.self_attn.o_proj.weight.mul_(4.0)
    ids = np.random.default_rng(0).integers(3, 200, (96, 16))
    return paper2_summary(
        model,
        ids,
        ("causal", "ring"),
        settings=LeakageSettings(n_boot=200, n_perm=0, bos_windows=("all",)),
        reducer=LeakageReducerSettings(windows=("all",), expected_stats=("all",)),
    )


@pytest.mark.parametrize("landmark", ["modelled", "counted"])
def test_iid_tokens_without_a_fixed_token_0_read_no_mask_free_position(iid_summary, landmark):
    """The ring's expected map on i.i.d. tokens is a function of the cyclic offset, which on the
    causal pairs is the offset itself: the mask-free route reads 0 at every layer. At layer 0 the
    causal and the ring logits are the same function of each pair's tokens up to that offset's
    wrap, so every route but the direct one reads 0 there; the direct route is the total."""
    assert iid_summary.attrs["token0_fixed"] == 0
    comp = _routes(iid_summary, landmark)
    est = comp.sel(stat="estimate")
    total = est.sel(component_full="total").values
    assert (total > 0.5).all()
    free = comp.sel(component_full="mask_free")
    assert (np.abs(free.sel(stat="estimate").values) <= ZERO_MARGIN).all(), free.values
    assert ((free.sel(stat="lo") <= 0) & (free.sel(stat="hi") >= 0)).all()
    for name in ("indirect_mask", "indirect_own", "indirect_cross", "mask_free"):
        v = comp.sel(layer=0, component_full=name)
        assert abs(float(v.sel(stat="estimate"))) <= ZERO_MARGIN / 2, (name, v.values)
        assert float(v.sel(stat="lo")) <= 0 <= float(v.sel(stat="hi")), (name, v.values)
    direct = est.sel(layer=0, component_full="direct_mask")
    assert float(direct) == pytest.approx(total[0], abs=ZERO_MARGIN)


def test_the_tables_mark_the_mask_free_route_not_applicable_without_a_fixed_token_0(iid_summary):
    """Token 0 varies across the prompts (read from their tokens): the mask-free route and the
    shares made of it are NaN in every components table with the reason; the indirect route and
    the mechanism mapping keep their numbers."""
    from causalpos.paper2.tables.headline import components_frames

    frames = components_frames(iid_summary)
    for name in ("decomposition_components", "decomposition_components_by_layer"):
        df = frames[name]
        assert (df["token0_fixed"] == 0).all()
        assert df["mask_free_status"].str.startswith("not applicable: token 0 is not one").all()
        for col in ("mask_free", "mask_free_lo", "share_mask_free", "share_causal_mask_ablation"):
            assert df[col].isna().all(), (name, col)
        assert df["indirect_mask"].notna().all() and df["residual_stream"].notna().all()
        assert df["share_causal_mask_mechanism"].notna().all()
    maps = frames["decomposition_mappings"]
    abl = maps[maps["mapping"] == "ablation"]
    assert abl["residual_stream"].isna().all() and abl["share_causal_mask"].isna().all()
    assert abl["status"].str.startswith("not applicable").all()
    mech = maps[maps["mapping"] == "mechanism"]
    assert mech["share_causal_mask"].notna().all() and (mech["status"] == "measured").all()
