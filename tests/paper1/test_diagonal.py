"""Diagonal normalization (paper 1 §5), offset profiles and the non-relativeness index."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import toeplitz

from causalpos.paper1 import diagonal as D
from causalpos.paper1.settings import SimulationSettings
from causalpos.paper1.tables import simulation_index_table


def naive_normalize(m: np.ndarray) -> np.ndarray:
    """Independent reference: loop over offsets, nanmean of each band."""
    n = m.shape[0]
    out = m.astype(np.float64).copy()
    for k in range(-(n - 1), n):
        i = np.arange(max(k, 0), min(n, n + k))
        band = m[i, i - k].astype(np.float64)
        fin = np.isfinite(band)
        if fin.any():
            out[i[fin], (i - k)[fin]] = band[fin] - band[fin].mean()
    return out


def test_toeplitz_maps_to_exact_zero():
    rng = np.random.default_rng(0)
    t = toeplitz(rng.normal(size=30), rng.normal(size=30))
    assert np.array_equal(D.normalize(t), np.zeros_like(t))
    causal = np.where(np.tril(np.ones((30, 30), bool)), t, np.nan)
    out = D.normalize(causal)
    assert np.array_equal(np.isnan(out), np.isnan(causal))
    assert np.array_equal(out[np.tril_indices(30)], np.zeros(465))
    assert D.non_relativeness_index(causal) == 0.0


def test_matches_naive_reference_with_scattered_nans():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(25, 25))
    m[rng.random((25, 25)) < 0.2] = np.nan
    got = D.normalize(m)
    np.testing.assert_allclose(got, naive_normalize(m), rtol=0, atol=1e-14)
    assert np.array_equal(np.isnan(got), np.isnan(m))


def offset_profile(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets k = i - j, the mean of each band's finite entries: NaN where there is none)."""
    n = m.shape[-1]
    k = np.arange(-(n - 1), n)
    prof = np.full(k.size, np.nan)
    for a, off in enumerate(k):
        band = np.diagonal(m, offset=-off)
        if np.isfinite(band).any():
            prof[a] = np.nanmean(band)
    return k, prof


def test_band_means_are_zero():
    rng = np.random.default_rng(2)
    m = np.where(np.tril(np.ones((40, 40), bool)), rng.normal(size=(40, 40)), np.nan)
    k, prof = offset_profile(D.normalize(m))
    assert np.all(np.isnan(prof[k < 0]))
    assert np.abs(prof[k >= 0]).max() < 1e-15
    c, r = rng.normal(size=40), rng.normal(size=40)
    k, prof_t = offset_profile(toeplitz(c, r))  # band k = i - j >= 0 holds c[k], k < 0 holds r[-k]
    np.testing.assert_allclose(prof_t[k >= 0], c, rtol=1e-14, atol=0)
    np.testing.assert_allclose(prof_t[k < 0], r[1:][::-1], rtol=1e-14, atol=0)


def test_main_diagonal_and_corners_exactly_zero_float32():
    rng = np.random.default_rng(3)
    m = rng.normal(size=(2, 33, 33)).astype(np.float32)
    m[:, np.arange(33), np.arange(33)] = np.float32(0.1)  # constant diagonal, like L2 logits (= 1)
    out = D.normalize(m)
    assert out.dtype == np.float32
    assert np.all(out[:, np.arange(33), np.arange(33)] == 0.0)
    assert np.all(out[:, 32, 0] == 0.0) and np.all(out[:, 0, 32] == 0.0)
    causal = np.where(np.tril(np.ones((33, 33), bool)), m, np.nan)
    assert np.all(D.normalize(causal)[:, 32, 0] == 0.0)


def test_constant_band_of_float64_is_exactly_zero():
    # 0.1 is not exact in binary: a naive sum/count mean would leave ~1e-17 residues.
    m = np.full((50, 50), 0.1)
    m += np.arange(50)[:, None] * 0.0
    assert np.array_equal(D.normalize(m), np.zeros((50, 50)))


def test_linearity_mean_of_normalized_equals_normalized_mean():
    rng = np.random.default_rng(4)
    maps = rng.normal(size=(10, 3, 20, 20))
    maps[..., np.triu_indices(20, 1)[0], np.triu_indices(20, 1)[1]] = np.nan
    a = D.normalize(maps.mean(axis=0))
    b = D.normalize(maps).mean(axis=0)
    assert np.array_equal(np.isnan(a), np.isnan(b))
    assert np.nanmax(np.abs(a - b)) < 1e-14


def test_leading_dims_are_independent_slices():
    rng = np.random.default_rng(5)
    m = rng.normal(size=(2, 3, 12, 12))
    out = D.normalize(m)
    for a in range(2):
        for b in range(3):
            np.testing.assert_allclose(out[a, b], naive_normalize(m[a, b]), atol=1e-14)


def test_large_map_batches_agree():
    rng = np.random.default_rng(6)
    m = rng.normal(size=(5, 1100, 1100)).astype(np.float32)  # several bincount batches
    out = D.normalize(m)
    np.testing.assert_allclose(out[3], naive_normalize(m[3]), atol=2e-6)


@pytest.mark.slow
def test_normalized_at_is_normalize_at_the_cells_bit_for_bit_in_its_layout():
    rng = np.random.default_rng(11)
    m = rng.normal(size=(3, 4, 1100, 1100)).astype(np.float32)  # several batches, float32 in
    m[..., np.triu_indices(1100, 1)[0], np.triu_indices(1100, 1)[1]] = np.nan
    m[1, 2, 500, 7], m[2, 0, 9, 3] = np.inf, np.nan
    cells = np.sort(rng.choice(1100 * 1100, 500, replace=False))
    want = D.normalize(m.astype(np.float64)).reshape(3, 4, -1)[..., cells]
    got = D.normalized_at(m, cells)
    assert got.dtype == np.float64 and got.strides == want.strides  # reductions add alike
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))  # NaN payloads too
    dropped = m.astype(np.float64)
    dropped[..., :, 0] = np.nan
    want = D.normalize(dropped).reshape(3, 4, -1)[..., cells]
    assert np.array_equal(D.normalized_at(m, cells, drop_first_key=True), want, equal_nan=True)
    idx = D._index_cells(1100)
    assert np.array_equal(
        D.normalized_index_cells(m[:, 1]), D.normalized_at(m[:, 1], idx), equal_nan=True
    )


def test_index_ci_from_given_index_values_is_the_same_interval():
    rng = np.random.default_rng(12)
    gm = rng.normal(size=(6, 3, 20, 20))
    gm[..., ~np.tril(np.ones((20, 20), bool))] = np.nan
    a = D.index_ci(gm, n_boot=200, seed=4)
    b = D.index_ci(gm, n_boot=200, seed=4, index_values=D.normalized_index_cells(gm))
    for field in ("estimate", "debiased", "lo", "hi", "se", "noise_floor"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


def test_index_of_a_known_pattern():
    # M[i, j] = f(i): N[i, j] = f(i) - mean of f over the band's queries; check against naive loops.
    n = 12
    f = np.linspace(0.0, 1.0, n) ** 2
    m = np.where(np.tril(np.ones((n, n), bool)), f[:, None] + 0 * f[None, :], np.nan)
    nm = naive_normalize(m)
    cells = [nm[i, j] for i in range(n) for j in range(n) if 1 <= i - j <= n - 2]
    assert D.non_relativeness_index(m) == pytest.approx(
        np.sqrt(np.mean(np.square(cells))), rel=1e-13
    )
    assert D.non_relativeness_index(nm, normalized=True) == pytest.approx(
        D.non_relativeness_index(m), rel=1e-15
    )


def test_index_ignores_upper_triangle_and_is_vectorized():
    rng = np.random.default_rng(7)
    m = rng.normal(size=(4, 15, 15))
    causal = np.where(np.tril(np.ones((15, 15), bool)), m, np.nan)
    idx = D.non_relativeness_index(m)
    assert idx.shape == (4,)
    # the lower bands of a full map and of its masked copy normalize identically
    np.testing.assert_allclose(idx, D.non_relativeness_index(causal), rtol=1e-14)


def test_index_ci_noise_floor_matches_theory_for_pure_noise():
    # i.i.d. N(0, s^2) group maps: Var N_g(i,j) = s^2 (1 - 1/m_k) for a band of m_k cells, so the
    # noise floor is s/sqrt(G) * sqrt(mean over cells of (1 - 1/m_k)).
    rng = np.random.default_rng(8)
    G, n, s = 40, 60, 0.3
    gm = rng.normal(scale=s, size=(G, n, n))
    ci = D.index_ci(gm, n_boot=400, seed=0)
    k = np.arange(n)[:, None] - np.arange(n)[None, :]
    sel = (k >= 1) & (k <= n - 2)
    expect = s / np.sqrt(G) * np.sqrt(np.mean(1 - 1 / (n - k[sel])))
    assert ci.noise_floor == pytest.approx(expect, rel=0.03)  # 1,711 cells x 39 dof
    assert ci.estimate == pytest.approx(expect, rel=0.05)
    assert ci.estimate == pytest.approx(D.non_relativeness_index(gm.mean(axis=0)), rel=1e-13)
    assert ci.debiased < 0.3 * ci.estimate
    assert ci.lo == 0.0 and ci.hi < 1.5 * ci.noise_floor  # consistent with no signal


def test_index_ci_detects_signal_and_covers_it():
    rng = np.random.default_rng(9)
    G, n = 20, 30
    pattern = np.zeros((n, n))
    pattern[:, 0] = 0.05  # a non-relative "first key" column, like the causal RoPE maps
    true_index = D.non_relativeness_index(pattern)
    gm = pattern + rng.normal(scale=0.01, size=(G, 3, n, n))
    ci = D.index_ci(gm, level=0.95, n_boot=1000, seed=1)
    assert ci.estimate.shape == (3,)
    assert np.all(ci.estimate > 4 * ci.noise_floor)  # floor = 0.01/sqrt(20) * ~0.98
    assert np.all(ci.lo > 0) and np.all((ci.lo <= true_index) & (true_index <= ci.hi))
    assert np.all((ci.lo <= ci.debiased) & (ci.debiased <= ci.hi))
    np.testing.assert_allclose(ci.debiased, true_index, rtol=0.05)
    again = D.index_ci(gm, level=0.95, n_boot=1000, seed=1)
    assert np.array_equal(again.lo, ci.lo)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match=r"\(\.\.\., n, n\)"):
        D.normalize(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="at least 2 groups"):
        D.index_ci(np.zeros((1, 5, 5)))


def test_simulation_index_table_rows_match_index_ci():
    from causalpos.paper1.simulate import run_simulation

    kw = dict(
        alpha=0.0, rope=True, n_samples=512, seq_len=8, dim=16, n_layers=2, seed=0, n_groups=8
    )
    stores = {
        "causal": run_simulation(SimulationSettings(**kw)),
        "bidir": run_simulation(SimulationSettings(**kw, causal=False)),
    }
    tab = simulation_index_table(stores, confidence=0.9, n_boot=200, seed=3)
    assert list(zip(tab["setting"], tab["layer"])) == [
        ("causal", 1),
        ("causal", 2),
        ("bidir", 1),
        ("bidir", 2),
    ]
    ci = D.index_ci(stores["bidir"]["score_group"].values, level=0.9, n_boot=200, seed=3)
    got = tab[tab["setting"] == "bidir"]
    np.testing.assert_array_equal(got["index"], ci.estimate)
    np.testing.assert_array_equal(got["ci_lo"], ci.lo)
    np.testing.assert_array_equal(got["noise_floor"], ci.noise_floor)
    np.testing.assert_allclose(got["index_over_floor"], ci.estimate / ci.noise_floor)
    assert (tab["causal"] == [True, True, False, False]).all() and (tab["n_samples"] == 512).all()


# --- key 0 out of the index (paper 1 §7) ---------------------------------------------------------


def _relative(n: int, rng) -> np.ndarray:
    t = toeplitz(rng.normal(size=n), rng.normal(size=n))
    return np.where(np.tril(np.ones((n, n), bool)), t, np.nan)


def _column_index(n: int, s: float) -> float:
    """The index (key 0 kept) of a Toeplitz map whose key-0 column is raised by s, by hand: in band
    d (n − d cells) normalization leaves s(n − d − 1)/(n − d) at key 0 and −s/(n − d) on the
    other n − d − 1 cells, a sum of squares s²(n − d − 1)/(n − d), over the bands 1 ≤ d ≤ n − 2."""
    d = np.arange(1, n - 1)
    return float(np.sqrt((s**2 * (n - d - 1) / (n - d)).sum() / (n - d).sum()))


def test_without_key0_the_index_is_the_index_of_queries_and_keys_from_1():
    rng = np.random.default_rng(20)
    g = rng.normal(size=(6, 2, 12, 12))
    g[..., ~np.tril(np.ones((12, 12), bool))] = np.nan
    g[..., 0] += 3.0  # a sink column
    sub = np.ascontiguousarray(g[..., 1:, 1:])
    np.testing.assert_allclose(
        D.normalized_index_cells(g, key0=False), D.normalized_index_cells(sub), rtol=0, atol=1e-12
    )
    out, ref = D.index_ci(g, n_boot=300, key0=False), D.index_ci(sub, n_boot=300)
    for field in ("estimate", "debiased", "noise_floor", "lo", "hi"):
        np.testing.assert_allclose(getattr(out, field), getattr(ref, field), rtol=1e-12)
    assert not np.allclose(D.index_ci(g, n_boot=300).estimate, out.estimate)


def test_a_relative_map_with_a_key0_column_reads_0_without_key0_and_the_column_with_it():
    n, s = 14, 2.0
    rng = np.random.default_rng(21)
    m = _relative(n, rng)
    m[1:, 0] += s  # a fixed token's column: token identity, not position
    assert D.non_relativeness_index(m) == pytest.approx(_column_index(n, s), rel=1e-12)
    assert D.non_relativeness_index(m[1:, 1:]) == pytest.approx(0.0, abs=1e-12)
    # with Monte-Carlo noise: at its floor without key 0, far above it with key 0
    groups = m[None] + 0.05 * rng.standard_normal((10, 1, n, n))
    new, old = D.index_ci(groups, key0=False), D.index_ci(groups)
    assert new.estimate[0] < 1.2 * new.noise_floor[0] and new.lo[0] == 0.0
    assert old.estimate[0] > 10 * old.noise_floor[0] and old.lo[0] > 0.5 * _column_index(n, s)


def test_non_relative_structure_off_key0_is_still_read_without_key0():
    n, s, t = 14, 2.0, 0.5
    rng = np.random.default_rng(22)
    m = _relative(n, rng)
    m[1:, 0] += s
    m[2:, 1] += t  # key 1's column: the first key of the map without key 0
    got = D.index_ci(m[None, None] + np.zeros((4, 1, 1, 1)), n_boot=50, key0=False)
    assert float(got.estimate[0]) == pytest.approx(_column_index(n - 1, t), rel=1e-12)
    absolute = np.where(np.tril(np.ones((n, n), bool)), 0.3 * np.log1p(np.indices((n, n))[0]), 0)
    noisy = (m + absolute)[None, None] + 0.02 * rng.standard_normal((10, 1, n, n))
    read = D.index_ci(noisy, key0=False)
    assert read.lo[0] > 5 * read.noise_floor[0]  # a query-dependent pattern on keys >= 1


def test_key0_column_recovers_a_planted_column():
    n = 12
    rng = np.random.default_rng(23)
    m = _relative(n, rng)
    np.testing.assert_allclose(D.key0_column(m), 0.0, atol=1e-12)  # relative: no column
    planted = rng.normal(size=n - 2)  # c_i at queries 1..n-2
    m[1 : n - 1, 0] += planted
    m[n - 1, 0] += 7.0  # band n - 1 holds key 0 alone: no level to compare with
    col = D.key0_column(m)
    assert col.shape == (n - 2,)
    np.testing.assert_allclose(col, planted, rtol=0, atol=1e-12)
    t = 0.5  # a key-1 column moves the offsets' level over keys >= 1: band i by t/(n - 1 - i)
    m[2:, 1] += t
    i = np.arange(1, n - 1)
    np.testing.assert_allclose(D.key0_column(m), planted - t / (n - 1 - i), atol=1e-12)
    # its index: the column's RMS, within the noise-corrected CI over groups
    groups = m[None, None] + 0.05 * rng.standard_normal((16, 1, n, n))
    ci = D.index_ci(groups, index_values=D.key0_column(groups))
    rms = float(np.sqrt(np.mean((planted - t / (n - 1 - i)) ** 2)))
    assert ci.lo[0] <= rms <= ci.hi[0] and ci.debiased[0] == pytest.approx(rms, rel=0.05)
