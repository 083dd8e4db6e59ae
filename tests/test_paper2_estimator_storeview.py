"""A store's statistics as the estimator reads them (paper2.estimator.storeview): through the
reducer, the estimate equals the maps' and shards merge exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from expected_oracle import expected_leakage, expected_table
from paper2_maps import (
    content_maps,
)

from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import pairgrams as PG
from causalpos.paper2.estimator import storeview as SV
from causalpos.paper2.extraction import design as D
from causalpos.paper2.extraction import metric as M
from causalpos.paper2.extraction import reducers as R


def reducer_scores(n, heads, T, seed, window=None):
    rng = np.random.default_rng(seed)
    y, _ = content_maps(n, heads, T, rng, planted=0.2 * rng.normal(size=(heads, T)))
    i, j = np.indices((T, T))
    allowed = np.ones((T, T), bool) if window is None else np.abs(i - j) <= window
    return torch.tensor(np.where(allowed, y, np.nan), dtype=torch.float32)


def test_store_estimate_through_the_reducer_equals_the_maps_and_merges_exactly():
    T, heads, n = 12, 3, 10
    windows = ("all", "early6", "full2")
    layers = [reducer_scores(n, heads, T, 7), reducer_scores(n, heads, T, 8, window=4)]
    kw = dict(
        fits=("saturated+query",), windows=windows, pair_subsample=6, seed=3, expected_stats=True
    )
    one = R.LeakageReducer(**kw)
    shards = [R.LeakageReducer(**kw), R.LeakageReducer(**kw)]
    for lay, s in enumerate(layers):
        one.update(lay, s, np.arange(n))
        shards[0].update(lay, s[6:], np.arange(6, n))
        shards[1].update(lay, s[:6], np.arange(6))
    ds = one.result()
    merged = R.LeakageReducer.merge([shards[0].result(), shards[1].result()])
    for k in ("leak_offsum", "leak_key0sum", "leak_rowsum"):
        np.testing.assert_array_equal(merged[k].values, ds[k].values)
    for window in windows:
        for target in ("logit", "logattn"):
            got = expected_leakage(merged, window=window, target=target, n_boot=200)
            for lay, s in enumerate(layers):
                y = s.double().numpy()
                if target == "logattn":
                    y = M.log_attention(y)
                allowed = np.isfinite(y[0, 0]) & np.tril(np.ones((T, T), bool))
                mask = SV.window_pairs(allowed, window, 6, 3)
                d = D.build_design(mask, landmark=True)
                g = PG.prompt_grams(PG.stats_from_maps(y, mask), d)
                u = X.u_statistics(g, np.ones((1, n)))
                want = u["num"][0] / u["den"][0]
                # the store keeps the per-prompt sums in float32 (u = 6e-8): relative error of
                # the ratio a few u (4e-8 seen), far below any difference of estimators
                np.testing.assert_allclose(
                    got["exp_delta"].sel(layer=lay).values, want, rtol=1e-6, atol=1e-9
                )
    # All windows and targets at once; a float32 map sum (the final store's dtype) moves the
    # headline by less than its stated rounding bound.
    table = expected_table(merged, n_boot=50)
    assert table["exp_pooled"].dims == ("exp_window", "exp_target")
    again = expected_leakage(merged, window="early6", target="logattn", n_boot=50)
    assert float(table["exp_pooled"].sel(exp_window="early6", exp_target="logattn")) == float(
        again["exp_pooled"]
    )
    f32 = expected_table(merged.assign(leak_map_sum=merged["leak_map_sum"].astype("float32")))
    rel = np.abs(f32["exp_pooled"] / table["exp_pooled"] - 1)
    assert (rel <= 2 * f32["exp_den_rounding"]).all() and (f32["exp_den_rounding"] < 1e-5).all()
    assert merged["leak_offsum"].dtype == np.float32
    with pytest.raises(ValueError, match="expected_stats=True"):
        expected_leakage(ds.drop_vars("leak_rowsum"))
    # A window subset keeps the sums of those windows only, and the estimate is the same.
    sub = R.LeakageReducer(**dict(kw, expected_stats=["early6"]))
    for lay, s in enumerate(layers):
        sub.update(lay, s, np.arange(n))
    part = sub.result()
    assert list(part["leak_exp_window"].values) == ["early6"]
    np.testing.assert_array_equal(
        part["leak_offsum"].sel(leak_exp_window="early6").values,
        ds["leak_offsum"].sel(leak_exp_window="early6").values,
    )
    with pytest.raises(ValueError, match="expected-map windows"):
        expected_leakage(part, window="all")
    with pytest.raises(ValueError, match="not among the reducer's windows"):
        R.LeakageReducer(**dict(kw, expected_stats=["late"]))
