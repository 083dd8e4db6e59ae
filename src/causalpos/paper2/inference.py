"""Calibrated intervals and tests for the content-free leakage: a multiplier bootstrap for
U-statistics over prompts, whose replicates keep the spread of N̂ both at the null and away from it.

**Setting.** Prompts p = 1..n are iid; a Gram G_pq = h(c_p, c_q) (e.g. c_pᵀM⁺c_q,
:func:`causalpos.paper2.expected.prompt_grams`) gives the U-statistic N̂ = Σ_{p≠q} G_pq with
E N̂ = n(n − 1)θ. Hoeffding's decomposition h = θ + g1(c_p) + g1(c_q) + g2(c_p, c_q) (g2
degenerate) gives

    N̂ − n(n − 1)θ = 2(n − 1) Σ_p g1(c_p) + Σ_{p≠q} g2(c_p, c_q),
    Var N̂ = 4n(n − 1)² ζ1 + 2n(n − 1) E g2²,        ζ1 = Var g1.

For c_p = m + e_p and h = c_pᵀc_q: g1(c) = mᵀe, g2 = e_pᵀe_q. At the null (m = 0) only the
degenerate part is left.

**Why the percentile bootstrap over-covers near 0.** The plug-in linear term
ĝ1(p) = Σ_{q≠p} G_pq / (n − 1) − θ̂ carries the degenerate part's noise: ĝ1(p) = mᵀe_p +
e_pᵀē_{−p} + …, and e_pᵀē_{−p} has variance E g2² / (n − 1). So 4(n − 1)² Σ_p ĝ1(p)² ≈
4n(n − 1)²ζ1 + 4n(n − 1)E g2², twice the degenerate part's true contribution, and the resampled
U-statistic adds that contribution once more: at the null the replicates' variance is ≈ 3 × Var N̂
(SD ratio √3; measured in ``tests/test_inference.py``: 1.70 at n = 32).

**Replicates (decision).** Shared per-prompt Rademacher multipliers ξ (B, n) (:func:`rademacher`)
and, per Gram,

    N*(ξ) − N̂ = 2(n − 1) s Σ_p ξ_p ĝ1(p) + n/(n − 1) Σ_{p≠q} ξ_p ξ_q ĝ2_pq,

with ĝ2 = HGH the doubly centred Gram (H = I − 11ᵀ/n: ĝ2_pq = (c_p − c̄)ᵀ(c_q − c̄) for an inner
product kernel, free of m) and the scale s chosen so that the linear part's variance
4(n − 1)² s² Σ_p ĝ1(p)² equals 4n(n − 1)² ζ̂1⁺, where ζ̂1 is the *unbiased* U-statistic estimate of
ζ1 = E h12 h13 − E h12 h34 (sums over distinct triples and quadruples of prompts, from the Gram in
O(n²)), clipped at 0. Rademacher multipliers have odd moments 0 and E ξ_p²ξ_q² = 1, so the two parts
are uncorrelated and Var*(N*) = 4n(n − 1)² ζ̂1⁺ + 2 (n/(n − 1))² Σ_{p≠q} ĝ2_pq² ≈ Var N̂ (the
centring's factor (1 − 1/n)² is undone by (n/(n − 1))²). At the null ζ̂1 is within its noise of 0
and N* − N̂ is the sign-flip distribution of the centred Gram; far from it the linear part
dominates and the replicates are the wild bootstrap of a mean. The only adaptive step is s; it
is what keeps Var* unbiased at every effect size (a replicate variance Σ_p a_p² with a_p linear in
the Gram cannot remove the e_pᵀē_{−p} term's bias: it is a positive quadratic form).

**Intervals (decision).** Basic (reflected) intervals: [θ̂ − q_hi(θ* − θ̂), θ̂ − q_lo(θ* − θ̂)].
Near the null the sampling law of N̂ − N is the skewed quadratic form Σ λ_k(χ²_1 − 1), and the
multiplier replicates N* − N̂ reproduce that law (exactly, for symmetric e_p, up to the
centring); the basic interval uses it with the right orientation, whereas the percentile interval
mirrors it. A studentised interval would need the variance of every replicate, which for a
degree-2 U-statistic is itself a degree-4 statistic of the resampled prompts; with the variance
calibrated as above the basic interval already meets the coverage checks. :func:`reflect` returns
2θ̂ − θ*: *reflected replicates*, whose percentile interval is the basic interval, so code that
takes percentile intervals of replicates (and of differences or ratios of paired replicates) gets
the basic interval of the same quantity without change; differences of reflected replicates are
the reflected replicates of the difference exactly, smooth functions of them to first order.

**Ratios.** ρ = N/D (ΔR² of the expected map): D* is built the same way from the denominator's
Gram, with the same ξ, so N* and D* are paired and ρ* = N*/D* carries their covariance (the two
linear parts share ξ; each is scaled by its own s, so their covariance is that of the plug-in
terms scaled by s_N s_D — exact where both are far from 0 or where N's linear part is 0, an
approximation in between). What the estimator knows of D's Gram is its low-rank part (every
pair) and, for the residual part, only the diagonal and the total
(:func:`causalpos.paper2.expected.u_statistics`): the residual part is held at its estimate in
every replicate, so D*'s spread omits the residual part's own variance (its share of D̂ is
reported as ``exp_resid_share``; the tests measure coverage with a realistic residual part).
A linear combination of statistics of one prompt set (a difference of two runs' N, a
contrast of heads) is itself a U-statistic with the combined Gram; :func:`u_replicates` of that
Gram calibrates it exactly, while combining two runs' replicates shares ξ but scales their linear
parts separately.

**Test.** H0: θ = 0 (P_Δ μ = 0: the c_p have mean 0). The one-sided sign-flip test compares N̂ with
T(ξ) = Σ_{p≠q} ξ_pξ_q G_pq over the same multipliers (the replicates restricted to H0: no linear
part, no centring): p = (1 + #{T ≥ N̂}) / (1 + B), exact when the c_p are symmetric about 0.

**Strata.** The multipliers are iid over prompts whether or not the prompts were drawn by source;
the centring is over all prompts, so differences between the strata's means count as variance
(conservative where the strata differ).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "rademacher",
    "quadratic_form",
    "zeta1",
    "u_replicates",
    "ratio_replicates",
    "reflect",
    "basic_interval",
    "sign_flip_pvalue",
]


def rademacher(n: int, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """Multipliers ξ (n_boot, n) float64, iid ±1 with probability 1/2 (seeded): the draws every
    run of one prompt set shares, which pairs their replicates."""
    if n < 1 or n_boot < 1:
        raise ValueError(f"multipliers need n >= 1 prompts and n_boot >= 1, got {n}, {n_boot}")
    rng = np.random.default_rng(seed)
    return rng.choice(np.array([-1.0, 1.0]), size=(n_boot, n))


def quadratic_form(gram: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Σ_{p≠q} w_p w_q G_pq for weights (B, n) and Grams (..., n, n) -> (B, ...).

    One matrix product per block of weights (BLAS), then a row-wise dot: wᵀGw − Σ w_p² G_pp."""
    g = np.asarray(gram, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    lead, n = g.shape[:-2], g.shape[-1]
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"weights must have shape (B, {n}) to match the Gram, got {w.shape}")
    flat = g.reshape(-1, n, n)
    diag = np.diagonal(flat, axis1=-2, axis2=-1)  # (K, n)
    out = np.empty((w.shape[0], flat.shape[0]))
    for k0 in range(0, w.shape[0], 512):  # bounded temporaries: K × n × 512
        wb = w[k0 : k0 + 512]
        gw = flat @ wb.T  # (K, n, b)
        out[k0 : k0 + 512] = np.einsum("kpb,bp->bk", gw, wb) - (wb * wb) @ diag.T
    return out.reshape((w.shape[0],) + lead)


def _moments(gram: np.ndarray) -> dict[str, np.ndarray]:
    """N̂, the off-diagonal row sums r_p, and the sums over distinct pairs, triples and
    quadruples S2 = Σ G_pq², S3 = Σ G_pq G_pr, S4 = Σ G_pq G_rs of a Gram (..., n, n)."""
    g = np.asarray(gram, dtype=np.float64)
    diag = np.diagonal(g, axis1=-2, axis2=-1)
    row = g.sum(-1) - diag
    est = row.sum(-1)
    s2 = (g * g).sum((-2, -1)) - (diag * diag).sum(-1)
    s3 = (row * row).sum(-1) - s2
    s4 = est * est - 2.0 * s2 - 4.0 * s3
    return {"est": est, "row": row, "s2": s2, "s3": s3, "s4": s4}


def zeta1(gram: np.ndarray) -> np.ndarray:
    """Unbiased estimate of ζ1 = Var g1 = E[h12 h13] − E[h12 h34] from a Gram (..., n, n), n ≥ 4:
    S3 / (n)_3 − S4 / (n)_4 (falling factorials; may be negative)."""
    n = np.shape(gram)[-1]
    if n < 4:
        raise ValueError(f"the variance of the linear part needs at least 4 prompts, got {n}")
    m = _moments(gram)
    n3 = n * (n - 1.0) * (n - 2.0)
    return m["s3"] / n3 - m["s4"] / (n3 * (n - 3.0))


def u_replicates(gram: np.ndarray, xi: np.ndarray) -> dict[str, np.ndarray]:
    """Calibrated multiplier replicates of N̂ = Σ_{p≠q} G_pq (module docstring).

    ``gram`` (..., n, n) symmetric, ``xi`` (B, n) multipliers. Returns ``est`` (...) N̂;
    ``delta`` (B, ...) N* − N̂; ``null`` (B, ...) the sign-flip statistic T(ξ) = Σ ξ_pξ_q G_pq;
    ``scale`` (...) s; ``zeta1`` (...) ζ̂1; ``var`` (...) Var*(N*) given the data.
    """
    g = np.asarray(gram, dtype=np.float64)
    xi = np.asarray(xi, dtype=np.float64)
    n = g.shape[-1]
    z1 = zeta1(g)
    m = _moments(g)
    theta = m["est"] / (n * (n - 1.0))
    g1 = m["row"] / (n - 1.0) - theta[..., None]  # (..., n) plug-in linear terms, Σ_p = 0
    ss = (g1 * g1).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(ss > 0, np.sqrt(n * np.maximum(z1, 0.0) / np.where(ss > 0, ss, 1.0)), 0.0)
    null = quadratic_form(g, xi)
    # Σ_{p≠q} ξ_pξ_q (HGH)_pq from T(ξ) and terms linear in the row means (module docstring)
    gbar_p = g.mean(-1)  # (..., n) c̄ᵀc_p for an inner-product kernel
    gbar = gbar_p.mean(-1)  # (...)
    lead = (1,) * (g.ndim - 2)
    s_xi = xi.sum(-1).reshape((-1,) + lead)
    s_xi2 = (xi * xi).sum(-1).reshape((-1,) + lead)
    flat = gbar_p.reshape(-1, n)
    xg = (xi @ flat.T).reshape((-1,) + g.shape[:-2])
    x2g = ((xi * xi) @ flat.T).reshape((-1,) + g.shape[:-2])
    centred = null - 2.0 * (xg * s_xi - x2g) + gbar * (s_xi * s_xi - s_xi2)
    lin = (xi @ g1.reshape(-1, n).T).reshape((-1,) + g.shape[:-2])
    delta = 2.0 * (n - 1.0) * scale * lin + n / (n - 1.0) * centred
    c2 = _moments(_double_centre(g))["s2"]
    var = 4.0 * (n - 1.0) ** 2 * scale**2 * ss + 2.0 * (n / (n - 1.0)) ** 2 * c2
    return {"est": m["est"], "delta": delta, "null": null, "scale": scale, "zeta1": z1, "var": var}


def _double_centre(g: np.ndarray) -> np.ndarray:
    return (
        g - g.mean(-1, keepdims=True) - g.mean(-2, keepdims=True) + g.mean((-2, -1), keepdims=True)
    )


def ratio_replicates(
    num_gram: np.ndarray, den_gram: np.ndarray, xi: np.ndarray, den_const: np.ndarray | float = 0.0
) -> dict[str, np.ndarray]:
    """ρ̂ = N̂ / D̂ and its replicates ρ* = N*/D* (B, ...) from paired multiplier replicates of the
    numerator's and the denominator's Grams (..., n, n); ``den_const`` (...) a part of D̂ known
    only in total, held fixed in every replicate. Returns ``est``, ``boot`` (ρ*, not reflected),
    ``num``, ``den`` (N̂, D̂) and ``num_boot``, ``den_boot`` (N*, D*)."""
    nu, de = u_replicates(num_gram, xi), u_replicates(den_gram, xi)
    d0 = de["est"] + den_const
    n_b, d_b = nu["est"] + nu["delta"], d0 + de["delta"]
    return {
        "est": _ratio(nu["est"], d0),
        "boot": _ratio(n_b, d_b),
        "num": nu["est"],
        "den": d0,
        "num_boot": n_b,
        "den_boot": d_b,
        "null": nu["null"],
    }


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.broadcast_arrays(np.asarray(num, np.float64), np.asarray(den, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den != 0, num / np.where(den != 0, den, 1.0), np.nan)


def reflect(estimate: np.ndarray, replicates: np.ndarray) -> np.ndarray:
    """Reflected replicates 2θ̂ − θ* (B, ...): their percentile interval is the basic interval."""
    return 2.0 * np.asarray(estimate)[None] - np.asarray(replicates)


def basic_interval(
    estimate: np.ndarray, replicates: np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) = θ̂ − the (1 + level)/2 and (1 − level)/2 quantiles of θ* − θ̂ (NaN-aware:
    replicates with a NaN are left out)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must lie in (0, 1), got {level!r}")
    a = (1.0 - level) / 2.0
    lo, hi = np.nanquantile(reflect(estimate, replicates), [a, 1.0 - a], axis=0)
    return lo, hi


def sign_flip_pvalue(estimate: np.ndarray, null: np.ndarray) -> np.ndarray:
    """One-sided p = (1 + #{T(ξ) ≥ N̂}) / (1 + B) of H0: θ = 0 from the sign-flip statistics
    ``null`` (B, ...) of :func:`u_replicates` (ties within rounding count as exceedances)."""
    est = np.asarray(estimate, dtype=np.float64)
    null = np.asarray(null, dtype=np.float64)
    hits = (null >= (est - 1e-12 * np.abs(est))[None]).sum(0)
    return (1.0 + hits) / (1.0 + null.shape[0])
