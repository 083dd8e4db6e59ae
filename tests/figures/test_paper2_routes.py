"""Tests of causalpos.figures.paper2_routes: §3's three routes by layer plot the summary's numbers
(the components tables' rows), add up to the total, and a route that is not applicable is said,
never drawn as 0 (summaries built from tests/paper2_headline_runs.py's stores over three layers)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from causalpos.figures import paper2_routes as F
from causalpos.paper2.labels import NOT_FIXED
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as L_summary
from causalpos.paper2.tables.headline import components_frames
from tests.paper2_headline_runs import HEADS, N, T, store
from tests.paper2_maps import content_maps

FREE = "identity_rope+bidirectional"


def _layered(maps: list[np.ndarray], causal: bool) -> xr.Dataset:
    parts = [store(y, causal).assign_coords(layer=[i]) for i, y in enumerate(maps)]
    return xr.concat(parts, "layer", data_vars="minimal", coords="minimal", compat="override")


@pytest.fixture(scope="module")
def summary() -> xr.Dataset:
    """A causal run whose planted query effect grows with depth, a ring carrying a third of it
    (the mask-free route), a position-free run; token 0 recorded as one fixed id."""
    rng = np.random.default_rng(5)
    maps: dict[str, list[np.ndarray]] = {v: [] for v in ("causal", "ring", FREE)}
    for layer in range(3):
        free, _ = content_maps(N, HEADS, T, rng)
        planted = (0.5 + layer) * np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
        leaky, _ = content_maps(N, HEADS, T, rng, planted=planted)
        maps["causal"].append(leaky)
        maps["ring"].append(free + (leaky - free).mean(0) / 3)
        maps[FREE].append(free)
    stores = {v: _layered(m, v == "causal") for v, m in maps.items()}
    s = L_summary.leakage_summary(
        stores,
        LeakageSettings(n_boot=100, n_perm=0, seed=0, bos_windows=("late",)),
        position_free_runs=[FREE],
    )
    return s.assign_attrs(token0_fixed=1, token0_ids=[1])


def _summary_rows(s: xr.Dataset, lm: str, component: str) -> np.ndarray:
    comp = s["components_layer"].sel(condition="rope", window=str(s["window"].values[0]))
    x = comp.sel(landmark=lm, component_full=component, stat=["estimate", "lo", "hi"])
    return x.transpose("layer", "stat").values


def _table(s: xr.Dataset, name: str, lm: str, column: str) -> np.ndarray:
    """A column's (estimate, lo, hi) of a components table, condition rope, window all."""
    df = components_frames(s)[name]
    df = df[(df["condition"] == "rope") & (df["window"] == "all") & (df["landmark"] == lm)]
    return df[[column, column + "_lo", column + "_hi"]].to_numpy(dtype=float)


def test_the_routes_by_layer_are_the_summarys_numbers_and_add_up(summary, tmp_path):
    paths = [tmp_path / "routes.png", tmp_path / "routes.pdf"]
    got = F.routes_by_layer({"tiny/d": summary}, paths, experiment="e")["tiny/d"]
    for p in paths:
        assert p.stat().st_size > 1000
    assert got["condition"] == "rope" and got["status"] == "measured"
    np.testing.assert_array_equal(got["layers"], [0, 1, 2])
    for lm in ("modelled", "counted"):
        assert list(got[lm]) == ["total", "direct_mask", "indirect_mask", "mask_free"]
        for k, arr in got[lm].items():
            np.testing.assert_array_equal(arr, _summary_rows(summary, lm, k))
            table = _table(summary, "decomposition_components_by_layer", lm, k)
            np.testing.assert_array_equal(arr, table)  # the table's rows, layer by layer
        # the three routes hold their cross terms: they add up to the total at every layer
        parts = sum(got[lm][k][:, 0] for k in ("direct_mask", "indirect_mask", "mask_free"))
        np.testing.assert_allclose(parts, got[lm]["total"][:, 0], rtol=1e-9, atol=1e-12)
    # the ring carries part of the planted effect: a measured mask-free route, not 0
    assert np.all(got["modelled"]["mask_free"][1:, 0] > 0.01)
    # one pool (every layer is global here) per landmark, each share as the pooled table has it
    assert list(got["pooled"]) == ["all layers\nkey 0 modelled", "all layers\nkey 0 counted"]
    pooled = summary["components"].sel(condition="rope", window="all")
    for label, shares in got["pooled"].items():
        lm = label.split()[-1]
        assert list(shares) == list(F.SHARES)
        for k, v in shares.items():
            want = pooled.sel(landmark=lm, component_full=k, stat=["estimate", "lo", "hi"])
            np.testing.assert_array_equal(v, want.values)
            np.testing.assert_array_equal(v, _table(summary, "decomposition_components", lm, k)[0])
        ablation = shares["share_direct_mask"][0] + shares["share_indirect_mask"][0]
        assert shares["share_causal_mask_ablation"][0] == pytest.approx(ablation, rel=1e-9)


def test_a_mask_free_route_without_a_fixed_token_0_is_not_drawn(summary, tmp_path):
    varying = summary.assign_attrs(token0_fixed=0, token0_ids=[3, 4, 5])
    # the summary holds a number for the route; the figure must not show it
    assert np.isfinite(_summary_rows(varying, "modelled", "mask_free")).all()
    got = F.routes_by_layer({"tiny/d": varying}, [tmp_path / "na.png"])["tiny/d"]
    assert got["status"] == NOT_FIXED.format(ids="3, 4, 5")
    # the tables mark it not applicable (NaN): the figure leaves it out, it does not draw 0
    table = _table(varying, "decomposition_components_by_layer", "modelled", "mask_free")
    assert np.isnan(table).all()
    for lm in ("modelled", "counted"):
        assert list(got[lm]) == ["total", "direct_mask", "indirect_mask"]
        np.testing.assert_array_equal(
            got[lm]["direct_mask"], _summary_rows(varying, lm, "direct_mask")
        )
    for shares in got["pooled"].values():
        assert "share_mask_free" not in shares and "share_causal_mask_ablation" not in shares
        assert np.isfinite(shares["share_indirect_mask"]).all()


def test_a_summary_without_a_ring_run_is_said_not_drawn(summary, tmp_path):
    undecomposed = summary.drop_vars([v for v in summary.data_vars if v.startswith("components")])
    got = F.routes_by_layer({"a/d": summary, "b/d": undecomposed}, [tmp_path / "mixed.png"])
    assert got["b/d"] is None and got["a/d"]["status"] == "measured"
    assert (tmp_path / "mixed.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="no summaries"):
        F.routes_by_layer({}, [tmp_path / "none.png"])
