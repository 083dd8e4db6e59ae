"""ΔR², its solver and its null (paper2.extraction.metric): equal to dense least squares, the
numpy path equal to torch's, the exact permutation-null mean, the strided diagonals; on whole maps
(tests/leakage_fit_oracle.py): relative maps read 0, log-attention and linear baselines against
dense least squares, the observational split's exact identity."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats
import torch

import tests.leakage_fit_oracle as L_fit
from causalpos import stats
from causalpos.paper2.extraction import design as L_design
from causalpos.paper2.extraction import metric as L_metric
from tests.paper2_leakage_maps import (
    F_REL,
    FITS,
    causal,
    dense_design,
    dense_r2,
    projector_delta,
    relative_map,
    synthetic_scores,
)


@pytest.mark.parametrize("fit", FITS)
def test_solver_equals_dense_lstsq(fit):
    T = 9
    rng = np.random.default_rng(11)
    maps = causal(rng.normal(size=(3, T, T)) + np.arange(T)[:, None] * 0.3)
    sub = stats.stratified_pair_mask(T, 3, seed=2)
    for mask, window in ((None, "all"), (sub, "all"), (None, "late"), (None, "early5")):
        res = L_fit.fit_leakage(maps, fit=fit, mask=mask, window=window)
        m = L_design.pair_mask(T, window=window, subsample=sub if mask is not None else None)
        x, f = dense_design(m, fit)
        assert res.k == np.linalg.matrix_rank(f) - np.linalg.matrix_rank(x)
        for n in range(3):
            b, full = dense_r2(maps[n], m, fit)
            assert res.r2_base[n] == pytest.approx(b, abs=1e-10)
            assert res.r2_full[n] == pytest.approx(full, abs=1e-10)
            assert res.delta[n] == pytest.approx(full - b, abs=1e-10)


@pytest.mark.parametrize("fit", ["saturated+query", "linear+query", "saturated+both"])
def test_c_vector_and_pair_pattern_in_numpy_equal_torchs(fit):
    # the summaries call metric's functions with numpy arrays (no torch loaded), the reducers
    # with tensors: the same formula on each
    rng = np.random.default_rng(8)
    T = 10
    y = rng.normal(size=(4, T, T))
    w = L_design.pair_mask(T, window="early7")
    design = L_design.build_design(w, fit, landmark=fit.endswith("query"))
    sums = L_fit.pair_sums(torch.as_tensor(y), torch.as_tensor(w), int(w.sum()))
    c_t, u_t = L_metric.c_vector(sums, design)
    c_n, u_n = L_metric.c_vector({k: v.numpy() for k, v in sums.items()}, design)
    np.testing.assert_allclose(c_n, c_t.numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(u_n, u_t.numpy(), rtol=1e-14, atol=1e-14)
    fin = np.isfinite(np.where(np.tril(np.ones((T, T), bool)), y, np.nan))
    assert np.array_equal(
        L_metric.allowed_pattern(fin), L_metric.allowed_pattern(torch.as_tensor(fin))
    )
    bad = fin.copy()
    bad[1, 3, 2] = False
    for f in (bad, torch.as_tensor(bad)):
        with pytest.raises(ValueError, match="finite pattern differs"):
            L_metric.allowed_pattern(f)


def test_pure_noise_mean_delta_is_k_over_n_minus_1_not_the_spec_formula():
    T, reps = 16, 4000
    n = T * (T + 1) // 2 - 1
    rng = np.random.default_rng(0)
    res = L_fit.fit_leakage(causal(rng.normal(size=(reps, T, T))))
    exact = (T - 2) / (n - 1)  # Beta(k/2, (N−1−k)/2) mean, k = T − 2
    spec = (T - 1) / (n - 2 * T + 1)  # paper2.md §2's approximation
    se = res.delta.std() / np.sqrt(reps)
    assert abs(res.delta.mean() - exact) < 4 * se
    assert abs(res.delta.mean() - spec) > 20 * se
    # ΔR² ~ Beta(k/2, (N−1−k)/2): compare the spread too.
    assert res.delta.std() == pytest.approx(
        scipy.stats.beta((T - 2) / 2, (n - 1 - (T - 2)) / 2).std(), rel=0.05
    )
    # The exact within-offset permutation mean, per map, averages to the same floor.
    assert abs(res.null_mean.mean() - exact) < 4 * se


@pytest.mark.parametrize("fit", FITS)
def test_exact_permutation_mean_by_enumeration(fit):
    # T = 4: strata sizes 3, 3, 2, 1 -> 72 within-offset permutations, enumerated exactly.
    T = 4
    rng = np.random.default_rng(5)
    y = causal(rng.normal(size=(T, T)) + 0.7 * np.arange(T)[None, :])
    m = L_design.pair_mask(T)
    i, j = np.nonzero(m)
    d = i - j
    groups = [np.flatnonzero(d == s) for s in range(T)]
    yy = y[m]
    pd = projector_delta(m, fit)
    dss = []
    for combo in itertools.product(*(itertools.permutations(g) for g in groups)):
        sigma = np.empty(yy.size, dtype=int)
        for g, pg in zip(groups, combo):
            sigma[g] = pg
        yp = yy[list(sigma)]
        dss.append(yp @ pd @ yp)
    assert len(dss) == 72
    res = L_fit.fit_leakage(y, fit=fit)
    assert float(res.null_mean * res.sst) == pytest.approx(np.mean(dss), abs=1e-10)


def test_errors_are_explicit():
    with pytest.raises(ValueError, match="baseline"):
        L_design.parse_fit("saturated")
    with pytest.raises(ValueError, match="early<K>"):
        L_design.query_window("first16", 64)
    s = synthetic_scores(2, 1, 8, 0)
    s[1, 0, 5, 2] = float("nan")
    with pytest.raises(ValueError, match="differs between maps"):
        L_fit.fit_leakage(s)
    with pytest.raises(ValueError, match="above the diagonal"):
        L_design.build_design(np.ones((4, 4), bool))


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
    a = L_fit.log_attention(y)
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
            L_fit.fit_leakage(L_fit.log_attention(s), fit=fit).delta,
            rtol=1e-10,
        )
        np.testing.assert_allclose(
            sp["delta_logit"], L_fit.fit_leakage(s, fit=fit).delta, rtol=1e-10
        )
        # Independent cross term: −2 <P_Δ s, P_Δ ℓ> / SST(a) with dense projectors.
        m = L_design.pair_mask(T)
        pd = projector_delta(m, fit)
        a = L_fit.log_attention(s)
        for n in range(4):
            ell = (s[n] - a[n])[m]
            aa = a[n][m]
            sst = ((aa - aa.mean()) ** 2).sum()
            assert sp["cross"][n] == pytest.approx(-2 * s[n][m] @ pd @ ell / sst, abs=1e-10)
