"""Resampling and tests (paper 2 §5): bootstrap counts and means, permutation p-values,
Benjamini–Hochberg, stratified permutations and pair samples.

A leaf module. Every draw takes an explicit integer seed, so a rerun gives bit-identical numbers.
``n`` prompts on axis 0 of per-prompt arrays; resampled statistics on a leading axis.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

#: Relative size of numerical rounding in an interval's numbers: a bound that passes its
#: estimate by at most this share of the larger magnitude of the two is rounding, and an
#: interval narrower than it has width 0. Float32 data and differences of nearly equal numbers
#: put rounding far above 1e-16 (copies of one prompt: a paired difference of two ΔR² read an
#: interval 1.2e-6 of its value wide); a real sample's width of 1e-5 would need ~1e10 prompts.
ROUNDING = 1e-5


def _past(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a − b > 0, a − b > rounding of the larger of |a|, |b|): ``a`` passes ``b``, by more than
    rounding."""
    d = a - b
    return d > 0, d > ROUNDING * np.fmax(np.abs(a), np.abs(b))


def ordered_interval(estimate, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` of an interval about ``estimate`` (broadcasting), made to hold it: a bound
    past the estimate by no more than rounding (:data:`ROUNDING`) is moved onto it; one past it
    by more, or ``lo`` past ``hi`` by more, makes both bounds NaN. NaN stays NaN.

    For error bars in figures: matplotlib refuses a negative error, which copies of one prompt
    give where the upper bound lies one ulp below the estimate. The tables keep the intervals as
    computed (a percentile interval may exclude its plug-in estimate)."""
    est, lo, hi = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.float64) for x in (estimate, lo, hi))
    )
    with np.errstate(invalid="ignore"):
        lo_past, lo_far = _past(lo, est)
        hi_past, hi_far = _past(est, hi)
        bad = lo_far | hi_far | _past(lo, hi)[1]
        lo = np.where(bad, np.nan, np.where(lo_past, est, lo))
        hi = np.where(bad, np.nan, np.where(hi_past, est, hi))
    return lo, hi


def bootstrap_counts(
    n: int, n_boot: int = 2000, seed: int = 0, strata: Sequence | np.ndarray | None = None
) -> np.ndarray:
    """``(n_boot, n)`` float64 multinomial counts: how often each of ``n`` prompts is drawn in
    each bootstrap replicate (rows sum to ``n``), so a resampled mean is one matrix product.

    ``n_boot``: B (paper 2 §5: 2000). ``strata``: optional length-``n`` labels (e.g. source
    text); prompts are then resampled within each stratum, its size fixed.
    """
    if n < 1:
        raise ValueError(f"bootstrap needs at least one prompt, got n={n}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    if strata is None:
        return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.float64)
    strata = np.asarray(strata)
    if strata.shape != (n,):
        raise ValueError(f"strata must have shape ({n},), got {strata.shape}")
    counts = np.zeros((n_boot, n), dtype=np.float64)
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        counts[:, idx] = rng.multinomial(idx.size, np.full(idx.size, 1.0 / idx.size), size=n_boot)
    return counts


def bootstrap_means(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Resampled means of ``x`` (n, ...) along axis 0 under ``counts`` (B, n) -> (B, ...).

    NaN entries of ``x`` propagate (a NaN prompt makes every replicate that draws it NaN).
    """
    x = np.asarray(x, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    n = x.shape[0]
    if counts.ndim != 2 or counts.shape[1] != n:
        raise ValueError(
            f"counts must have shape (n_boot, {n}) to match x's first axis, got {counts.shape}"
        )
    flat = x.reshape(n, -1)
    out = counts @ flat / counts.sum(axis=1, keepdims=True)
    return out.reshape((counts.shape[0],) + x.shape[1:])


def permutation_pvalue(observed: np.ndarray, null: np.ndarray, axis: int = 0) -> np.ndarray:
    """One-sided permutation p-value p = (#{null ≥ obs} + 1) / (R + 1), never 0 and exact for
    exchangeable nulls; ``null``: R draws along ``axis``, the others broadcasting against
    ``observed``."""
    null = np.moveaxis(np.asarray(null, dtype=np.float64), axis, 0)
    observed = np.asarray(observed, dtype=np.float64)
    r = null.shape[0]
    if r < 1:
        raise ValueError("permutation_pvalue needs at least one null draw")
    count = (null >= observed[None]).sum(axis=0)
    p = (count + 1.0) / (r + 1.0)
    return np.where(np.isnan(observed), np.nan, p)


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg q-values over the finite entries of ``p`` (any shape, in [0, 1]):
    ``scipy.stats.false_discovery_control(p, method="bh")`` on them; NaN stays NaN and does not
    count towards the number of tests m."""
    p = np.asarray(p, dtype=np.float64)
    flat = p.ravel()
    ok = np.isfinite(flat)
    vals = flat[ok]
    if vals.size and (vals.min() < 0 or vals.max() > 1):
        raise ValueError(f"p-values must lie in [0, 1]; got range [{vals.min()}, {vals.max()}]")
    q = np.full_like(flat, np.nan)
    m = vals.size
    if m:
        order = np.argsort(vals, kind="stable")
        ranked = vals[order] * m / np.arange(1, m + 1)
        # Step-up: q_(k) = min over l >= k of p_(l) m / l.
        ranked = np.minimum.accumulate(ranked[::-1])[::-1]
        out = np.empty(m)
        out[order] = np.clip(ranked, 0.0, 1.0)
        q[ok] = out
    return q.reshape(p.shape)


def fraction_significant(q: np.ndarray, alpha: float = 0.05) -> float:
    """Fraction of finite q-values below ``alpha`` (significant heads after FDR control)."""
    q = np.asarray(q, dtype=np.float64)
    ok = np.isfinite(q)
    if not ok.any():
        return float("nan")
    return float((q[ok] < alpha).mean())


def within_strata_permutations(
    strata: np.ndarray, n_perm: int, seed: int = 0, chunk: int = 64
) -> Iterator[np.ndarray]:
    """Uniform random permutations that move items only within their stratum, in chunks.

    Yields index arrays ``sigma`` (c, N), c <= ``chunk``, ``n_perm`` rows in all: permuted data
    is ``y[..., sigma[r]]`` and ``strata[sigma[r]] == strata``. ``strata``: (N,) integer labels
    (offset i − j for paper 2's within-offset null). The stream depends only on ``seed``, not on
    ``chunk``: each chunk consumes the generator's doubles in order.
    """
    strata = np.asarray(strata)
    if strata.ndim != 1:
        raise ValueError(f"strata must be 1-D (one label per item), got shape {strata.shape}")
    if n_perm < 1 or chunk < 1:
        raise ValueError(f"n_perm and chunk must be >= 1, got {n_perm}, {chunk}")
    n = strata.size
    base = np.argsort(strata, kind="stable")  # items grouped by stratum, in a fixed order
    # the strata's blocks in ``base``: sorting by (stratum, random key) is sorting each block by
    # its keys (stable: ties by item index, as a lexsort on (stratum, key) breaks them)
    cuts = np.flatnonzero(np.diff(strata[base])) + 1
    blocks = list(zip(np.r_[0, cuts], np.r_[cuts, n]))
    # a key's neighbour in sorted order is in another block at each block's last position
    inner = np.ones(max(n - 1, 0), dtype=bool)
    inner[cuts - 1] = False
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_perm:
        c = min(chunk, n_perm - done)
        keys = rng.random((c, n))[:, base]
        # Sorting by (stratum, random key) gives, within each stratum block, a uniform shuffle.
        pos = np.empty((c, n), dtype=np.int64)  # positions in ``base`` order, sorted per block
        for lo, hi in blocks:
            # the unstable sort (several times faster), repaired below where keys tie
            pos[:, lo:hi] = lo + np.argsort(keys[:, lo:hi], axis=-1)
        _stable_ties(keys, pos, inner, blocks)
        sigma = np.empty((c, n), dtype=np.int64)
        sigma[:, base] = base[pos]
        yield sigma
        done += c


def _stable_ties(
    keys: np.ndarray, pos: np.ndarray, inner: np.ndarray, blocks: list[tuple[int, int]]
) -> None:
    """Make ``pos`` (an unstable per-block argsort of ``keys``) the stable one: the blocks in
    which two equal keys sit next to each other in sorted order are sorted again, stably (ties
    by position). Keys are random doubles, so ties are rare; their order is then what a stable
    sort gives, and the permutations are exactly the lexsort on (stratum, key)."""
    ranked = np.empty_like(keys)
    for r in range(keys.shape[0]):  # row by row: half the time of take_along_axis
        np.take(keys[r], pos[r], out=ranked[r])
    tie = (ranked[:, 1:] == ranked[:, :-1]) & inner
    for r, at in zip(*np.nonzero(tie)):
        lo, hi = next(b for b in blocks if b[0] <= at < b[1])
        pos[r, lo:hi] = lo + np.argsort(keys[r, lo:hi], kind="stable")


def stratified_pair_mask(seq_len: int, per_offset: int, seed: int = 0) -> np.ndarray:
    """``(T, T)`` bool mask (query, key) of causal pairs j ≤ i, i ≥ 1 (row 0 has a single key),
    at most ``per_offset`` drawn without replacement from each offset band d = i − j, so long
    offsets stay represented while short ones are thinned (paper 2 §5)."""
    if seq_len < 2 or per_offset < 1:
        raise ValueError(f"need seq_len >= 2 and per_offset >= 1, got {seq_len}, {per_offset}")
    rng = np.random.default_rng(seed)
    mask = np.zeros((seq_len, seq_len), dtype=bool)
    for d in range(seq_len):
        rows = np.arange(max(d, 1), seq_len)  # never empty: seq_len >= 2
        if rows.size > per_offset:
            rows = np.sort(rng.choice(rows, size=per_offset, replace=False))
        mask[rows, rows - d] = True
    return mask
