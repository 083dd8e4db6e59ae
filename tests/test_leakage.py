"""Tests of causalpos.leakage against closed forms and dense least squares."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import scipy.stats
import torch

from causalpos import stats
from causalpos.paper2 import design as L_design
from causalpos.paper2 import metric as L_metric
from causalpos.paper2 import permutation as L_permutation
from causalpos.paper2 import reducers as L_reducers
from causalpos.paper2 import summary as L_summary
from causalpos.paper2 import tables as L_tables

FITS = [f"{b}+{a}" for b in L_design.BASELINES for a in L_design.ABSOLUTES]


# ---- independent reference: dense design matrices and numpy.linalg.lstsq ----------------------


def dense_design(mask: np.ndarray, fit: str) -> tuple[np.ndarray, np.ndarray]:
    baseline, absolute = L_design.parse_fit(fit)
    T = mask.shape[0]
    i, j = np.nonzero(mask)
    d = i - j
    x = (
        (d[:, None] == np.arange(T)).astype(float)
        if baseline == "saturated"
        else np.stack([np.ones(d.size), d], 1)
    )
    z = []
    if absolute in ("query", "both"):
        z.append((i[:, None] == np.arange(T)).astype(float))
    if absolute in ("key", "both"):
        z.append((j[:, None] == np.arange(T)).astype(float))
    return x, np.concatenate([x] + z, axis=1)


def dense_r2(y: np.ndarray, mask: np.ndarray, fit: str) -> tuple[float, float]:
    """(R²(B), R²(F)) of one map by lstsq on the dense (pairs × parameters) design."""
    x, f = dense_design(mask, fit)
    yy = y[mask]
    sst = ((yy - yy.mean()) ** 2).sum()

    def ssr(a):
        coef = np.linalg.lstsq(a, yy, rcond=None)[0]
        r = yy - a @ coef
        return r @ r

    return 1 - ssr(x) / sst, 1 - ssr(f) / sst


def projector_delta(mask: np.ndarray, fit: str) -> np.ndarray:
    """P_F − P_B over the pairs (dense), the projector whose squared norm is ΔSS."""
    x, f = dense_design(mask, fit)
    proj = lambda a: a @ np.linalg.pinv(a)  # noqa: E731
    return proj(f) - proj(x)


def causal(y: np.ndarray) -> np.ndarray:
    T = y.shape[-1]
    return np.where(np.tril(np.ones((T, T), dtype=bool)), y, np.nan)


def relative_map(T: int, f) -> np.ndarray:
    i, j = np.indices((T, T))
    return causal(f(np.clip(i - j, 0, None).astype(float)))


def F_REL(d: np.ndarray) -> np.ndarray:
    """A non-linear relative profile (several frequencies plus a decay, like RoPE logits)."""
    return np.cos(0.9 * d) + 2.0 * np.exp(-d / 4.0) + 0.1 * np.sin(0.13 * d * d)


# ---- exactness ------------------------------------------------------------------------------


@pytest.mark.parametrize("absolute", L_design.ABSOLUTES)
def test_relative_logits_have_zero_leakage_under_saturated_baseline(absolute):
    T = 40
    y = relative_map(T, F_REL)
    res = L_metric.fit_leakage(y, fit=f"saturated+{absolute}")
    assert abs(float(res.delta)) <= 1e-10
    sub = stats.stratified_pair_mask(T, 7, seed=3)
    assert abs(float(L_metric.fit_leakage(y, fit=f"saturated+{absolute}", mask=sub).delta)) <= 1e-10


def test_log_attention_of_relative_logits_leaks_and_matches_dense():
    # The causal-mask mechanism: Z_i sums over i+1 keys, so a_ij = f(i−j) − log Z_i is not relative.
    T = 14
    y = relative_map(T, F_REL)
    a = L_metric.log_attention(y)
    ref = torch.log_softmax(torch.tensor(np.where(np.isnan(y), -np.inf, y)), -1).numpy()
    np.testing.assert_allclose(a[np.isfinite(y)], ref[np.isfinite(y)], rtol=0, atol=1e-14)
    m = L_design.pair_mask(T)
    for fit in FITS:
        res = L_metric.fit_leakage(a, fit=fit)
        b, f = dense_r2(a, m, fit)
        assert float(res.delta) == pytest.approx(f - b, abs=1e-10)
    # a = f(i−j) − log Z_i lies exactly in F = offsets + query effects: R²(F) = 1 and all the
    # variance the offsets miss is leakage, well above the within-offset permutation mean.
    res = L_metric.fit_leakage(a)
    assert float(res.r2_full) == pytest.approx(1.0, abs=1e-12)
    assert float(res.delta) == pytest.approx(1.0 - float(res.r2_base), abs=1e-12)
    assert float(res.delta) > 5 * float(res.null_mean) > 0


def test_linear_baseline_shows_spurious_leakage_under_nonuniform_sampling():
    T = 64
    y = relative_map(T, F_REL)
    sub = stats.stratified_pair_mask(T, 6, seed=0)  # equal pairs per offset: non-uniform over pairs
    lin = float(L_metric.fit_leakage(y, fit="linear+query", mask=sub).delta)
    sat = float(L_metric.fit_leakage(y, fit="saturated+query", mask=sub).delta)
    assert abs(sat) <= 1e-10
    assert lin > 0.01  # "a few hundredths" (paper2.md §7)


@pytest.mark.parametrize("fit", FITS)
def test_solver_equals_dense_lstsq(fit):
    T = 9
    rng = np.random.default_rng(11)
    maps = causal(rng.normal(size=(3, T, T)) + np.arange(T)[:, None] * 0.3)
    sub = stats.stratified_pair_mask(T, 3, seed=2)
    for mask, window in ((None, "all"), (sub, "all"), (None, "late"), (None, "early5")):
        res = L_metric.fit_leakage(maps, fit=fit, mask=mask, window=window)
        m = L_design.pair_mask(T, window=window, subsample=sub if mask is not None else None)
        x, f = dense_design(m, fit)
        assert res.k == np.linalg.matrix_rank(f) - np.linalg.matrix_rank(x)
        for n in range(3):
            b, full = dense_r2(maps[n], m, fit)
            assert res.r2_base[n] == pytest.approx(b, abs=1e-10)
            assert res.r2_full[n] == pytest.approx(full, abs=1e-10)
            assert res.delta[n] == pytest.approx(full - b, abs=1e-10)


# ---- null floor ------------------------------------------------------------------------------


@pytest.mark.parametrize("fit", ["saturated+query", "linear+query", "saturated+both"])
def test_c_vector_and_pair_pattern_in_numpy_equal_torchs(fit):
    # the summaries call metric's functions with numpy arrays (no torch loaded), the reducers
    # with tensors: the same formula on each
    rng = np.random.default_rng(8)
    T = 10
    y = rng.normal(size=(4, T, T))
    w = L_design.pair_mask(T, window="early7")
    design = L_design.build_design(w, fit, landmark=fit.endswith("query"))
    sums = L_metric.pair_sums(torch.as_tensor(y), torch.as_tensor(w), int(w.sum()))
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


def test_null_floor_parameter_counts():
    T = 16
    m = L_design.pair_mask(T)
    n = T * (T + 1) // 2 - 1
    assert m.sum() == n
    assert L_design.null_floor(m, "saturated+query") == pytest.approx((T - 2) / (n - 1))
    assert L_design.null_floor(m, "saturated+key") == pytest.approx((T - 1) / (n - 1))
    assert L_design.null_floor(m, "saturated+both") == pytest.approx((2 * T - 4) / (n - 1))
    assert L_design.null_floor(m, "linear+query") == pytest.approx((T - 2) / (n - 1))


def test_pure_noise_mean_delta_is_k_over_n_minus_1_not_the_spec_formula():
    T, reps = 16, 4000
    n = T * (T + 1) // 2 - 1
    rng = np.random.default_rng(0)
    res = L_metric.fit_leakage(causal(rng.normal(size=(reps, T, T))))
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
    res = L_metric.fit_leakage(y, fit=fit)
    assert float(res.null_mean * res.sst) == pytest.approx(np.mean(dss), abs=1e-10)


def test_permutation_test_monte_carlo():
    T, maps, R = 12, 120, 300
    rng = np.random.default_rng(7)
    noise = causal(rng.normal(size=(maps, T, T)))
    res = L_permutation.permutation_test(noise, n_perm=R, seed=1)
    fit = L_metric.fit_leakage(noise)
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
    fitres = L_metric.fit_leakage(y, fit=fit)
    np.testing.assert_allclose(res.observed, fitres.delta, rtol=1e-10)
    assert res.null_mean.mean() == pytest.approx(fitres.null_mean.mean(), rel=0.02)


# ---- decomposition ---------------------------------------------------------------------------


def test_observational_split_is_an_exact_identity():
    T = 12
    rng = np.random.default_rng(2)
    s = causal(
        relative_map(T, F_REL)
        + rng.normal(size=(4, T, T))
        + 0.4 * np.log1p(np.arange(T))[None, None, :]
    )
    for fit in ("saturated+query", "saturated+both"):
        sp = L_metric.observational_split(s, fit=fit)
        np.testing.assert_allclose(
            sp["logit"] + sp["logz"] + sp["cross"], sp["logattn"], rtol=1e-10, atol=1e-14
        )
        np.testing.assert_allclose(
            sp["logattn"],
            L_metric.fit_leakage(L_metric.log_attention(s), fit=fit).delta,
            rtol=1e-10,
        )
        np.testing.assert_allclose(
            sp["delta_logit"], L_metric.fit_leakage(s, fit=fit).delta, rtol=1e-10
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


def test_decomposition_recovers_planted_shares():
    # Targets built as relative + absolute parts with planted ΔR²: the residual-stream part r1 in
    # both runs, the causal-mask part r2 (orthogonal to r1 in the absolute subspace) only in the
    # causal run. Planted: total 0.10, residual 0.036 -> shares 36 % / 64 % (paper 2's 3B/8B split).
    T = 24
    m = L_design.pair_mask(T)
    i, j = np.nonzero(m)
    pd = projector_delta(m, "saturated+query")
    f = relative_map(T, F_REL)[m]
    f = f - f.mean()
    sst_f = f @ f
    r1 = pd @ np.sin(0.5 * i) / np.linalg.norm(pd @ np.sin(0.5 * i))
    w = pd @ (-np.log1p(i.astype(float)))
    r2 = w - (w @ r1) * r1
    r2 /= np.linalg.norm(r2)
    rho_tot, rho_res = 0.10, 0.036
    a2 = rho_res * sst_f / (1 - rho_res)
    b2 = rho_tot * sst_f / (1 - rho_tot) - a2

    def as_map(v):
        out = np.full((T, T), np.nan)
        out[m] = v
        out[0, 0] = 0.0  # row 0 is never measured
        return out

    y_b = as_map(f + np.sqrt(a2) * r1)
    y_c = as_map(f + np.sqrt(a2) * r1 + np.sqrt(b2) * r2)
    dec = L_metric.decompose(L_metric.fit_leakage(y_c).delta, L_metric.fit_leakage(y_b).delta)
    assert float(dec["total"]) == pytest.approx(rho_tot, abs=1e-10)
    assert float(dec["residual"]) == pytest.approx(rho_res, abs=1e-10)
    assert float(dec["share_residual"]) == pytest.approx(0.36, abs=1e-9)
    assert float(dec["share_causal_mask"]) == pytest.approx(0.64, abs=1e-9)


# ---- reducer ---------------------------------------------------------------------------------


def synthetic_scores(
    batch: int,
    heads: int,
    T: int,
    seed: int,
    *,
    bidirectional: bool = False,
    window: int | None = None,
) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    rel = torch.cos(0.8 * (i - j).float()) + torch.exp(-(i - j).abs().float() / 3)
    sink = torch.where(j == 0, 2.0, 0.0)
    s = (
        rel
        + sink * torch.rand(batch, heads, 1, 1, generator=g)
        + 0.5 * torch.randn(batch, heads, T, T, generator=g)
    )
    if not bidirectional:
        keep = j <= i
        if window is not None:
            keep = keep & (i - j < window)
        s = torch.where(keep, s, torch.nan)
    return s.float()


REDUCER_KW = dict(
    fits=("saturated+query", "linear+key", "saturated+both"), windows=("all", "early6", "late")
)


def run_reducer(batches, **kw):
    red = L_reducers.LeakageReducer(**{**REDUCER_KW, **kw})
    for seq_ids, per_layer in batches:
        for layer, s in enumerate(per_layer):
            red.update(layer, s, seq_ids)
    return red.result(), red


def make_batches(T=12, heads=2, seed=0, **kw):
    out = []
    sid = 0
    for b, size in enumerate((3, 2, 3)):
        ids = np.arange(sid, sid + size)
        sid += size
        out.append(
            (
                ids,
                [
                    synthetic_scores(size, heads, T, seed + 10 * b + layer, **kw)
                    for layer in range(2)
                ],
            )
        )
    return out


def test_reducer_equals_pure_functions():
    batches = make_batches()
    ds, _ = run_reducer(batches)
    assert ds["leak_delta"].dims == (
        "sequence",
        "layer",
        "head",
        "leak_window",
        "leak_fit",
        "leak_target",
    )
    for ids, per_layer in batches:
        for layer, s in enumerate(per_layer):
            a = L_metric.log_attention(s)
            for w in REDUCER_KW["windows"]:
                for fit in REDUCER_KW["fits"]:
                    sel = dict(sequence=ids, layer=layer, leak_window=w, leak_fit=fit)
                    for target, y in (("logit", s), ("logattn", a)):
                        ref = L_metric.fit_leakage(y, fit=fit, window=w)
                        got = ds.sel(**sel, leak_target=target)
                        np.testing.assert_allclose(
                            got["leak_delta"].values, ref.delta, rtol=1e-12, atol=1e-15
                        )
                        np.testing.assert_allclose(
                            got["leak_null"].values, ref.null_mean, rtol=1e-12, atol=1e-15
                        )
                        np.testing.assert_allclose(
                            got["leak_r2_base"].values, ref.r2_base, rtol=1e-12
                        )
                        np.testing.assert_allclose(
                            got["leak_r2_full"].values, ref.r2_full, rtol=1e-12
                        )
                    sp = L_metric.observational_split(s, fit=fit, window=w)
                    for term in L_metric.SPLIT_TERMS:
                        np.testing.assert_allclose(
                            ds["leak_split"].sel(**sel, leak_term=term).values,
                            sp[term],
                            rtol=1e-12,
                            atol=1e-15,
                        )
                    assert (
                        float(ds["leak_floor"].sel(layer=layer, leak_window=w, leak_fit=fit))
                        == ref.floor
                    )
    total = {0: 0, 1: 0}
    for _ids, per_layer in batches:
        for layer, s in enumerate(per_layer):
            total[layer] = total[layer] + s.double().sum(0)
    np.testing.assert_allclose(
        ds["leak_map_sum"].sel(leak_target="logit", layer=1).values,
        total[1].numpy(),
        rtol=1e-13,
        equal_nan=True,
    )
    assert int(ds["leak_map_count"]) == 8


def test_reducer_merge_equals_single_pass():
    batches = make_batches(seed=4)
    single, _ = run_reducer(batches)
    shard_a, _ = run_reducer(batches[:1])
    shard_b, _ = run_reducer(batches[1:])
    merged = L_reducers.LeakageReducer.merge([shard_b, shard_a])
    for k in L_reducers.LeakageReducer._PER_SEQ:
        np.testing.assert_array_equal(merged[k].values, single[k].values)
    np.testing.assert_array_equal(merged["sequence"].values, single["sequence"].values)
    np.testing.assert_allclose(
        merged["leak_map_sum"].values, single["leak_map_sum"].values, rtol=1e-13, equal_nan=True
    )
    assert int(merged["leak_map_count"]) == int(single["leak_map_count"])
    with pytest.raises(ValueError, match="share sequence ids"):
        L_reducers.LeakageReducer.merge([shard_a, shard_a])


def test_reducers_work_through_a_large_batch_in_chunks_with_the_same_result(monkeypatch):
    """A batch is cut into chunks of at most ``work_cells`` score cells (bounded float64
    temporaries on a GPU); per-map results and mean-map sums are the same up to the rounding of
    batched products and summation order, and one sequence per chunk is the floor."""
    from causalpos.capture import reducers as capture_reducers

    batches = make_batches(seed=7)
    whole, _ = run_reducer(batches)
    sinks = {}
    for cells in (None, 1):  # 1 cell: every sequence its own chunk
        if cells is not None:
            monkeypatch.setattr(capture_reducers, "work_cells", lambda device, c=cells: c)
        sink = L_reducers.SinkReducer()
        for ids, per_layer in batches:
            for layer, s in enumerate(per_layer):
                sink.update(layer, s, ids)
        sinks[cells] = sink.result()
    chunked, _ = run_reducer(batches)
    chunks = list(capture_reducers.batch_chunks(batches[0][1][0], batches[0][0]))
    assert [c.shape[0] for c, _ in chunks] == [1, 1, 1]
    for k in L_reducers.LeakageReducer._PER_SEQ:
        np.testing.assert_allclose(chunked[k].values, whole[k].values, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        chunked["leak_map_sum"].values, whole["leak_map_sum"].values, rtol=1e-13, equal_nan=True
    )
    np.testing.assert_array_equal(
        sinks[1]["sink_attention"].values, sinks[None]["sink_attention"].values
    )


def test_unpadded_diagonals_give_the_padded_sums_bit_for_bit():
    """The reducer's target sums read the diagonals from the centred maps themselves (windows
    from row 1 on a causal pair set); every window's sums equal the padded copy's exactly, for
    one target and for two stacked ones, and a window reaching row 0 is refused."""
    T = 12
    s = synthetic_scores(3, 2, T, 5).double()
    a = L_metric.log_attention(s)
    w_np = L_metric.measured_mask(torch.isfinite(s), None, "all")
    w = torch.as_tensor(w_np)
    n = int(w_np.sum())
    padded = [L_metric.target_sums(y, w, n) for y in (s, a)]
    fast = L_metric.target_sums((s, a), w, n, first_row=1)
    assert padded[0]["r0"] == 0 and fast["r0"] == 1 and fast["lead"] == (2, 3, 2)
    for lo, hi in ((1, T), (1, 4), (5, 9), (T // 2, T)):
        got = L_metric.window_sums(fast, lo, hi)
        for t, ref_ts in enumerate(padded):
            ref = L_metric.window_sums(ref_ts, lo, hi)
            for key in ("rows", "cols", "off", "off2", "S", "Q"):
                assert torch.equal(got[key][t], ref[key]), (lo, hi, key)
    with pytest.raises(ValueError, match="start at row 1"):
        L_metric.window_sums(fast, 0, T)
    # a pair set reaching row 0 or above the diagonal keeps the padded copy
    full = torch.ones(T, T, dtype=torch.bool)
    assert L_metric.target_sums(s, full, T * T, first_row=1)["r0"] == 0


def test_stacked_designs_solve_each_window_as_its_own_design():
    """DesignStack: one batched fit over windows equals fit_sums with each window's design."""
    from causalpos.paper2 import windows as L_windows

    T = 12
    s = synthetic_scores(2, 2, T, 9).double()
    base = L_metric.measured_mask(torch.isfinite(s), None, "all")
    names = ("all", "early6", "late")
    for fit in REDUCER_KW["fits"]:
        plan = L_windows.plan_windows(base, names, (fit,))
        ts = L_metric.target_sums(s, torch.as_tensor(base), int(base.sum()), first_row=1)
        per = [L_metric.window_sums(ts, *plan.bounds[k]) for k in plan.valid]
        stacked = {
            key: torch.stack([p[key] for p in per]).reshape(len(per), 4, -1) for key in per[0]
        }
        for key in ("S", "Q"):
            stacked[key] = stacked[key][..., 0]
        got = L_metric.fit_sums(stacked, plan.stacks[0])
        for k, wi in enumerate(plan.valid):
            lo, hi = plan.bounds[wi]
            w_np = base & ((np.arange(T) >= lo) & (np.arange(T) < hi))[:, None]
            ref = L_metric.fit_sums(per[k], L_design.build_design(w_np, fit))
            for key in ("sst", "ss_base", "dss", "null"):
                np.testing.assert_allclose(
                    got[key][k].numpy(), ref[key].reshape(-1).numpy(), rtol=1e-12, atol=1e-13
                )
            assert plan.floors[wi, 0] == L_design.build_design(w_np, fit).floor


def test_reducer_window_without_pairs_is_nan_in_every_variable():
    """A window with fewer than two pairs (early1: no query row) is NaN everywhere, its
    expected-map sums included, and leaves the other windows as they are alone."""
    s = synthetic_scores(2, 2, 10, 3)
    kw = dict(fits=("saturated+query", "linear+query"), expected_stats=True)
    both = L_reducers.LeakageReducer(windows=("all", "early1"), **kw)
    alone = L_reducers.LeakageReducer(windows=("all",), **kw)
    for red in (both, alone):
        red.update(0, s, np.array([0, 1]))
    got, ref = both.result(), alone.result()
    assert int(got["leak_n_pairs"].sel(leak_window="early1", layer=0)) == 0
    for k in L_reducers.LeakageReducer._PER_SEQ:
        if "leak_window" in got[k].dims or "leak_exp_window" in got[k].dims:
            dim = "leak_window" if "leak_window" in got[k].dims else "leak_exp_window"
            assert np.isnan(got[k].sel({dim: "early1"}).values).all(), k
            np.testing.assert_array_equal(got[k].sel({dim: "all"}), ref[k].sel({dim: "all"}))
        else:
            np.testing.assert_array_equal(got[k].values, ref[k].values)


def test_reducer_bidirectional_and_sliding_window():
    T = 12
    s = synthetic_scores(2, 2, T, 1, bidirectional=True)
    red = L_reducers.LeakageReducer(fits=("saturated+query",), windows=("all",))
    red.update(0, s, np.array([0, 1]))
    ds = red.result()
    # Bidirectional: Z over all T keys, measured on the lower triangle.
    a = s.double() - torch.logsumexp(s.double(), -1, keepdim=True)
    ref = L_metric.fit_leakage(causal(a.numpy()))
    np.testing.assert_allclose(
        ds["leak_delta"].sel(leak_target="logattn").values[:, 0, :, 0, 0], ref.delta, rtol=1e-12
    )
    # Sliding window of 4: only offsets 0..3 are measured and the log-softmax runs over the window.
    sw = synthetic_scores(2, 2, T, 2, window=4)
    red = L_reducers.LeakageReducer(fits=("saturated+query",), windows=("all",), pair_subsample=3)
    red.update(0, sw, np.array([5, 6]))
    ds = red.result()
    sub = stats.stratified_pair_mask(T, 3, seed=0)
    win = np.tril(np.ones((T, T), bool)) & ~np.tril(np.ones((T, T), bool), -4)
    assert int(ds["leak_n_pairs"].sel(layer=0, leak_window="all")) == int(
        (L_design.pair_mask(T) & sub & win).sum()
    )
    ref = L_metric.fit_leakage(L_metric.log_attention(sw), mask=sub & win)
    np.testing.assert_allclose(
        ds["leak_delta"].sel(leak_target="logattn").values[:, 0, :, 0, 0], ref.delta, rtol=1e-12
    )


def test_errors_are_explicit():
    with pytest.raises(ValueError, match="baseline"):
        L_design.parse_fit("saturated")
    with pytest.raises(ValueError, match="early<K>"):
        L_design.query_window("first16", 64)
    s = synthetic_scores(2, 1, 8, 0)
    s[1, 0, 5, 2] = float("nan")
    with pytest.raises(ValueError, match="differs between maps"):
        L_metric.fit_leakage(s)
    with pytest.raises(ValueError, match="above the diagonal"):
        L_design.build_design(np.ones((4, 4), bool))


# ---- stage -----------------------------------------------------------------------------------


def test_leakage_summary_and_tables():
    T = 10
    stores = {}
    for v, kw in (
        ("causal", {}),
        ("bidirectional", {"bidirectional": True}),
        ("bos_replace_zeros", {}),
    ):
        ds, _ = run_reducer(
            make_batches(
                T=T, seed={"causal": 0, "bidirectional": 100, "bos_replace_zeros": 200}[v], **kw
            ),
            windows=("all", "early6", "late"),
        )
        stores[v] = ds
    summ = L_summary.leakage_summary(
        stores, n_boot=200, n_perm=40, seed=0, bos_windows=("early6", "late")
    )
    c = stores["causal"].sel(leak_fit="saturated+query", leak_window="all")
    exc = (c["leak_delta"] - c["leak_null"]).sel(leak_target="logattn").values
    b = stores["bidirectional"].sel(leak_fit="saturated+query", leak_window="all")
    exb = (b["leak_delta"] - b["leak_null"]).sel(leak_target="logattn").values
    dec = summ["decomposition"].sel(condition="rope", stat="estimate")
    assert float(dec.sel(component="total")) == pytest.approx(exc.mean(), rel=1e-12)
    assert float(dec.sel(component="residual")) == pytest.approx(exb.mean(), rel=1e-12)
    assert float(
        dec.sel(component="share_residual") + dec.sel(component="share_causal_mask")
    ) == pytest.approx(1.0)
    lm = summ["leakage_model"].sel(variant="causal", target="logattn")
    assert float(lm.sel(stat="lo")) <= float(lm.sel(stat="estimate")) <= float(lm.sel(stat="hi"))
    p = summ["p_value"].sel(variant="causal", target="logit").values
    np.testing.assert_allclose(
        summ["q_value"].sel(variant="causal", target="logit").values.ravel(),
        scipy.stats.false_discovery_control(p.ravel()),
    )
    obs = summ["observational_split"].sel(causal_variant="causal", stat="estimate")
    assert float(obs.sel(obs_term="softmax")) == pytest.approx(
        float(obs.sel(obs_term="logattn") - obs.sel(obs_term="logit"))
    )
    assert list(summ["causal_variant"].values) == ["causal", "bos_replace_zeros"]
    raw = L_summary.leakage_summary(stores, n_boot=50, n_perm=0, floor_correct=False)
    ro = raw["observational_split"].sel(causal_variant="causal", stat="estimate")
    assert float(
        ro.sel(obs_term="logit") + ro.sel(obs_term="logz") + ro.sel(obs_term="cross")
    ) == pytest.approx(float(ro.sel(obs_term="logattn")), rel=1e-10)
    assert np.isnan(raw["p_value"].values).all()
    eff = summ["bos_effect"].sel(intervention="zeros", bos_window="late", stat="estimate")
    cz = stores["bos_replace_zeros"].sel(
        leak_fit="saturated+query", leak_window="late", leak_target="logit"
    )
    cc = stores["causal"].sel(leak_fit="saturated+query", leak_window="late", leak_target="logit")
    expect = (
        1
        - (cz["leak_delta"] - cz["leak_null"]).values.mean()
        / (cc["leak_delta"] - cc["leak_null"]).values.mean()
    )
    assert float(eff) == pytest.approx(expect, rel=1e-12)
    tabs = L_tables.summary_tables(summ)
    assert set(tabs) >= {
        "leakage_by_model",
        "leakage_by_layer",
        "heads",
        "decomposition",
        "observational_split",
        "bos_effects",
    }
    assert len(tabs["heads"]) == 3 * 2 * 2 * 2  # variants x targets x layers x heads
    row = tabs["decomposition"].query("condition == 'rope' and component == 'total'")
    assert float(row["estimate"].iloc[0]) == pytest.approx(exc.mean(), rel=1e-12)


def _excess(ds, target="logattn", window="all"):
    """Per-prompt floor-corrected leakage, prompts sorted, mean over layers and heads."""
    d = ds.sortby("sequence").sel(
        leak_fit="saturated+query", leak_window=window, leak_target=target
    )
    return (d["leak_delta"] - d["leak_null"]).values.mean((1, 2))


def test_decomposition_under_each_rope_control_and_missing_runs_reported():
    """Table 6: the decomposition under each RoPE condition (causal run and its bidirectional
    composition), the paired CI of the share differences, and conditions / BOS interventions
    whose runs are missing reported as not run (issue 11: `identity_rope_bidirectional` used
    to be silently dropped)."""
    from causalpos.paper2.markdown import paper2_markdown

    T = 10
    runs = {
        "causal": (0, {}),
        "bidirectional": (100, {"bidirectional": True}),
        "identity_rope": (200, {}),
        "identity_rope+bidirectional": (300, {"bidirectional": True}),
        "scrambled_rope": (400, {}),  # no bidirectional twin: the condition is not run
        "bos_replace_mean+bidirectional": (500, {"bidirectional": True}),
        "bos_replace_zeros": (600, {}),
        # its baseline scrambled_rope+bidirectional is missing: not run
        "scrambled_rope+bos_replace_mean+bidirectional": (700, {"bidirectional": True}),
    }
    stores = {
        v: run_reducer(make_batches(T=T, seed=seed, **kw), windows=("all", "early6", "late"))[0]
        for v, (seed, kw) in runs.items()
    }
    n_boot, seed = 300, 5
    summ = L_summary.leakage_summary(
        stores, n_boot=n_boot, n_perm=0, seed=seed, bos_windows=("early6", "late")
    )
    assert list(summ["condition"].values) == ["rope", "identity_rope"]
    assert json.loads(summ.attrs["conditions_not_run"]) == {
        "scrambled_rope": ["scrambled_rope+bidirectional"]
    }
    counts = stats.bootstrap_counts(8, n_boot, seed)
    boot_share = {}
    for cond, (cv, bv) in (
        ("rope", ("causal", "bidirectional")),
        ("identity_rope", ("identity_rope", "identity_rope+bidirectional")),
    ):
        tot, res = _excess(stores[cv]), _excess(stores[bv])
        dec = summ["decomposition"].sel(condition=cond, stat="estimate")
        assert float(dec.sel(component="total")) == pytest.approx(tot.mean(), rel=1e-12)
        assert float(dec.sel(component="residual")) == pytest.approx(res.mean(), rel=1e-12)
        # Eq. 5 under every control: causal mask = total - residual, exactly
        assert float(dec.sel(component="causal_mask")) == float(
            dec.sel(component="total") - dec.sel(component="residual")
        )
        layer = summ["decomposition_layer"].sel(condition=cond, stat="estimate")
        np.testing.assert_array_equal(
            layer.sel(component="causal_mask"),
            layer.sel(component="total") - layer.sel(component="residual"),
        )
        bt, br = stats.bootstrap_means(tot, counts), stats.bootstrap_means(res, counts)
        boot_share[cond] = ((tot.mean() - res.mean()) / tot.mean(), (bt - br) / bt)
    # the paired difference: replicate-by-replicate on the same resampled prompts
    diff = summ["decomposition_difference"].sel(
        condition="identity_rope", condition_ref="rope", component="share_causal_mask"
    )
    (e_i, b_i), (e_r, b_r) = boot_share["identity_rope"], boot_share["rope"]
    lo, hi = stats.percentile_ci(b_i - b_r, 0.95)
    np.testing.assert_allclose(diff.values, [e_i - e_r, lo, hi], rtol=1e-12)
    same = summ["decomposition_difference"].sel(condition="rope", condition_ref="rope")
    assert (same.values == 0).all()

    # BOS interventions: each against the same run without the replacement
    pairs = json.loads(summ.attrs["bos"])
    assert pairs == {
        "mean+bidirectional": ["bos_replace_mean+bidirectional", "bidirectional", "logattn"],
        "zeros": ["bos_replace_zeros", "causal", "logit"],
    }
    assert json.loads(summ.attrs["bos_not_run"]) == {
        "scrambled_rope+mean+bidirectional": {
            "runs": [
                "scrambled_rope+bos_replace_mean+bidirectional",
                "scrambled_rope+bidirectional",
                "logattn",
            ],
            "missing": ["scrambled_rope+bidirectional"],
        }
    }
    ci_, cb_ = (
        _excess(stores["bos_replace_mean+bidirectional"], window="early6"),
        _excess(stores["bidirectional"], window="early6"),
    )
    eff = summ["bos_effect"].sel(intervention="mean+bidirectional", bos_window="early6")
    assert float(eff.sel(stat="estimate")) == pytest.approx(1 - ci_.mean() / cb_.mean(), rel=1e-12)
    # the causal runs' observational split excludes every bidirectional composition
    assert list(summ["causal_variant"].values) == [
        "causal",
        "identity_rope",
        "scrambled_rope",
        "bos_replace_zeros",
    ]

    # tables: every condition measured or reported not run, never dropped
    summ.attrs.update(fixed_bos=1, prefix_ids=[1], prepend_bos="true")
    tabs = L_tables.paper2_tables({("m", "d"): summ})
    rc = tabs["rope_controls"].set_index("condition")
    assert list(rc.index) == ["rope", "identity_rope", "scrambled_rope"]
    assert rc.loc["scrambled_rope", "status"] == "not run: no 'scrambled_rope+bidirectional' run"
    assert np.isnan(rc.loc["scrambled_rope", "share_causal_mask"])
    assert rc.loc["identity_rope", "share_causal_mask"] == float(
        summ["decomposition"].sel(
            condition="identity_rope", component="share_causal_mask", stat="estimate"
        )
    )
    assert rc.loc["identity_rope", "share_causal_mask_minus_rope"] == pytest.approx(
        e_i - e_r, rel=1e-12
    )
    assert rc.loc["identity_rope", "share_causal_mask_minus_rope_lo"] == pytest.approx(
        lo, rel=1e-12
    )
    assert (rc["fixed_bos"] == 1).all() and (rc["prefix_ids"] == "[1]").all()
    dec = tabs["decomposition"].set_index("condition")
    assert dec.loc["scrambled_rope", "status"].startswith("not run") and np.isnan(
        dec.loc["scrambled_rope", "total"]
    )
    assert dec.loc["rope", "status"] == "measured"
    bos = tabs["bos_effects"]
    mean = bos[(bos["intervention"] == "mean+bidirectional") & (bos["bos_window"] == "early6")]
    assert mean[["replacement", "measure", "status"]].values.tolist() == [
        ["mean", "residual_stream", "measured"]
    ]
    assert set(bos.loc[bos["intervention"] == "zeros", "measure"]) == {"logit"}
    missing = bos[bos["status"] != "measured"]
    assert missing["intervention"].tolist() == ["scrambled_rope+mean+bidirectional"]
    md = paper2_markdown(tabs)
    assert "not run: no 'scrambled_rope+bidirectional' run" in md


def test_reducers_inside_capture_match_eager_attention():
    # End to end through capture.capture_scores on a random-init tiny Llama; reference: the
    # model's own eager attention probabilities (float32), an independent path to log A_ij.
    import copy

    from test_planted import _tiny_llama
    from transformers import LlamaForCausalLM

    from causalpos.capture import hook as capture
    from causalpos.paper2 import reducers as P

    model = _tiny_llama()  # 2 layers, 4 heads, 2 KV heads, seeded
    tok = np.random.default_rng(0).integers(3, 64, (5, 16))
    tok[:, 0] = 1
    tri = np.tril(np.ones((16, 16), dtype=bool))
    for variant in ("causal", "bidirectional"):
        ds = capture.capture_scores(
            model,
            tok,
            variant=variant,
            batch_size=2,
            seed=0,
            progress=False,
            reducers=[
                L_reducers.LeakageReducer(fits=("saturated+query",), windows=("all",)),
                P.SinkReducer(),
            ],
        )
        eager = LlamaForCausalLM(copy.deepcopy(model.config)).eval()
        eager.load_state_dict(model.state_dict())
        eager.set_attn_implementation("eager")
        eager.config.is_causal = variant == "causal"
        with torch.no_grad():
            att = eager(torch.tensor(tok), output_attentions=True).attentions
        for layer, a in enumerate(att):
            ref = L_metric.fit_leakage(np.where(tri, torch.log(a.double()).numpy(), np.nan))
            got = (
                ds["leak_delta"]
                .sel(
                    layer=layer,
                    leak_window="all",
                    leak_fit="saturated+query",
                    leak_target="logattn",
                )
                .values
            )
            np.testing.assert_allclose(got, ref.delta, rtol=0, atol=5e-6)
            np.testing.assert_allclose(
                ds["sink_attention"].sel(layer=layer).values,
                a[..., 1:, 0].double().mean(-1).numpy(),
                rtol=0,
                atol=1e-7,
            )


def test_position0_table_columns_do_not_depend_on_the_stores_variable_order():
    """A store's variables come back in the order zarr lists its directory (the filesystem's
    choice): the position-0 table must come out the same whatever that order."""
    import xarray as xr

    from causalpos.paper2.tables import _position0_frames

    rng = np.random.default_rng(0)
    data = {
        name: (("condition", "layer"), rng.normal(size=(2, 3)))
        for name in ("std", "mean_norm", "ratio", "max_abs_dev")
    }
    coords = {"condition": ["causal", "bidirectional"], "layer": [0, 1, 2]}
    a = xr.Dataset(data, coords=coords)
    b = xr.Dataset(dict(reversed(list(data.items()))), coords=coords)
    assert list(a.data_vars) != list(b.data_vars)
    fa, fb = _position0_frames(a)[0], _position0_frames(b)[0]
    assert list(fa.columns) == list(fb.columns)
    assert fa.equals(fb)


def test_baseline_comparison_depth_trend_and_sink_count_tables():
    """Claim 6's linear-vs-saturated table, claim 3's depth trend and the sink-head count CI equal
    direct computations from the stores; the linear baseline inflates the leakage of logits
    whose offset profile is a cosine (synthetic_scores)."""
    fits = ("saturated+query", "linear+query")
    stores = {}
    for v, kw, seed in (("causal", {}, 0), ("bidirectional", {"bidirectional": True}, 100)):
        ds, _ = run_reducer(make_batches(T=10, seed=seed, **kw), fits=fits, windows=("all",))
        n_seq = ds.sizes["sequence"]
        rng = np.random.default_rng(seed)
        sink = rng.uniform(0.0, 1.0, (n_seq, ds.sizes["layer"], ds.sizes["head"]))
        sink[:, 0, 0] = 0.9  # one head always a sink at tau = 0.5
        ds["sink_attention"] = (("sequence", "layer", "head"), sink)
        stores[v] = ds
    summ = L_summary.leakage_summary(stores, n_boot=300, n_perm=0, seed=0, taus=(0.5,))
    tabs = L_tables.summary_tables(summ)

    c = stores["causal"].sortby("sequence").sel(leak_window="all", leak_target="logit")
    raw = {f: c["leak_delta"].sel(leak_fit=f).values.mean((1, 2)) for f in fits}
    cor = {f: (c["leak_delta"] - c["leak_null"]).sel(leak_fit=f).values.mean((1, 2)) for f in fits}
    b = tabs["baseline_comparison"].set_index(["variant", "target", "baseline", "measure"])
    assert b.loc[("causal", "logit", "saturated", "raw"), "estimate"] == pytest.approx(
        raw["saturated+query"].mean(), rel=1e-12
    )
    assert b.loc[("causal", "logit", "linear", "corrected"), "estimate"] == pytest.approx(
        cor["linear+query"].mean(), rel=1e-12
    )
    d = b.loc[("causal", "logit", "linear_minus_saturated", "raw")]
    assert d["estimate"] == pytest.approx(
        (raw["linear+query"] - raw["saturated+query"]).mean(), rel=1e-12
    )
    assert d["lo"] > 0  # the inflation: a cosine offset profile the linear baseline underfits
    assert set(tabs["baseline_comparison"]["linear_fit"]) == {"linear+query"}

    # two layers: the slope per layer is the last minus the first layer
    t = tabs["depth_trend"].set_index(["variant", "target", "trend"])
    x = (
        stores["bidirectional"]
        .sortby("sequence")
        .sel(leak_fit="saturated+query", leak_window="all", leak_target="logattn")
    )
    xl = (x["leak_delta"] - x["leak_null"]).values.mean(2)
    for trend in ("slope", "last_minus_first"):
        r = t.loc[("bidirectional", "logattn", trend)]
        assert r["estimate"] == pytest.approx((xl[:, 1] - xl[:, 0]).mean(), rel=1e-12)
        assert r["lo"] <= r["estimate"] <= r["hi"]

    sk = tabs["sink_heads"].set_index("variant")
    for v, ds in stores.items():
        n = int((ds["sink_attention"].mean("sequence").values >= 0.5).sum())
        assert sk.loc[v, "n_sink_heads"] == n
        assert sk.loc[v, "n_sink_heads_lo"] <= n <= sk.loc[v, "n_sink_heads_hi"]
        assert sk.loc[v, "n_sink_heads_lo"] >= 1  # the planted head counts in every replicate
        assert sk.loc[v, "n_heads"] == 4

    # paper2_tables carries the model's positional type and twin from the summary's attrs
    summ.attrs.update(positional="swa", init_of="")
    agg = L_tables.paper2_tables({("trained-swa", "d"): summ})
    assert set(agg["depth_trend"]["positional"]) == {"swa"}
    assert set(agg["sink_heads"]["init_of"]) == {""}
    assert set(agg["decomposition"]["positional"]) == {"swa"}
