"""A store's statistics as the estimator reads them (paper2.estimator.storeview): through the
reducer, the estimate equals the maps' and shards merge exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

import tests.leakage_fit_oracle as L_fit
from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import pairgrams as PG
from causalpos.paper2.estimator import storeview as SV
from causalpos.paper2.extraction import design as D
from causalpos.paper2.extraction import reducers as R
from tests.expected_oracle import expected_leakage, expected_table
from tests.paper2_maps import content_maps


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
                    y = L_fit.log_attention(y)
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
    assert table["exp_pooled"].dims == ("window", "exp_target")
    again = expected_leakage(merged, window="early6", target="logattn", n_boot=50)
    assert float(table["exp_pooled"].sel(window="early6", exp_target="logattn")) == float(
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


def numpy_log_z(y: np.ndarray) -> np.ndarray:
    """Each row's logsumexp over its finite keys (..., T), in float64, by numpy alone."""
    top = np.nanmax(y, axis=-1, keepdims=True)
    return (top + np.log(np.nansum(np.exp(y - top), axis=-1, keepdims=True)))[..., 0]


def test_map_sum_rebuilds_the_summed_log_attention_maps_bit_for_bit():
    """The store keeps the summed logits and the summed log Z per query row; map_sum's
    log-attention sum is bit for bit the reducer's float64 Σ s − Σ log Z (the map it stored
    before), equals Σ_p (s_p − log Z_p) of the maps themselves with NaN exactly where they are
    masked, and shards merge to one pass."""
    T, heads, n = 10, 2, 9
    tri = np.tril(np.ones((T, T), bool))
    causal = torch.where(torch.as_tensor(tri), reducer_scores(n, heads, T, 11), torch.nan)
    layers = [causal, reducer_scores(n, heads, T, 12, window=3)]  # causal; a bidirectional band
    kw = dict(fits=("saturated+query",), windows=("all",))
    one = R.LeakageReducer(**kw)
    shards = [R.LeakageReducer(**kw), R.LeakageReducer(**kw)]
    for lay, s in enumerate(layers):
        for sl in (slice(0, 4), slice(4, n)):  # two batches
            one.update(lay, s[sl], np.arange(n)[sl])
        shards[0].update(lay, s[5:], np.arange(5, n))
        shards[1].update(lay, s[:5], np.arange(5))
    ds = one.result()
    assert ds["leak_map_sum"].dims == ("layer", "head", "query", "key")
    assert ds["leak_logz_sum"].dims == ("layer", "head", "query")
    assert ds["leak_logz_sum"].dtype == np.float64
    merged = R.LeakageReducer.merge([s.result() for s in shards])
    for lay, s in enumerate(layers):
        y = s.double().numpy()
        old = (one._map_sum[lay] - one._lz_sum[lay][..., None]).numpy()  # the old logattn sum
        got = SV.map_sum(ds, lay, "logattn")
        assert got.dtype == np.float64 and got.shape == (heads, T, T)
        np.testing.assert_array_equal(got.view(np.int64), old.view(np.int64))  # NaN bits too
        view = SV.map_sum(SV.store_view(ds), lay, "logattn")
        np.testing.assert_array_equal(view.view(np.int64), old.view(np.int64))
        want = (y - numpy_log_z(y)[..., None]).sum(0)  # Σ_p (s_p − log Z_p), NaN where masked
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).any()
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-12)
        np.testing.assert_allclose(SV.map_sum(ds, lay, "logit"), y.sum(0), rtol=1e-13)
        for target in ("logit", "logattn"):
            np.testing.assert_allclose(
                SV.map_sum(merged, lay, target),
                SV.map_sum(ds, lay, target),
                rtol=1e-13,
                atol=1e-12,
            )
    np.testing.assert_array_equal(
        SV.map_sums(ds, "logattn"), np.stack([SV.map_sum(ds, i, "logattn") for i in (0, 1)])
    )
    assert int(merged["leak_map_count"]) == n
    with pytest.raises(ValueError, match="not one of"):
        SV.map_sum(ds, 0, "attention")
    # A store of the older layout (both maps by leak_target) is refused, not misread.
    old_layout = ds.assign(
        leak_map_sum=xr.concat([ds["leak_map_sum"]] * 2, dim="leak_target").transpose(
            "leak_target", ...
        )
    ).drop_vars("leak_logz_sum")
    with pytest.raises(ValueError, match="rebuild the store"):
        SV.map_sum(old_layout, 0, "logit")


def test_a_float32_store_rounds_the_logit_sums_only():
    """The final store casts maps (query × key) to float32; log Z (no key axis) stays float64,
    so a rebuilt log-attention sum is off by at most the logits' rounding, u|Σ s| per cell, and
    the headline's rounding bound covers the change of ‖C S‖²."""
    from causalpos.io.shards import merge_shards

    T, heads, n = 10, 2, 6
    red = R.LeakageReducer(fits=("saturated+query",), windows=("all",), expected_stats=True)
    red.update(0, reducer_scores(n, heads, T, 5) + 40.0, np.arange(n))  # a large common offset
    ds = red.result()
    for k in ds.data_vars:
        ds[k].attrs["reducer"] = "leakage"
    f32 = merge_shards([ds], reducers={"leakage": R.LeakageReducer})
    assert f32["leak_map_sum"].dtype == np.float32 and f32["leak_logz_sum"].dtype == np.float64
    np.testing.assert_array_equal(f32["leak_logz_sum"].values, ds["leak_logz_sum"].values)
    logits = SV.map_sum(ds, 0, "logit")
    err = np.abs(SV.map_sum(f32, 0, "logattn") - SV.map_sum(ds, 0, "logattn"))
    u = np.finfo(np.float32).eps / 2
    assert np.nanmax(err / np.abs(logits)) <= u * (1 + 1e-6)
    g64, _ = SV.store_grams(ds, target="logattn")
    g32, bound = SV.store_grams(f32, target="logattn")
    assert abs(g32["sst_sum"].sum() - g64["sst_sum"].sum()) <= bound
