"""Tests of causalpos.figures.paper2: each figure is written and plots the summary's numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from causalpos.figures import paper2 as F
from causalpos.paper2 import position0 as P_position0
from causalpos.paper2 import reducers as L_reducers
from causalpos.paper2 import reducers as P_reducers
from causalpos.paper2 import summary as L_summary


def scores(batch: int, heads: int, T: int, seed: int, bidirectional: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    s = (
        torch.cos(0.7 * (i - j).float())
        + torch.where(j == 0, 1.5, 0.0)
        + 0.4 * torch.randn(batch, heads, T, T, generator=g)
    )
    return (s if bidirectional else torch.where(j <= i, s, torch.nan)).float()


@pytest.fixture(scope="module")
def summary() -> xr.Dataset:
    stores = {}
    for v, bi in (("causal", False), ("bidirectional", True)):
        red, sink = (
            L_reducers.LeakageReducer(fits=("saturated+query",), windows=("all",)),
            P_reducers.SinkReducer(),
        )
        for b in range(2):
            ids = np.arange(3 * b, 3 * b + 3)
            for layer in range(3):
                s = scores(3, 4, 10, 100 * b + 10 * layer + bi, bi)
                red.update(layer, s, ids)
                sink.update(layer, s, ids)
        stores[v] = xr.merge([red.result(), sink.result()])
    return L_summary.leakage_summary(stores, n_boot=100, n_perm=30, seed=0)


def test_leakage_by_layer(summary, tmp_path):
    paths = [tmp_path / "by_layer.png", tmp_path / "by_layer.pdf"]
    got = F.leakage_by_layer({"tiny": summary}, paths)
    for p in paths:
        assert p.stat().st_size > 1000
    np.testing.assert_array_equal(
        got["tiny"]["total"],
        summary["decomposition_layer"].sel(condition="rope", component="total").values,
    )
    np.testing.assert_array_equal(
        got["tiny"]["logit"], summary["leakage_layer"].sel(variant="causal", target="logit").values
    )
    assert got["tiny"]["total"].shape == (3, 3)


def test_component_shares(summary, tmp_path):
    got = F.component_shares({"tiny": summary, "tiny-again": summary}, [tmp_path / "shares.png"])
    share = summary["decomposition"].sel(condition="rope")
    np.testing.assert_array_equal(got["tiny/rope"][0], share.sel(component="share_residual").values)
    np.testing.assert_allclose(got["tiny/rope"][0, 0] + got["tiny/rope"][1, 0], 1.0)
    assert (tmp_path / "shares.png").stat().st_size > 1000


def test_head_maps_mark_significant_heads(summary, tmp_path):
    got = F.head_maps(summary, [tmp_path / "heads.png"], alpha=0.5)
    np.testing.assert_array_equal(
        got["causal"],
        summary["leakage_head"].sel(variant="causal", target="logattn", stat="estimate"),
    )
    assert got["bidirectional"].shape == (3, 4)
    with pytest.raises(ValueError, match="none of the variants"):
        F.head_maps(summary, [tmp_path / "x.png"], variants=("nope",))


def test_position0_std(tmp_path):
    zero = P_position0.trajectory(np.ones((4, 3, 5)))
    rng = np.random.default_rng(0)
    pos = P_position0.trajectory(rng.normal(size=(4, 3, 5)))
    got = F.position0_std({"causal, BOS": zero, "varying token 0": pos}, [tmp_path / "p0.png"])
    np.testing.assert_array_equal(got["causal, BOS"], 0.0)
    np.testing.assert_array_equal(got["varying token 0"], pos["ratio"].values)
    assert (tmp_path / "p0.png").stat().st_size > 1000
