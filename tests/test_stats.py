"""Tests of causalpos.stats: bootstrap, permutation p-values, BH, stratified sampling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats

from causalpos import stats


def test_benjamini_hochberg_equals_scipy():
    rng = np.random.default_rng(0)
    p = np.concatenate(
        [rng.uniform(size=200), rng.uniform(0, 1e-3, size=20), [0.5, 0.5, 0.5, 1.0, 0.0]]
    )
    rng.shuffle(p)
    np.testing.assert_allclose(
        stats.benjamini_hochberg(p),
        scipy.stats.false_discovery_control(p, method="bh"),
        rtol=0,
        atol=1e-15,
    )
    grid = p[:220].reshape(11, 20)  # (layer, head): BH over all entries, shape kept
    np.testing.assert_allclose(
        stats.benjamini_hochberg(grid).ravel(),
        scipy.stats.false_discovery_control(grid.ravel()),
        rtol=0,
        atol=1e-15,
    )


def test_benjamini_hochberg_ignores_nan_and_rejects_bad_p():
    p = np.array([0.01, np.nan, 0.04, 0.03])
    q = stats.benjamini_hochberg(p)
    assert np.isnan(q[1])
    np.testing.assert_allclose(
        q[[0, 2, 3]], scipy.stats.false_discovery_control([0.01, 0.04, 0.03])
    )
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        stats.benjamini_hochberg(np.array([0.2, 1.5]))


def test_fraction_significant():
    assert stats.fraction_significant(np.array([0.01, 0.2, 0.04, np.nan]), 0.05) == pytest.approx(
        2 / 3
    )


def test_permutation_pvalue_counts_ties_and_adds_one():
    null = np.array([[0.1, 5.0], [0.3, 1.0], [0.2, 2.0], [0.3, 9.0]])  # (R=4, 2 statistics)
    p = stats.permutation_pvalue(np.array([0.3, 0.5]), null)
    np.testing.assert_array_equal(p, [(2 + 1) / 5, (4 + 1) / 5])


def test_bootstrap_counts_and_means():
    counts = stats.bootstrap_counts(7, n_boot=50, seed=3)
    assert counts.shape == (50, 7) and np.all(counts.sum(1) == 7)
    np.testing.assert_array_equal(counts, stats.bootstrap_counts(7, n_boot=50, seed=3))
    x = np.arange(14.0).reshape(7, 2) ** 2
    # Independent computation: expand counts into explicit index draws.
    idx = [np.repeat(np.arange(7), c.astype(int)) for c in counts]
    expect = np.stack([x[i].mean(0) for i in idx])
    np.testing.assert_allclose(stats.bootstrap_means(x, counts), expect, rtol=1e-14)


def test_bootstrap_se_matches_plugin_standard_error():
    # The bootstrap distribution of a mean has variance s²_plugin / n exactly in expectation;
    # with B = 4000 its standard deviation estimates sqrt of that to ~1.1 % (1/sqrt(2B)).
    rng = np.random.default_rng(1)
    x = rng.normal(size=60)
    means = stats.bootstrap_means(x, stats.bootstrap_counts(60, 4000, seed=2))
    se_plugin = x.std(ddof=0) / np.sqrt(60)
    assert means.std() == pytest.approx(se_plugin, rel=0.05)


def test_ordered_interval_moves_rounding_onto_the_estimate_and_drops_the_rest():
    e = 0.759
    below, above = np.nextafter(e, 0.0), np.nextafter(e, 1.0)
    # "0.759 [0.759, 0.759]": the upper bound one ulp below the estimate, the lower one above
    lo, hi = stats.ordered_interval([e, e], [e, above], [below, e])
    np.testing.assert_array_equal(lo, [e, e])
    np.testing.assert_array_equal(hi, [e, e])
    # rounding is relative to the numbers' size: 1e-7 past an estimate of 1e3 is rounding,
    # past one of 1e-3 it is not
    lo, hi = stats.ordered_interval([1e3, 1e-3], [1e3 + 1e-7, 1e-3 + 1e-7], [2e3, 1.0])
    np.testing.assert_array_equal(lo, [1e3, np.nan])
    np.testing.assert_array_equal(hi, [2e3, np.nan])
    # an interval that does not hold its estimate, or is inverted, is no interval of it
    lo, hi = stats.ordered_interval([0.5, 0.5, 0.5], [0.6, 0.1, 0.4], [0.9, 0.4, 0.3])
    assert np.isnan(lo).all() and np.isnan(hi).all()
    # an interval that holds its estimate, and NaN, are left as they are
    lo, hi = stats.ordered_interval([0.5, np.nan, 0.5], [0.4, 0.1, np.nan], [0.6, 0.2, 0.7])
    np.testing.assert_array_equal(lo, [0.4, 0.1, np.nan])
    np.testing.assert_array_equal(hi, [0.6, 0.2, 0.7])
    lo, hi = stats.ordered_interval(0.0, 0.0, 0.0)  # width 0 at 0 holds its estimate
    assert lo == hi == 0.0 and lo.shape == ()


def test_stratified_bootstrap_keeps_stratum_sizes():
    strata = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    counts = stats.bootstrap_counts(9, 200, seed=0, strata=strata)
    for s, size in [(0, 3), (1, 2), (2, 4)]:
        np.testing.assert_array_equal(counts[:, strata == s].sum(1), size)


def test_within_strata_permutations_preserve_strata_and_are_uniform():
    strata = np.array([0, 1, 0, 2, 0, 1, 3])
    perms = np.concatenate(list(stats.within_strata_permutations(strata, 6000, seed=5, chunk=64)))
    assert perms.shape == (6000, 7)
    np.testing.assert_array_equal(np.sort(perms, axis=1), np.tile(np.arange(7), (6000, 1)))
    np.testing.assert_array_equal(strata[perms], np.tile(strata, (6000, 1)))
    # The stream depends on the seed only, not on the chunking.
    again = np.concatenate(list(stats.within_strata_permutations(strata, 6000, seed=5, chunk=1000)))
    np.testing.assert_array_equal(perms, again)
    # Stratum 0 (3 items) x stratum 1 (2 items): 12 equally likely arrangements, 500 expected each.
    keys = [tuple(r) for r in perms[:, [0, 2, 4, 1, 5]]]
    freq = np.array([keys.count(k) for k in set(keys)])
    assert len(freq) == 12
    chi2 = ((freq - 500.0) ** 2 / 500.0).sum()
    assert chi2 < scipy.stats.chi2.ppf(0.999, 11)


def test_stratified_pair_mask_counts_per_offset():
    T, cap = 20, 5
    m = stats.stratified_pair_mask(T, cap, seed=1)
    assert not np.triu(m, 1).any() and not m[0].any()
    i, j = np.nonzero(m)
    per = np.bincount(i - j, minlength=T)
    expect = np.minimum(cap, T - np.maximum(np.arange(T), 1))
    np.testing.assert_array_equal(per, expect)


def test_within_strata_enumeration_helper_consistency():
    # Sanity for the leakage tests' enumeration: products of within-stratum permutations.
    strata = np.array([0, 0, 1, 1, 1])
    groups = [np.flatnonzero(strata == s) for s in np.unique(strata)]
    perms = set()
    for combo in itertools.product(*(itertools.permutations(g) for g in groups)):
        sigma = np.empty(5, dtype=int)
        for g, pg in zip(groups, combo):
            sigma[g] = pg
        perms.add(tuple(sigma))
    sampled = {
        tuple(r)
        for r in np.concatenate(list(stats.within_strata_permutations(strata, 400, seed=0)))
    }
    assert sampled == perms and len(perms) == 12


def test_tied_keys_take_the_stable_order_whatever_the_unstable_sort_gave():
    # Random doubles rarely tie; where they do, the per-block sort must order the tied items by
    # position, as the stable lexsort on (stratum, key) does. Keys with many ties, and a sort
    # that puts every tie in reverse, are repaired to exactly the stable argsort.
    rng = np.random.default_rng(1)
    blocks = [(0, 5), (5, 6), (6, 30), (30, 42)]
    keys = rng.integers(0, 4, size=(7, 42)).astype(np.float64) / 4  # ties in every block
    stable = np.empty((7, 42), dtype=np.int64)
    reversed_ties = np.empty_like(stable)
    for lo, hi in blocks:
        stable[:, lo:hi] = lo + np.argsort(keys[:, lo:hi], axis=-1, kind="stable")
        # sort by (key, -position): each run of equal keys in reverse position order
        flip = np.argsort(keys[:, lo:hi][:, ::-1], axis=-1, kind="stable")
        reversed_ties[:, lo:hi] = hi - 1 - flip
    assert (reversed_ties != stable).any()
    inner = np.ones(41, dtype=bool)
    inner[[4, 5, 29]] = False  # each block's last position
    stats._stable_ties(keys, reversed_ties, inner, blocks)
    np.testing.assert_array_equal(reversed_ties, stable)


def test_within_strata_permutations_are_the_lexsort_by_stratum_and_key():
    # The stream is fixed by the seed: sorting each stratum's block by its random keys is the
    # lexsort on (stratum, key) the permutations are defined by, permutation for permutation.
    def lexsorted(strata, n_perm, seed, chunk):
        n, base = strata.size, np.argsort(strata, kind="stable")
        rng, done = np.random.default_rng(seed), 0
        while done < n_perm:
            c = min(chunk, n_perm - done)
            order = np.lexsort((rng.random((c, n)), np.broadcast_to(strata, (c, n))), axis=-1)
            sigma = np.empty((c, n), dtype=np.int64)
            sigma[:, base] = order
            yield sigma
            done += c

    i, j = np.tril_indices(24, -1)
    for strata, n_perm, chunk in [
        (i - j, 50, 16),  # paper 2's offsets
        (np.random.default_rng(0).integers(-3, 5, 200), 300, 64),
        (np.zeros(9, dtype=int), 20, 7),  # one stratum
        (np.arange(12), 5, 2),  # singletons: the identity
    ]:
        got = np.concatenate(list(stats.within_strata_permutations(strata, n_perm, 3, chunk)))
        ref = np.concatenate(list(lexsorted(strata, n_perm, 3, chunk)))
        np.testing.assert_array_equal(got, ref)
        if strata.size == 276:  # the offsets' blocks are shuffled, not left in index order
            assert (got != np.arange(strata.size)).any(axis=1).all()
