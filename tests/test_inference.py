"""Tests of causalpos.inference: every interval of both papers against independent computations
(sorted replicates interpolated by hand, explicit index draws, Student's t from scipy.stats, the
Wilson bounds as the roots of their quadratic)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from causalpos import inference, stats


def _quantile(x: np.ndarray, p: float) -> float:
    """The p-quantile of a 1-D sample by hand: the sorted values interpolated linearly at
    position p·(B − 1) (the definition of numpy's default method, written out)."""
    s = np.sort(x)
    h = p * (s.size - 1)
    k = int(math.floor(h))
    return float(s[k] + (h - k) * (s[min(k + 1, s.size - 1)] - s[k]))


@pytest.mark.parametrize("level", [0.95, 0.9, 0.5])
def test_bounds_are_the_interpolated_tail_quantiles_of_each_column(level):
    rng = np.random.default_rng(0)
    reps = rng.normal(size=(401, 3, 2))
    lo, hi = inference.bounds(reps, level)
    assert lo.shape == hi.shape == (3, 2)
    a = (1 - level) / 2
    for i in range(3):
        for j in range(2):
            assert lo[i, j] == pytest.approx(_quantile(reps[:, i, j], a), abs=1e-14)
            assert hi[i, j] == pytest.approx(_quantile(reps[:, i, j], 1 - a), abs=1e-14)


def test_bounds_of_replicates_with_nan():
    reps = np.arange(40.0).reshape(20, 2)
    reps[3, 0] = reps[7, 0] = np.nan
    # kept: a NaN replicate makes the column's bounds NaN
    lo, hi = inference.bounds(reps, 0.9)
    assert np.isnan(lo[0]) and np.isnan(hi[0])
    assert (lo[1], hi[1]) == pytest.approx(
        (_quantile(reps[:, 1], 0.05), _quantile(reps[:, 1], 0.95))
    )
    # skipped: the column's finite replicates alone; a column of NaN only gives NaN
    finite = reps[np.isfinite(reps[:, 0]), 0]
    lo, hi = inference.bounds(reps, 0.9, skip_nan=True)
    assert (lo[0], hi[0]) == pytest.approx((_quantile(finite, 0.05), _quantile(finite, 0.95)))
    lo, hi = inference.bounds(np.full((5, 1), np.nan), 0.9, skip_nan=True)
    assert np.isnan(lo).all() and np.isnan(hi).all()


@pytest.mark.parametrize("level", [0.0, 1.0, 95])
def test_a_level_outside_0_1_is_refused_with_an_example(level):
    with pytest.raises(ValueError, match=r"must lie in \(0, 1\), got .*e\.g\. 0\.95"):
        inference.bounds(np.zeros(10), level)
    with pytest.raises(ValueError, match=r"must lie in \(0, 1\)"):
        inference.wilson(0.5, 10, level)


def test_interval_puts_the_estimate_beside_its_bounds():
    reps = np.linspace(0.0, 1.0, 101)[:, None] * np.array([1.0, 2.0])
    out = inference.interval(reps, np.array([7.0, 8.0]), 0.9)
    np.testing.assert_allclose(out, [[7.0, 0.05, 0.95], [8.0, 0.1, 1.9]], atol=1e-14)


def test_bootstrap_ci_is_the_interval_of_explicit_index_draws():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(23, 2))
    est, lo, hi = inference.bootstrap_ci(x, n_boot=300, level=0.9, seed=5)
    counts = stats.bootstrap_counts(23, 300, 5)
    draws = [np.repeat(np.arange(23), c.astype(int)) for c in counts]
    means = np.stack([x[d].mean(0) for d in draws])
    np.testing.assert_allclose(est, x.mean(0), rtol=1e-15)
    for j in range(2):
        assert lo[j] == pytest.approx(_quantile(means[:, j], 0.05), rel=1e-12)
        assert hi[j] == pytest.approx(_quantile(means[:, j], 0.95), rel=1e-12)


def test_bootstrap_se_matches_plugin_standard_error():
    # The bootstrap distribution of a mean has variance s²_plugin / n exactly in expectation;
    # with B = 4000 its percentile interval is ±1.96 of that to ~8 %.
    x = np.random.default_rng(1).normal(size=60)
    se_plugin = x.std(ddof=0) / np.sqrt(60)
    est, lo, hi = inference.bootstrap_ci(x, n_boot=4000, seed=2)
    assert est == pytest.approx(x.mean())
    assert (hi - lo) / 2 == pytest.approx(1.96 * se_plugin, rel=0.08)


def test_bootstrap_ci_of_constant_is_degenerate():
    est, lo, hi = inference.bootstrap_ci(np.full((10, 3), 2.5), n_boot=100)
    np.testing.assert_array_equal(est, 2.5)
    np.testing.assert_array_equal(lo, 2.5)
    np.testing.assert_array_equal(hi, 2.5)


@pytest.mark.parametrize("g, level", [(5, 0.95), (12, 0.9), (40, 0.99)])
def test_jackknife_interval_is_t_times_the_jackknife_se(g, level):
    rng = np.random.default_rng(g)
    jack = rng.normal(size=(g, 3))
    est = np.array([0.1, -2.0, 5.0])
    lo, hi = inference.jackknife_interval(est, jack, level)
    for k in range(3):
        v = jack[:, k]
        se = math.sqrt((g - 1) / g * sum((vi - v.mean()) ** 2 for vi in v))
        half = scipy.stats.t.ppf((1 + level) / 2, g - 1) * se
        assert (lo[k], hi[k]) == pytest.approx((est[k] - half, est[k] + half), rel=1e-12)
    jack[2, 1] = np.nan  # a NaN leave-one-out value: that statistic's interval is NaN
    lo, hi = inference.jackknife_interval(est, jack, level)
    assert np.isnan([lo[1], hi[1]]).all() and np.isfinite([lo[0], hi[2]]).all()


@pytest.mark.parametrize("p_hat, n", [(0.5, 30), (0.3, 30), (0.9, 200), (0.05, 12)])
def test_wilson_bounds_are_the_roots_of_the_score_equation(p_hat, n):
    # Wilson's interval: the p with (p̂ − p)² = z² p (1 − p) / n, a quadratic in p
    z = scipy.stats.norm.ppf(0.975)
    c = z * z / n
    roots = np.sort(np.roots([1 + c, -(2 * p_hat + c), p_hat * p_hat]).real)
    assert inference.wilson(p_hat, n) == pytest.approx(tuple(roots), rel=1e-10)


def test_wilson_at_the_ends_and_without_data():
    lo, hi = inference.wilson(0.0, 20)
    assert lo == pytest.approx(0.0, abs=1e-15) and 0.15 < hi < 0.17
    lo, hi = inference.wilson(1.0, 20)
    assert hi == 1.0 and 0.83 < lo < 0.85
    assert all(math.isnan(b) for b in inference.wilson(float("nan"), 20))
    assert all(math.isnan(b) for b in inference.wilson(0.5, 0))
