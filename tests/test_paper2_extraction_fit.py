"""ΔR² and the observational split of whole maps (paper2.extraction.fit): relative maps read 0,
log-attention and linear baselines against dense least squares, the split's exact identity."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from paper2_leakage_maps import (
    F_REL,
    FITS,
    causal,
    dense_r2,
    projector_delta,
    relative_map,
)

from causalpos import stats
from causalpos.paper2.extraction import design as L_design
from causalpos.paper2.extraction import fit as L_fit
from causalpos.paper2.extraction import metric as L_metric


@pytest.mark.parametrize("absolute", L_design.ABSOLUTES)
def test_relative_logits_have_zero_leakage_under_saturated_baseline(absolute):
    T = 40
    y = relative_map(T, F_REL)
    res = L_fit.fit_leakage(y, fit=f"saturated+{absolute}")
    assert abs(float(res.delta)) <= 1e-10
    sub = stats.stratified_pair_mask(T, 7, seed=3)
    assert abs(float(L_fit.fit_leakage(y, fit=f"saturated+{absolute}", mask=sub).delta)) <= 1e-10


def test_log_attention_of_relative_logits_leaks_and_matches_dense():
    # The causal-mask mechanism: Z_i sums over i+1 keys, so a_ij = f(i−j) − log Z_i is not relative.
    T = 14
    y = relative_map(T, F_REL)
    a = L_metric.log_attention(y)
    ref = torch.log_softmax(torch.tensor(np.where(np.isnan(y), -np.inf, y)), -1).numpy()
    np.testing.assert_allclose(a[np.isfinite(y)], ref[np.isfinite(y)], rtol=0, atol=1e-14)
    m = L_design.pair_mask(T)
    for fit in FITS:
        res = L_fit.fit_leakage(a, fit=fit)
        b, f = dense_r2(a, m, fit)
        assert float(res.delta) == pytest.approx(f - b, abs=1e-10)
    # a = f(i−j) − log Z_i lies exactly in F = offsets + query effects: R²(F) = 1 and all the
    # variance the offsets miss is leakage, well above the within-offset permutation mean.
    res = L_fit.fit_leakage(a)
    assert float(res.r2_full) == pytest.approx(1.0, abs=1e-12)
    assert float(res.delta) == pytest.approx(1.0 - float(res.r2_base), abs=1e-12)
    assert float(res.delta) > 5 * float(res.null_mean) > 0


def test_linear_baseline_shows_spurious_leakage_under_nonuniform_sampling():
    T = 64
    y = relative_map(T, F_REL)
    sub = stats.stratified_pair_mask(T, 6, seed=0)  # equal pairs per offset: non-uniform over pairs
    lin = float(L_fit.fit_leakage(y, fit="linear+query", mask=sub).delta)
    sat = float(L_fit.fit_leakage(y, fit="saturated+query", mask=sub).delta)
    assert abs(sat) <= 1e-10
    assert lin > 0.01  # "a few hundredths" (paper2.md §7)


def test_observational_split_is_an_exact_identity():
    T = 12
    rng = np.random.default_rng(2)
    s = causal(
        relative_map(T, F_REL)
        + rng.normal(size=(4, T, T))
        + 0.4 * np.log1p(np.arange(T))[None, None, :]
    )
    for fit in ("saturated+query", "saturated+both"):
        sp = L_fit.observational_split(s, fit=fit)
        np.testing.assert_allclose(
            sp["logit"] + sp["logz"] + sp["cross"], sp["logattn"], rtol=1e-10, atol=1e-14
        )
        np.testing.assert_allclose(
            sp["logattn"],
            L_fit.fit_leakage(L_metric.log_attention(s), fit=fit).delta,
            rtol=1e-10,
        )
        np.testing.assert_allclose(
            sp["delta_logit"], L_fit.fit_leakage(s, fit=fit).delta, rtol=1e-10
        )
        # Independent cross term: −2 <P_Δ s, P_Δ ℓ> / SST(a) with dense projectors.
        m = L_design.pair_mask(T)
        pd = projector_delta(m, fit)
        a = L_metric.log_attention(s)
        for n in range(4):
            ell = (s[n] - a[n])[m]
            aa = a[n][m]
            sst = ((aa - aa.mean()) ** 2).sum()
            assert sp["cross"][n] == pytest.approx(-2 * s[n][m] @ pd @ ell / sst, abs=1e-10)
