"""Every interval and every test of paper 2, cut in one place: the headline's calibrated intervals
(multiplier replicates of :mod:`causalpos.paper2.estimator.replicates`, inverted with the variance
at the hypothesised value), the basic interval of a contrast, the percentile and Wilson intervals
(:func:`interval`, :func:`bounds`, :func:`wilson`: :mod:`causalpos.inference`'s) and the p-values
(sign flips, Monte Carlo permutation counts, Benjamini–Hochberg: :mod:`causalpos.stats`'), under
the names paper 2's summary reads.

**Intervals (decision): inverted with the variance at the hypothesised value.** The variance of
N̂ grows with N (ζ1 = mᵀΣm is quadratic in m) and its estimate moves with N̂, so an interval
N̂ ∓ (replicate quantiles) misses N from above (measured: a basic interval covers 85–89 % at
effects of 1–2 SD). The interval inverts the pivot z = (N̂ − N) / √V(N) with

    V(N) = V2 + α · max(N, 0),   V2 = 2 (n/(n − 1))² Σ_{p≠q} ĝ2_pq²,   α = 4(n − 1) κ̂,

κ̂ = c̄ᵀΣ̂c̄ / ‖c̄‖² (the plug-in Rayleigh quotient at the mean, mean_p h_p² / ḡ in Gram terms,
h_p = mean_q G_pq − ḡ, ḡ = mean G). z's law is that of the standardised replicates
z* = (N* − N̂) / √Var*(N*), widened by t_{n−1}/z (the linear part's variance is estimated from
n prompts). Each z*_b maps to the N_b solving N̂ − N_b = z*_b √V(N_b) (a quadratic for N_b > 0,
linear below; decreasing in z*_b): the *reflected replicates*, whose percentile interval is the
inverted interval, so percentile intervals of replicates (and of their paired differences or
ratios) need no change. At N = 0 the variance is V2 alone: the interval covers 0 iff the centred
sign-flip statistic, standardised, lies within its quantiles.

**Ratios.** ρ = N/D: D* is built the same way from the denominator's Gram with the same ξ; the
ratio's reflected replicates N_b / D_b are a first-order inversion of its pivot. D's residual
part (known only in diagonal and total, :func:`causalpos.paper2.estimator.expected.u_statistics`)
is held at its estimate, so D*'s spread omits its variance (reported as ``resid_share``). A
linear combination of statistics of one prompt set is a U-statistic with the combined Gram:
:func:`u_replicates` of that Gram calibrates it exactly.

**Measured** (``tests/paper2/test_inference.py``: token-content maps on T = 12, 2,000 prompt sets
per setting). Null: the 95 % interval covers 0 in 95.1 % (n = 32) and 94.8 % (n = 64), the test
at α = 0.05 rejects 4.5 % and 4.8 %. True ratio covered in 93.5 % / 94.1 % at a 3-SD effect,
93.9 % / 94.3 % at 60 SD. Power at 3 SD (n = 32): the interval excludes 0 in 64.6 %, the
one-sided test rejects in 75.0 %; the percentile bootstrap's interval: 34.0 %.

**Test.** H0: θ = 0. The one-sided sign-flip test compares N̂ with T(ξ) = Σ_{p≠q} ξ_pξ_q G_pq
over the same multipliers: p = (1 + #{T ≥ N̂}) / (1 + B), exact when the c_p are symmetric about 0.
"""

from __future__ import annotations

import functools

import numpy as np

from causalpos import stats
from causalpos.inference import bounds, interval, wilson  # noqa: F401  (paper 2's names)
from causalpos.paper2.estimator.replicates import u_replicates


@functools.lru_cache(maxsize=64)
def _t_factor(n: int, level: float) -> float:
    """t_{n−1} / z at the two-sided ``level``: the linear part's variance is estimated (the
    quantile functions ``scipy.stats.t.ppf`` and ``norm.ppf`` call, without their import)."""
    from scipy.special import ndtri, stdtrit

    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must lie in (0, 1), got {level!r}")
    q = (1.0 + level) / 2.0
    return float(stdtrit(n - 1, q) / ndtri(q))


def inverted(u: dict[str, np.ndarray], n: int, level: float = 0.95) -> np.ndarray:
    """Reflected replicates (B, ...) of N from :func:`u_replicates`' output ``u``: each
    standardised replicate z*_b = (N*_b − N̂) / √Var* (times t_{n−1}/z at ``level``) mapped to the
    N_b solving N̂ − N_b = z*_b √V(N_b), V(N) = V2 + α max(N, 0) (module docstring). Their
    percentile interval at ``level`` is the calibrated interval of N."""
    est, v2, al = u["est"], u["v2"], u["alpha"]
    # Element-wise on (B, ...): the same operations in the same order as the closed form
    # N_b = N̂ + z²α/2 − z √(V2 + αN̂ + z²α²/4) (N_b > 0), N̂ − z √V2 (otherwise), in place.
    with np.errstate(divide="ignore", invalid="ignore"):
        z = _t_factor(n, level) * u["delta"]
        z /= np.sqrt(u["var"])
        zz = z * z
        zs = z * np.sqrt(v2)  # z √V2
        s = zz * al
        s *= al
        s /= 4.0
        s += v2 + al * est
        np.maximum(s, 0.0, out=s)
        np.sqrt(s, out=s)
        s *= z  # z s
        pos = zz  # z² α / 2, in zz's buffer
        pos *= al
        pos /= 2.0
        pos += est
        pos -= s
        out = np.subtract(est, zs, out=s)  # N̂ − z √V2 where N_b ≤ 0
        np.copyto(out, pos, where=zs < est)  # N_b > 0 iff z*_b √V2 < N̂
    if np.all(u["var"] > 0):
        return out
    return np.where(u["var"] > 0, out, est)


def calibrated(
    gram: np.ndarray,
    xi: np.ndarray,
    level: float = 0.95,
    parts: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """N̂ = Σ_{p≠q} G_pq of Grams (..., n, n) with its calibrated reflected replicates under the
    multipliers ``xi`` (B, n): ``est`` (...), ``boot`` (B, ...) (percentile interval = calibrated
    interval), ``p`` (...) the one-sided sign-flip p-value of H0: N = 0 from the same ``xi``.
    ``parts``: the Gram's :func:`linear_parts`, when known."""
    u = u_replicates(gram, xi, parts)
    n = np.shape(gram)[-1]
    return {
        "est": u["est"],
        "boot": inverted(u, n, level),
        "p": sign_flip_pvalue(u["est"], u["null"]),
    }


def calibrated_ratio(
    num_gram: np.ndarray,
    den_gram: np.ndarray,
    xi: np.ndarray,
    den_const: np.ndarray | float = 0.0,
    level: float = 0.95,
    parts: tuple[dict | None, dict | None] = (None, None),
) -> dict[str, np.ndarray]:
    """ρ̂ = N̂ / D̂ with reflected replicates N_b / D_b (B, ...): N and D each from
    :func:`calibrated` on their Grams (..., n, n) with the same ``xi``; ``den_const`` (...) a part
    of D̂ known only in total (the residual part), held fixed. Returns ``est``, ``boot``,
    ``num``, ``den`` (N̂, D̂), ``num_boot``, ``den_boot`` (reflected) and ``p`` (of N = 0).
    ``parts``: the numerator's and the denominator's :func:`linear_parts`, where known."""
    nu = calibrated(num_gram, xi, level, parts[0])
    de = calibrated(den_gram, xi, level, parts[1])
    d0 = de["est"] + den_const
    d_b = de["boot"] + den_const
    return {
        "est": ratio(nu["est"], d0),
        "boot": ratio(nu["boot"], d_b),
        "num": nu["est"],
        "den": d0,
        "num_boot": nu["boot"],
        "den_boot": d_b,
        "p": nu["p"],
    }


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise, NaN where den is 0 (the one ratio of the headline's estimators)."""
    num, den = np.broadcast_arrays(np.asarray(num, np.float64), np.asarray(den, np.float64))
    nonzero = den != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        if nonzero.all():
            return num / den
        return np.where(nonzero, num / np.where(nonzero, den, 1.0), np.nan)


def reflect(estimate: np.ndarray, replicates: np.ndarray) -> np.ndarray:
    """Reflected replicates 2θ̂ − θ* (B, ...): their percentile interval is the basic interval."""
    return 2.0 * np.asarray(estimate)[None] - np.asarray(replicates)


def sign_flip_pvalue(estimate: np.ndarray, null: np.ndarray) -> np.ndarray:
    """One-sided p = (1 + #{T(ξ) ≥ N̂}) / (1 + B) of H0: θ = 0 from the sign-flip statistics
    ``null`` (B, ...) of :func:`u_replicates` (ties within rounding count as exceedances)."""
    est = np.asarray(estimate, dtype=np.float64)
    null = np.asarray(null, dtype=np.float64)
    hits = (null >= (est - 1e-12 * np.abs(est))[None]).sum(0)
    return exceedance_pvalue(hits, null.shape[0])


def exceedance_pvalue(exceed: np.ndarray, n_draws: int) -> np.ndarray:
    """One-sided Monte Carlo p = (1 + #{draws ≥ observed}) / (1 + draws): the observed statistic
    counted as one draw of the null, so p is never 0 (``exceed``: the counts)."""
    return (1.0 + exceed) / (1.0 + n_draws)


def q_values(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg q-values across every finite entry of ``p`` (e.g. (layer, head))
    (:func:`causalpos.stats.benjamini_hochberg`)."""
    return stats.benjamini_hochberg(p)


def fraction_below(q: np.ndarray, alpha: float) -> float:
    """The fraction of finite q-values below ``alpha``: heads significant after FDR control
    (:func:`causalpos.stats.fraction_significant`)."""
    return stats.fraction_significant(q, alpha)
