"""Every interval both papers report, cut in one place: the percentile interval of replicates,
the bootstrap mean's, the jackknife t interval of leave-one-group-out values, and Wilson's.
Replicates on axis 0; a percentile interval is the (1 − level)/2 and 1 − (1 − level)/2 quantiles
(numpy's default, linear interpolation).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from causalpos import stats


def _tail(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must lie in (0, 1), got {level!r} (e.g. 0.95)")
    return (1.0 - level) / 2.0


def bounds(
    replicates: npt.ArrayLike, level: float = 0.95, *, skip_nan: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi): the percentile interval of ``replicates`` (B, ...) at ``level`` over axis 0.
    ``skip_nan``: NaN replicates left out (a ratio's replicates, NaN where the denominator is 0),
    NaN where all are; else a NaN replicate makes the bounds NaN."""
    a = _tail(level)
    x = np.asarray(replicates, dtype=np.float64)
    if not skip_nan:
        return tuple(np.quantile(x, [a, 1.0 - a], axis=0))
    with np.errstate(invalid="ignore"):
        return tuple(np.nanquantile(x, [a, 1.0 - a], axis=0))


def interval(replicates: np.ndarray, estimate: np.ndarray, level: float) -> np.ndarray:
    """(..., 3) = estimate, lo, hi: the percentile interval of ``replicates`` (B, ...) at
    ``level`` (:func:`bounds`) beside the estimate."""
    lo, hi = bounds(replicates, level)
    return np.stack([estimate, lo, hi], axis=-1)


def bootstrap_ci(
    x: np.ndarray,
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    strata: Sequence | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, lo, hi), each ``x.shape[1:]``: the mean over prompts of ``x`` (n, ...) and the
    percentile interval of its bootstrap means (``strata``: resampled within each)."""
    x = np.asarray(x, dtype=np.float64)
    counts = stats.bootstrap_counts(x.shape[0], n_boot, seed, strata)
    lo, hi = bounds(stats.bootstrap_means(x, counts), level)
    return x.mean(axis=0), lo, hi


def jackknife_interval(
    estimate: npt.ArrayLike, jack: npt.ArrayLike, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) = estimate ∓ t_{G−1} · SE from (group, ...) leave-one-out values (NaN if any is)."""
    jack = np.asarray(jack, dtype=np.float64)
    g = jack.shape[0]
    se = np.sqrt((g - 1) / g * ((jack - jack.mean(axis=0)) ** 2).sum(axis=0))
    # Student's t quantile: scipy.stats.t.ppf is this function (bit for bit, tested), without
    # scipy.stats' 0.4 CPU-s import in the light table jobs; scipy.special (0.15 CPU-s) is imported
    # here, by the jobs that draw an interval (aggregate_sim_stats reaches this module, draws none)
    from scipy.special import stdtrit

    half = float(stdtrit(g - 1, 0.5 + level / 2.0)) * se
    est = np.asarray(estimate, dtype=np.float64)
    return est - half, est + half


def wilson(p_hat: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p_hat`` of ``n`` trials (a fraction of heads, a
    probe's accuracy: its folds share training data, so approximate); (nan, nan) when ``p_hat``
    is not finite or ``n`` < 1."""
    from statistics import NormalDist

    _tail(level)
    p_hat = float(p_hat)
    if not np.isfinite(p_hat) or n < 1:
        return float("nan"), float("nan")
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    den = 1.0 + z * z / n
    mid = (p_hat + z * z / (2 * n)) / den
    half = z * np.sqrt(p_hat * (1.0 - p_hat) / n + z * z / (4 * n * n)) / den
    return float(max(0.0, mid - half)), float(min(1.0, mid + half))
