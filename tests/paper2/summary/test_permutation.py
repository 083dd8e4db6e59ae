"""The within-offset permutation test (paper2.summary.permutation): Monte Carlo against the exact
null mean."""

from __future__ import annotations

import numpy as np
import pytest

import tests.leakage_fit_oracle as L_fit
from causalpos.paper2.summary import permutation as L_permutation
from tests.paper2_leakage_maps import causal


def test_permutation_test_monte_carlo():
    T, maps, R = 12, 120, 300
    rng = np.random.default_rng(7)
    noise = causal(rng.normal(size=(maps, T, T)))
    res = L_permutation.permutation_test(noise, n_perm=R, seed=1)
    fit = L_fit.fit_leakage(noise)
    np.testing.assert_allclose(res.observed, fit.delta, rtol=1e-10)
    # MC mean of the null agrees with the exact permutation mean (per map, averaged over maps).
    assert res.null_mean.mean() == pytest.approx(fit.null_mean.mean(), rel=0.01)
    # ... and with the pure-noise floor k/(N−1) (the null reproduces the in-sample floor).
    assert res.null_mean.mean() == pytest.approx(fit.floor, rel=0.03)
    # Under H0 the p-values are (discretely) uniform.
    assert abs(res.p.mean() - 0.5) < 0.07
    # A planted absolute effect is beyond every permutation.
    planted = noise[0] + 2.0 * np.log1p(np.arange(T))[:, None]  # query effects γ_i
    res2 = L_permutation.permutation_test(planted, fit="saturated+query", n_perm=R, seed=1)
    assert float(res2.p) == pytest.approx(1 / (R + 1))


@pytest.mark.parametrize("fit", ["saturated+key", "linear+both"])
def test_permutation_test_other_fits_match_exact_null(fit):
    T = 8
    rng = np.random.default_rng(3)
    y = causal(rng.normal(size=(40, T, T)) + 0.5 * np.arange(T)[None, None, :])
    res = L_permutation.permutation_test(y, fit=fit, n_perm=1500, seed=0)
    fitres = L_fit.fit_leakage(y, fit=fit)
    np.testing.assert_allclose(res.observed, fitres.delta, rtol=1e-10)
    assert res.null_mean.mean() == pytest.approx(fitres.null_mean.mean(), rel=0.02)
