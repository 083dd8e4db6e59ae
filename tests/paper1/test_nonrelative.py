"""causalpos.paper1.nonrelative: the scale-free non-relative share and the first-keys band."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from causalpos.paper1 import nonrelative as NR
from causalpos.paper1.diagonal import _index_cells, normalize, normalized_index_cells

N = 16
Q, K = np.indices((N, N))
LOWER = Q >= K
TOEPLITZ = np.where(LOWER, 0.5 * np.exp(-(Q - K) / 4.0) + 0.1 * np.cos(Q - K), np.nan)
NONREL = np.where(LOWER, 0.2 * np.log1p(Q) - 0.05 * K, np.nan)  # not a function of i - j


def _groups(signal: np.ndarray, n_groups: int, noise: float, rng) -> np.ndarray:
    g = signal[None] + noise * rng.standard_normal((n_groups, *signal.shape))
    g[..., ~LOWER] = np.nan
    return g


def _true_share(m: np.ndarray) -> float:
    cells = _index_cells(N)
    nrm, raw = normalize(m).ravel()[cells], m.ravel()[cells]
    return float((nrm**2).sum() / ((raw - raw.mean()) ** 2).sum())


def _band_by_hand(m: np.ndarray, keys: int) -> float:
    """The sink-free band with explicit loops: drop key 0, subtract each offset's mean over keys
    >= 1, average the cells with 1 <= j <= keys, i > j, on offsets holding more than one cell."""
    vals = []
    for i in range(N):
        for j in range(1, min(keys, i - 1) + 1):
            d = i - j
            band = [m[a, a - d] for a in range(d + 1, N)]  # keys a - d >= 1
            if len(band) > 1:
                vals.append(m[i, j] - np.mean(band))
    return float(np.mean(vals))


def test_debiased_sum_of_squares_is_the_u_statistic_and_its_leave_one_out_values():
    x = np.random.default_rng(0).standard_normal((7, 30)) + 0.3
    full, loo, noise = NR._debiased_sum_sq(x)
    assert noise == pytest.approx((x.var(0, ddof=1) / 7).sum(), rel=1e-12)
    assert full == pytest.approx((x.mean(0) ** 2).sum() - noise, rel=1e-12)
    for g in range(7):
        assert loo[g] == pytest.approx(NR._debiased_sum_sq(np.delete(x, g, 0))[0], rel=1e-12)


def test_toeplitz_map_has_zero_share_and_zero_band():
    g = np.repeat(TOEPLITZ[None], 6, axis=0)  # noise-free: every group is the Toeplitz map
    sh = NR.share_intervals(g)[0]
    assert abs(float(sh.estimate)) < 1e-12
    for sink in (True, False):
        assert abs(float(NR.band_ci(g, 4, exclude_sink=sink).estimate)) < 1e-12


def test_share_of_a_noise_free_map_is_the_variance_fraction_and_the_parts_are_orthogonal():
    m = TOEPLITZ + NONREL
    g = np.repeat(m[None], 5, axis=0)
    assert float(NR.share_intervals(g)[0].estimate) == pytest.approx(_true_share(m), rel=1e-10)
    cells = _index_cells(N)
    raw, nrm = m.ravel()[cells], normalize(m).ravel()[cells]
    rel = raw - nrm  # the band (Toeplitz) means on the cells
    total = ((raw - raw.mean()) ** 2).sum()
    assert total == pytest.approx(((rel - raw.mean()) ** 2).sum() + (nrm**2).sum(), rel=1e-12)
    assert 0.0 < _true_share(m) < 1.0


def test_share_is_unchanged_by_scaling_and_shifting_the_maps():
    g = _groups(TOEPLITZ + NONREL, 8, 0.3, np.random.default_rng(1))
    a, b = NR.share_intervals(g)[0], NR.share_intervals(50.0 * g - 7.0)[0]
    for f in ("estimate", "lo", "hi"):
        np.testing.assert_allclose(getattr(b, f), getattr(a, f), rtol=1e-9)
    # the logit-unit band scales with the map (it is not scale-free), its sign does not change
    ba, bb = NR.band_ci(g, 3), NR.band_ci(50.0 * g - 7.0, 3)
    np.testing.assert_allclose(bb.estimate, 50.0 * ba.estimate, rtol=1e-9)


def test_relative_map_plus_noise_gives_a_share_interval_around_zero():
    rng = np.random.default_rng(2)
    hits, ests = 0, []
    for _ in range(60):
        sh = NR.share_intervals(_groups(TOEPLITZ, 12, 0.3, rng))[0]
        hits += bool(sh.lo <= 0.0 <= sh.hi)
        ests.append(float(sh.estimate))
    assert hits >= 56  # 95 % nominal (the jackknife is conservative)
    assert min(ests) < 0.0 < max(ests)  # debiased, not clipped: noise lands on both sides of 0


def test_share_interval_covers_a_planted_share():
    m = TOEPLITZ + 0.5 * NONREL
    true = _true_share(m)
    rng = np.random.default_rng(3)
    out = [NR.share_intervals(_groups(m, 16, 0.3, rng))[0] for _ in range(80)]
    cover = np.mean([s.lo <= true <= s.hi for s in out])
    assert cover >= 0.9
    assert np.mean([float(s.estimate) for s in out]) == pytest.approx(true, abs=0.02)


def test_pooled_share_is_the_ratio_of_summed_sums_and_survives_a_layer_at_noise():
    rng = np.random.default_rng(8)
    m = TOEPLITZ + NONREL
    layers = np.stack([np.zeros_like(m), m, 2 * m])  # layer 1: no map at all, only noise
    g = _groups(layers, 12, 0.05, rng)
    per, pooled = NR.share_intervals(g)
    parts = np.stack([NR.share_parts(g[:, layer]) for layer in range(3)])
    assert float(pooled.estimate) == pytest.approx(parts[:, 0, 0].sum() / parts[:, 1, 0].sum())
    width = per.hi[0] - per.lo[0]
    assert not width < 1.0  # the noise layer's own share is undetermined (NaN or very wide)
    assert pooled.hi - pooled.lo < 0.1  # the pooled share is not
    assert pooled.lo <= _true_share(m) <= pooled.hi


def test_no_share_where_the_map_is_not_above_its_noise():
    g = _groups(TOEPLITZ * 0.0, 8, 1.0, np.random.default_rng(9))  # noise only
    per, pooled = NR.share_intervals(g)
    assert np.isnan(per.estimate) and np.isnan(pooled.estimate) and np.isnan(per.lo)


def test_two_groups_give_a_share_but_no_interval():
    sh = NR.share_intervals(_groups(TOEPLITZ + NONREL, 2, 0.1, np.random.default_rng(4)))[0]
    assert np.isfinite(sh.estimate) and np.isnan(sh.lo) and np.isnan(sh.hi)


@pytest.mark.parametrize("offset", [-0.4, 0.25])
def test_planted_first_keys_offset_gives_its_value_and_sign(offset):
    m = TOEPLITZ.copy()
    m[:, 1:4] += offset  # keys 1..3, every query
    m[~LOWER] = np.nan
    want = _band_by_hand(m, 3)
    assert np.sign(want) == np.sign(offset)
    g = np.repeat(m[None], 4, axis=0)
    assert float(NR.band_ci(g, 3).estimate) == pytest.approx(want, rel=1e-10)


def test_a_sink_column_alone_moves_the_band_only_when_it_is_kept_in_the_normalization():
    m = TOEPLITZ.copy()
    m[1:, 0] += 5.0  # an attention sink at key 0, nothing else non-relative
    g = np.repeat(m[None], 4, axis=0)
    assert abs(float(NR.band_ci(g, 3).estimate)) < 1e-12
    assert float(NR.band_ci(g, 3, exclude_sink=False).estimate) < -0.1  # pushed down by the sink


def test_band_interval_is_the_t_interval_of_the_group_bands():
    rng = np.random.default_rng(5)
    g = _groups(TOEPLITZ + NONREL, 9, 0.5, rng)
    b = NR.band_ci(g, 4, level=0.9)
    per = NR.band_values(g, 4)
    half = sps.t.ppf(0.95, 8) * per.std(ddof=1) / np.sqrt(9)
    assert float(b.estimate) == pytest.approx(per.mean(), rel=1e-12)
    assert (float(b.lo), float(b.hi)) == pytest.approx((per.mean() - half, per.mean() + half))
    assert float(b.estimate) == pytest.approx(float(NR.band_values(g.mean(axis=0), 4)), rel=1e-9)


def test_shares_and_bands_from_given_index_values_are_the_same_numbers():
    rng = np.random.default_rng(9)
    g = _groups(np.stack([TOEPLITZ, TOEPLITZ + 0.3 * rng.standard_normal((N, N))]), 8, 0.2, rng)
    vals = normalized_index_cells(g)
    for a, b in zip(NR.share_intervals(g), NR.share_intervals(g, index_values=vals)):
        for x, y in zip((a.estimate, a.lo, a.hi, a.jack), (b.estimate, b.lo, b.hi, b.jack)):
            assert np.array_equal(x, y, equal_nan=True)
    for sink in (True, False):  # the values of the same normalization: key 0 out with the sink
        a, b = (
            NR.band_ci(g, 3, exclude_sink=sink),
            NR.band_ci(
                g, 3, exclude_sink=sink, index_values=normalized_index_cells(g, key0=not sink)
            ),
        )
        assert np.array_equal(a.estimate, b.estimate) and np.array_equal(a.jack, b.jack)
    # the band's cells of the kept-sink normalization, read from the index cells
    want = normalize(g).reshape(*g.shape[:2], N * N)[..., NR.band_cells(N, 3, False)]
    assert np.array_equal(NR.band_values(g, 3, False), np.nanmean(want, axis=-1))


def test_jackknife_quantile_is_scipy_stats_t_ppf_bit_for_bit():
    # the interval's t quantile is scipy.special.stdtrit (the light table jobs do not import
    # scipy.stats); it must equal scipy.stats.t.ppf exactly, NaN where there are < 2 groups
    for g in range(1, 60):
        jack = np.arange(g, dtype=np.float64)[:, None] ** 1.5
        for level in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
            lo, hi = NR.jackknife_interval(np.zeros(1), jack, level)
            se = np.sqrt((g - 1) / g * ((jack - jack.mean(axis=0)) ** 2).sum(axis=0))
            half = float(sps.t.ppf(0.5 + level / 2.0, g - 1)) * se
            np.testing.assert_array_equal(hi, half)
            np.testing.assert_array_equal(lo, -half)
    assert np.isnan(NR.jackknife_interval(np.zeros(1), np.ones((1, 1)), 0.95)[1]).all()


def test_paired_contrasts_and_layer_means():
    rng = np.random.default_rng(6)
    layers = np.stack([TOEPLITZ + a * NONREL for a in (0.0, 0.5, 1.0)])
    g = _groups(layers, 10, 0.2, rng)
    sh = NR.share_intervals(g)[0]
    d, lo, hi = NR.paired(sh, sh)
    assert np.all(d == 0) and np.all(lo == 0) and np.all(hi == 0)
    d, lo, hi = NR.minus_first_layer(sh)
    assert d[0] == 0 and lo[0] == 0 and hi[0] == 0
    assert lo[2] > 0  # layer 3 carries twice layer 2's non-relative part, layer 1 none
    other_per, other_pooled = NR.share_intervals(_groups(np.stack([TOEPLITZ] * 3), 10, 0.2, rng))
    d, lo, hi = NR.paired(sh, other_per)
    assert lo[2] > 0  # more non-relative than a purely relative model, paired over groups
    _, pooled = NR.share_intervals(g)
    assert pooled.lo < pooled.estimate < pooled.hi and float(other_pooled.estimate) < 0.05
    assert NR.paired(pooled, other_pooled)[1] > 0
    with pytest.raises(ValueError, match="same groups"):
        NR.paired(sh, NR.share_intervals(g[:5])[0])


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="shape"):
        NR.share_intervals(np.zeros((3, 4, 5)))
    with pytest.raises(ValueError, match="at least 2 groups"):
        NR.band_ci(np.zeros((1, 4, 4)), 2)
    with pytest.raises(ValueError, match="keys >= 1"):
        NR.band_cells(8, 0)


# --- key 0 out of the share; the key-0 column's part (paper 1 §7) ---------------------------------


def test_without_key0_the_share_is_the_share_of_queries_and_keys_from_1():
    rng = np.random.default_rng(30)
    sink = np.where(LOWER & (K == 0), 4.0, 0.0)
    g = _groups(TOEPLITZ + NONREL + sink, 8, 0.05, rng)
    per, pooled = NR.share_intervals(g[:, None], key0=False)
    sub = np.ascontiguousarray(g[:, None, 1:, 1:])
    ref, ref_pooled = NR.share_intervals(sub)
    for a, b in ((per, ref), (pooled, ref_pooled)):
        np.testing.assert_allclose(a.estimate, b.estimate, rtol=1e-12)
        np.testing.assert_allclose(a.lo, b.lo, rtol=1e-12)
        np.testing.assert_allclose(a.jack, b.jack, rtol=1e-12)
    assert NR.share_intervals(g[:, None])[0].estimate[0] > per.estimate[0] + 0.1  # key 0 in


def _key0_share_by_hand(s: float, t: float) -> float:
    """‖c‖² / (‖c‖² + ‖N'‖²) of TOEPLITZ + s on key 0 + t on key 1 (queries >= 2): c_i = s −
    t/(N − 1 − i) (key 1 raises band i's level over keys >= 1), and N' is the normalized map of
    keys >= 1, whose first column is raised by t: ‖N'‖² = t² Σ_d (n' − d − 1)/(n' − d), n' = N − 1,
    over its bands 1 ≤ d ≤ n' − 2."""
    i = np.arange(1, N - 1)
    c2 = float(((s - t / (N - 1 - i)) ** 2).sum())
    n1, d = N - 1, np.arange(1, N - 2)
    rest = float((t**2 * (n1 - d - 1) / (n1 - d)).sum())
    return c2 / (c2 + rest)


@pytest.mark.parametrize("s, t", [(2.0, 0.0), (2.0, 0.5), (0.3, 1.0)])
def test_key0_share_is_the_planted_columns_part_of_the_non_relative_sum(s, t):
    m = TOEPLITZ.copy()
    m[1:, 0] += s
    m[2:, 1] += t
    same = np.broadcast_to(m, (4, N, N)).copy()  # noise-free groups: the debiased sums are exact
    got = NR.key0_share_interval(same[:, None])
    assert float(got.estimate[0]) == pytest.approx(_key0_share_by_hand(s, t), rel=1e-12)
    if t == 0.0:
        assert float(got.estimate[0]) == pytest.approx(1.0, rel=1e-12)
    rng = np.random.default_rng(31)
    noisy = _groups(m, 20, 0.05, rng)
    ci = NR.key0_share_interval(noisy[:, None], level=0.99)
    assert ci.lo[0] <= _key0_share_by_hand(s, t) <= ci.hi[0]


def test_key0_share_needs_a_positive_sum():
    zero = np.broadcast_to(TOEPLITZ, (4, N, N)).copy()  # relative: no non-relative sum at all
    assert np.isnan(NR.key0_share_interval(zero[:, None]).estimate[0])
