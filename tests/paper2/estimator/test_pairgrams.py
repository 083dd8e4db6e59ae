"""The estimator's inputs (paper2.estimator.pairgrams): per-prompt statistics equal the metric's
pair sums, Grams on the support equal the whole design's, a query effect planted in the statistics
equals one planted in the maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tests.leakage_fit_oracle as L_fit
from causalpos.paper2.estimator import pairgrams as PG
from causalpos.paper2.estimator import storeview as SV
from causalpos.paper2.extraction import design as D
from causalpos.paper2.extraction.design import build_design
from tests.paper2_headline_runs import T
from tests.paper2_maps import content_maps


@pytest.mark.parametrize("window", ["all", "early6", "late"])
def test_prompt_stats_are_the_metric_pair_sums(window):
    # stats_from_maps sums in numpy what the oracle sums in torch, offset by offset
    rng = np.random.default_rng(4)
    T, n = 13, 5
    mask = D.pair_mask(T, window=window) & (rng.random((T, T)) < 0.9)
    y = rng.normal(size=(n, 2, T, T)) + 3.0
    st = PG.stats_from_maps(y, mask)
    w = torch.as_tensor(mask)
    ref = L_fit.pair_sums(torch.as_tensor(y), w, int(mask.sum()))
    tot = L_fit.pair_sums(torch.as_tensor(y.sum(0)), w, int(mask.sum()))
    want = {
        "off": ref["off"],
        "rows": ref["rows"],
        "key0": ref["cols"][..., 0],
        "sst": ref["Q"] - ref["S"] ** 2 / mask.sum(),
        "sst_sum": tot["Q"] - tot["S"] ** 2 / mask.sum(),
    }
    for k, v in want.items():
        np.testing.assert_allclose(getattr(st, k), v.numpy(), rtol=1e-12, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("fit", ["saturated+query", "linear+query"])
@pytest.mark.parametrize("window", ["all", "early6", "late", "full3"])
def test_grams_on_the_support_drop_only_zero_rows_and_columns(fit, window):
    # the support leaves out the query rows and offsets without a pair: their sums are exactly
    # 0 (and the design's rows and columns there 0 up to the pseudo-inverse's rounding), so the
    # Grams are the whole design's up to the order of the additions
    rng = np.random.default_rng(5)
    T, n = 16, 6
    mask = D.pair_mask(T, window=window) & (rng.random((T, T)) < 0.7)
    mask[:, 0] = D.pair_mask(T, window=window)[:, 0]
    design = D.build_design(mask, fit, landmark=True)
    sub, rows_at, offs_at = PG.support(design)
    kept_rows = np.zeros(T, bool)
    kept_rows[rows_at] = True
    assert np.array_equal(kept_rows, mask.any(1))
    assert not design.b[~kept_rows].any()  # G_ZX's rows of 0: exactly
    assert np.abs(design.m_pinv[~kept_rows]).max(initial=0) <= 1e-12
    y = np.where(mask, rng.normal(size=(n, 3, T, T)) + rng.normal(size=(T, T)), np.nan)
    st = PG.stats_from_maps(y, mask)
    assert not st.rows[..., ~kept_rows].any()
    if offs_at is not None:
        gone = np.ones(T, bool)
        gone[np.arange(T)[offs_at]] = False
        assert np.array_equal(~gone, design.n_offset > 0)
        assert not st.off[..., gone].any()
        assert np.abs(design.gx_pinv[:T][gone]).max(initial=0) <= 1e-12
    g = PG.prompt_grams(st, design)
    # the whole design, by the formula of metric.c_vector on every row and column
    off, rows = np.moveaxis(st.off, 0, -2), np.moveaxis(st.rows, 0, -2)
    u = off if fit.startswith("sat") else np.stack([off.sum(-1), off @ np.arange(T)], -1)
    u = np.concatenate([u, np.moveaxis(st.key0, 0, -1)[..., None]], -1)
    c = rows - u @ design.b.T
    s = off.sum(-1)
    num = c @ design.m_pinv @ np.swapaxes(c, -1, -2)
    low = u @ design.gx_pinv @ np.swapaxes(u, -1, -2) - s[..., :, None] * s[..., None, :] / (
        design.n_pairs
    )
    scale = np.abs(g["low"]).max()
    np.testing.assert_allclose(g["num"], num, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(g["low"], low + num, rtol=0, atol=1e-12 * scale)
    assert np.array_equal(PG.numerator_grams(st, design), g["num"])


def test_planting_in_the_statistics_equals_planting_in_the_maps():
    rng = np.random.default_rng(3)
    y, _ = content_maps(6, 2, T, rng)
    mask = SV.window_pairs(np.tril(np.ones((T, T), bool)), "all")
    b = rng.normal(size=T)
    got = PG.plant_query_effect(PG.stats_from_maps(y, mask), mask, b)
    want = PG.stats_from_maps(y + b[None, None, :, None], mask)
    d = build_design(mask, "saturated+query", landmark=True)
    g_got, g_want = PG.prompt_grams(got, d), PG.prompt_grams(want, d)
    for k in g_want:  # the Grams are invariant to the sums' per-map centring constant
        np.testing.assert_allclose(g_got[k], g_want[k], rtol=1e-9, atol=1e-8)
    with pytest.raises(ValueError, match="shape"):
        PG.plant_query_effect(got, mask, b[:-1])
