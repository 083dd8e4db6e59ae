"""The multiplier bootstrap of U-statistics over prompts: replicates that keep the spread of N̂
both at the null and away from it (their interval: :mod:`causalpos.paper2.inference`).

**Setting.** Prompts p = 1..n are iid; a Gram G_pq = h(c_p, c_q) (e.g. c_pᵀM⁺c_q,
:func:`causalpos.paper2.estimator.pairgrams.prompt_grams`) gives N̂ = Σ_{p≠q} G_pq with
E N̂ = n(n − 1)θ. Hoeffding's decomposition h = θ + g1(c_p) + g1(c_q) + g2(c_p, c_q) (g2
degenerate) gives

    N̂ − n(n − 1)θ = 2(n − 1) Σ_p g1(c_p) + Σ_{p≠q} g2(c_p, c_q),
    Var N̂ = 4n(n − 1)² ζ1 + 2n(n − 1) E g2²,        ζ1 = Var g1.

For c_p = m + e_p and h = c_pᵀc_q: g1(c) = mᵀe, g2 = e_pᵀe_q; at the null (m = 0) only the
degenerate part is left.

**Why the percentile bootstrap over-covers near 0.** The plug-in linear term
ĝ1(p) = Σ_{q≠p} G_pq / (n − 1) − θ̂ = mᵀe_p + e_pᵀē_{−p} + … carries the degenerate part's noise
(e_pᵀē_{−p} has variance E g2² / (n − 1)), so 4(n − 1)² Σ_p ĝ1(p)² ≈ 4n(n − 1)²ζ1 +
4n(n − 1)E g2², twice the degenerate part's contribution, and the resampled U-statistic adds it
once more: at the null the replicates' variance is ≈ 3 × Var N̂ (measured in
``tests/paper2/estimator/test_replicates.py`` at n = 32: plug-in linear variance 1.81 × Var N̂,
percentile-bootstrap SD 1.57 × the estimate's SD, 99.5 % coverage of 0).

**Replicates (decision).** Shared per-prompt Rademacher multipliers ξ (B, n) (:func:`rademacher`)
and, per Gram,

    N*(ξ) − N̂ = 2(n − 1) s Σ_p ξ_p ĝ1(p) + n/(n − 1) Σ_{p≠q} ξ_p ξ_q ĝ2_pq,

with ĝ2 = HGH the doubly centred Gram (H = I − 11ᵀ/n; free of m for an inner product kernel)
and the scale s chosen so that the linear part's variance 4(n − 1)² s² Σ_p ĝ1(p)² equals
4n(n − 1)² ζ̂1⁺, ζ̂1 the *unbiased* U-statistic estimate of ζ1 = E h12 h13 − E h12 h34 (from the
Gram in O(n²)), clipped at 0. Rademacher multipliers have odd moments 0 and E ξ_p²ξ_q² = 1, so
the parts are uncorrelated and Var*(N*) = 4n(n − 1)² ζ̂1⁺ + 2 (n/(n − 1))² Σ_{p≠q} ĝ2_pq² ≈ Var N̂
((n/(n − 1))² undoes the centring's (1 − 1/n)²). At the null N* − N̂ is the sign-flip
distribution of the centred Gram; far from it the replicates are the wild bootstrap of a mean. The only adaptive step, s, keeps Var* unbiased at every effect
size (a replicate variance Σ_p a_p² with a_p linear in the Gram cannot remove the e_pᵀē_{−p}
term's bias: it is a positive quadratic form).

**Strata.** The multipliers are iid over prompts whether or not the prompts were drawn by source;
the centring is over all prompts, so differences between the strata's means count as variance
(conservative).

**Computation.** Of a replicate, only the three parts of :func:`linear_parts` involve the
multipliers, and they are linear in the Gram: the headline computes them once per head (B × n²
work per map) and takes every sum or combination of Grams' parts as the sum or combination of
theirs; N̂, ζ̂1, s, V2 and α are scalars per Gram from O(n²) sums of the summed Gram itself.
"""

from __future__ import annotations

import numpy as np


def rademacher(n: int, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """Multipliers ξ (n_boot, n) float64, iid ±1 with probability 1/2 (seeded): the draws every
    run of one prompt set shares, which pairs their replicates."""
    if n < 1 or n_boot < 1:
        raise ValueError(f"multipliers need n >= 1 prompts and n_boot >= 1, got {n}, {n_boot}")
    rng = np.random.default_rng(seed)
    return rng.choice(np.array([-1.0, 1.0]), size=(n_boot, n))


def quadratic_form(gram: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Σ_{p≠q} w_p w_q G_pq for weights (B, n) and Grams (..., n, n) -> (B, ...).

    Computed as wᵀSw with S the strictly upper triangle of G + Gᵀ (only pairs p < q enter, for
    any G): for few prompts as one matrix product of the weights' pair products (B, n(n − 1)/2),
    cached per weights, with every Gram's S; otherwise a triangular matrix product per Gram
    (BLAS ``trmm``, half a general product's work); for B ≤ 8 (e.g. N̂ itself) wᵀGw minus the
    diagonal's terms. Equal to the explicit double sum up to rounding."""
    g = np.asarray(gram, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    lead, n = g.shape[:-2], g.shape[-1]
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"weights must have shape (B, {n}) to match the Gram, got {w.shape}")
    flat = g.reshape(-1, n, n)
    b, k = w.shape[0], flat.shape[0]
    if n < 2 or k == 0 or b == 0:
        return np.zeros((b,) + lead)
    if b <= 8:
        gw = flat @ w.T  # (K, n, b)
        diag = np.diagonal(flat, axis1=-2, axis2=-1)
        out = np.einsum("kpb,bp->bk", gw, w) - (w * w) @ diag.T
    elif b * n * (n - 1) // 2 * 8 <= _PAIR_BYTES:
        iu, ju = np.triu_indices(n, 1)
        s = flat[:, iu, ju] + flat[:, ju, iu]  # (K, P)
        out = _pair_products(w, iu, ju) @ s.T
    else:
        from scipy.linalg.blas import dtrmm

        s = flat + np.swapaxes(flat, -1, -2)  # symmetric: its transpose is a free F-order view
        np.einsum("kii->ki", s)[:] = 0.0  # trmm reads the upper triangle and the diagonal
        wt = np.asfortranarray(w.T)  # (n, B)
        out = np.empty((b, k))
        for i in range(k):
            y = dtrmm(1.0, s[i].T, wt, side=0, lower=0)  # S w, (n, B)
            out[:, i] = np.einsum("pb,pb->b", y, wt)
    return out.reshape((b,) + lead)


#: Largest cached table of the weights' pair products w_p w_q (p < q) the quadratic form uses
#: (bytes); beyond it, one triangular product per Gram.
_PAIR_BYTES = 32 * 2**20


_PAIR_CACHE: dict[tuple, np.ndarray] = {}


def _pair_products(w: np.ndarray, iu: np.ndarray, ju: np.ndarray) -> np.ndarray:
    """(B, n(n − 1)/2) products w_p w_q over p < q, kept for the last two weight arrays."""
    import hashlib

    key = (w.shape, hashlib.sha1(np.ascontiguousarray(w).tobytes()).hexdigest())
    if key not in _PAIR_CACHE:
        while len(_PAIR_CACHE) >= 2:
            _PAIR_CACHE.pop(next(iter(_PAIR_CACHE)))
        _PAIR_CACHE[key] = w[:, iu] * w[:, ju]
    return _PAIR_CACHE[key]


def _rows(g: np.ndarray) -> dict[str, np.ndarray]:
    """N̂ and the off-diagonal row sums r_p of a Gram (..., n, n) (as :func:`_moments`)."""
    diag = np.diagonal(g, axis1=-2, axis2=-1)
    row = g.sum(-1) - diag
    return {"est": row.sum(-1), "row": row, "diag": diag}


def _moments(gram: np.ndarray) -> dict[str, np.ndarray]:
    """N̂, the off-diagonal row sums r_p, and the sums over distinct pairs, triples and
    quadruples S2 = Σ G_pq², S3 = Σ G_pq G_pr, S4 = Σ G_pq G_rs of a Gram (..., n, n)."""
    g = np.asarray(gram, dtype=np.float64)
    m = _rows(g)
    diag, row, est = m["diag"], m["row"], m["est"]
    s2 = (g * g).sum((-2, -1)) - (diag * diag).sum(-1)
    s3 = (row * row).sum(-1) - s2
    s4 = est * est - 2.0 * s2 - 4.0 * s3
    return {"est": est, "row": row, "s2": s2, "s3": s3, "s4": s4}


#: The keys of :func:`linear_parts`.
LINEAR_PARTS = ("null", "centred", "lin")


def linear_parts(gram: np.ndarray, xi: np.ndarray) -> dict[str, np.ndarray]:
    """The parts of :func:`u_replicates`' replicates that are linear in the Gram (..., n, n), for
    multipliers ``xi`` (B, n), each (B, ...): ``null`` T(ξ) = Σ_{p≠q} ξ_pξ_q G_pq, ``centred``
    Σ_{p≠q} ξ_pξ_q (HGH)_pq and ``lin`` Σ_p ξ_p ĝ1(p). The parts of a sum of Grams are the sums
    of its terms' parts, up to rounding (module docstring).
    """
    g = np.asarray(gram, dtype=np.float64)
    xi = np.asarray(xi, dtype=np.float64)
    n = g.shape[-1]
    if xi.ndim != 2 or xi.shape[1] != n:
        raise ValueError(f"multipliers must have shape (B, {n}) to match the Gram, got {xi.shape}")
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
    g1 = _g1(_rows(g), n)
    lin = (xi @ g1.reshape(-1, n).T).reshape((-1,) + g.shape[:-2])
    return {"null": null, "centred": centred, "lin": lin}


def _g1(m: dict[str, np.ndarray], n: int) -> np.ndarray:
    """(..., n) the plug-in linear terms ĝ1(p) = Σ_{q≠p} G_pq / (n − 1) − θ̂ (Σ_p = 0)."""
    theta = m["est"] / (n * (n - 1.0))
    return m["row"] / (n - 1.0) - theta[..., None]


def sum_parts(parts: dict[str, np.ndarray], axis) -> dict[str, np.ndarray]:
    """:func:`linear_parts` of the Gram summed over its leading ``axis`` (of the Gram, not
    counting the replicates' axis): each part (B, ...) summed over that axis, as one product
    with a vector of ones (a BLAS reduction, several times faster than ``sum`` over a short last
    axis)."""
    out = {}
    for k, v in parts.items():
        lead = v.ndim - 1
        axes = sorted({a % lead for a in ((axis,) if np.isscalar(axis) else axis)})
        keep = [a + 1 for a in range(lead) if a not in axes]
        moved = np.moveaxis(v, [a + 1 for a in axes], range(v.ndim - len(axes), v.ndim))
        flat = moved.reshape(moved.shape[: 1 + len(keep)] + (-1,))
        out[k] = flat @ np.ones(flat.shape[-1])
    return out


def u_replicates(
    gram: np.ndarray, xi: np.ndarray, parts: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Calibrated multiplier replicates of N̂ = Σ_{p≠q} G_pq (module docstring).

    ``gram`` (..., n, n) symmetric, ``xi`` (B, n) multipliers. Returns ``est`` (...) N̂;
    ``delta`` (B, ...) N* − N̂; ``null`` (B, ...) the sign-flip statistic T(ξ) = Σ ξ_pξ_q G_pq;
    ``scale`` (...) s; ``zeta1`` (...) ζ̂1; ``var`` (...) Var*(N*) given the data; ``v2`` (...)
    its degenerate part V2; ``alpha`` (...) the slope α of the variance model V(N).
    ``parts``: the Gram's :func:`linear_parts` under ``xi`` when already known (e.g. summed
    from its terms' parts); computed here otherwise.
    """
    g = np.asarray(gram, dtype=np.float64)
    xi = np.asarray(xi, dtype=np.float64)
    n = g.shape[-1]
    if n < 4:
        raise ValueError(f"the variance of the linear part needs at least 4 prompts, got {n}")
    m = _moments(g)
    n3 = n * (n - 1.0) * (n - 2.0)
    z1 = m["s3"] / n3 - m["s4"] / (n3 * (n - 3.0))
    g1 = _g1(m, n)
    ss = (g1 * g1).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(ss > 0, np.sqrt(n * np.maximum(z1, 0.0) / np.where(ss > 0, ss, 1.0)), 0.0)
    if parts is None:
        parts = linear_parts(g, xi)
    delta = 2.0 * (n - 1.0) * scale * parts["lin"] + n / (n - 1.0) * parts["centred"]
    v2 = 2.0 * (n / (n - 1.0)) ** 2 * _centred_s2(g)
    var = 4.0 * (n - 1.0) ** 2 * scale**2 * ss + v2
    gbar_p = g.mean(-1)
    gbar = gbar_p.mean(-1)
    h = gbar_p - gbar[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(gbar > 0, (h * h).mean(-1) / np.where(gbar > 0, gbar, 1.0), 0.0)
    return {
        "est": m["est"],
        "delta": delta,
        "null": parts["null"],
        "scale": scale,
        "zeta1": z1,
        "var": var,
        "v2": v2,
        "alpha": 4.0 * (n - 1.0) * kappa,
    }


def _centred_s2(g: np.ndarray) -> np.ndarray:
    """S2 = Σ_{p≠q} (HGH)_pq² of the doubly centred Gram HGH (H = I − 11ᵀ/n) and :func:`_moments`'
    S2, in one buffer."""
    c = np.subtract(g, g.mean(-1, keepdims=True))
    c -= g.mean(-2, keepdims=True)
    c += g.mean((-2, -1), keepdims=True)
    diag = np.diagonal(c, axis1=-2, axis2=-1).copy()
    np.multiply(c, c, out=c)
    return c.sum((-2, -1)) - (diag * diag).sum(-1)
