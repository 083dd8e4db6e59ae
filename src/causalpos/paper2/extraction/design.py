"""Paper 2's fits and pair sets: the fit grammar, query windows, pair masks and the data-free
design of a fit on a pair set (every Gram matrix the solver of :mod:`causalpos.paper2.extraction.metric`
needs, pseudo-inverted once per mask).

A fit is named ``"<baseline>+<absolute>"``: baseline ``saturated`` (one level per offset) or
``linear`` (b₀ + b₁ d), absolute effects ``query``, ``key`` or ``both``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from causalpos.paper2.settings import query_window

if TYPE_CHECKING:
    import torch

BASELINES = ("saturated", "linear")
ABSOLUTES = ("query", "key", "both")


def parse_fit(fit: str) -> tuple[str, str]:
    """``"saturated+query"`` -> ``("saturated", "query")``, validating both parts."""
    parts = fit.split("+")
    if len(parts) != 2 or parts[0] not in BASELINES or parts[1] not in ABSOLUTES:
        raise ValueError(
            f"fit must be '<baseline>+<absolute>' with baseline in {BASELINES} and absolute in "
            f"{ABSOLUTES}; got {fit!r} (e.g. 'saturated+query')"
        )
    return parts[0], parts[1]


def pair_mask(
    seq_len: int,
    *,
    window: str = "all",
    allowed: np.ndarray | None = None,
    subsample: np.ndarray | None = None,
) -> np.ndarray:
    """Measured pairs ``(T, T)`` bool (query rows × key columns): the lower triangle (j ≤ i) on
    the query rows of ``window`` (:func:`query_window`), ∧ ``allowed`` (the pairs the model's own
    mask lets through, e.g. finite scores) ∧ ``subsample`` (e.g.
    :func:`causalpos.stats.stratified_pair_mask`), each ``(T, T)`` bool."""
    lo, hi = query_window(window, seq_len)
    mask = np.tril(np.ones((seq_len, seq_len), dtype=bool))
    rows = np.arange(seq_len)
    mask &= ((rows >= lo) & (rows < hi))[:, None]
    for extra, name in ((allowed, "allowed"), (subsample, "subsample")):
        if extra is not None:
            extra = np.asarray(extra, dtype=bool)
            if extra.shape != (seq_len, seq_len):
                raise ValueError(
                    f"{name} mask must have shape ({seq_len}, {seq_len}), got {extra.shape}"
                )
            mask &= extra
    return mask


@dataclass(eq=False)
class Design:
    """Pair-count structure of one (mask, fit): everything the solver needs that is data-free.

    Shapes: p = T (saturated) or 2 (linear) baseline columns; q = T (query or key) or 2T (both)
    absolute columns; strata = offsets 0..T−1.
    """

    mask: np.ndarray  # (T, T) bool measured pairs
    baseline: str
    absolute: str
    n_pairs: int  # N
    rank_base: int  # rank(B), including the intercept
    k: int  # rank(F) − rank(B): extra parameters the absolute effects add
    n_offset: np.ndarray  # (T,) pairs per offset stratum
    gx_pinv: np.ndarray  # (p, p) G_X⁺
    b: np.ndarray  # (q, p) G_ZX G_X⁺
    m_pinv: np.ndarray  # (q, q) M⁺
    h: np.ndarray  # (T,) Σ over stratum s of the leverages of P_Δ (NaN with a landmark)
    c_strata: np.ndarray  # (T, T) 1_sᵀ P_Δ 1_t (NaN with a landmark)
    landmark: bool = False  # B (and F) also hold an indicator of key 0 (:func:`build_design`)
    _torch: dict = field(default_factory=dict, repr=False)

    @property
    def seq_len(self) -> int:
        return self.mask.shape[0]

    @property
    def c_zero(self) -> bool:
        """Whether C (``c_strata``) vanishes by the algebra: with a saturated baseline every
        offset indicator lies in B, which P_Δ annihilates."""
        return self.baseline == "saturated" and not self.landmark

    @property
    def floor(self) -> float:
        """E[ΔR²] for pure (spherical) noise: k / (N − 1), k = rank(F) − rank(B), N pairs.

        Derivation: for spherical noise y, the residual of y on the intercept splits into
        orthogonal pieces; ΔSS is the squared norm of its projection on a k-dimensional subspace
        of the (N − 1)-dimensional centred space, so ΔR² = ΔSS/SST ~ Beta(k/2, (N − 1 − k)/2)
        with mean k/(N − 1). On the full triangle without row 0 (N = T(T+1)/2 − 1) k = T − 2 for
        query effects, T − 1 for key effects and 2T − 4 for both (one more null direction:
        β_d + γ_i + κ_j is unchanged by a linear trend c·(i − j − d) = 0). The spec's
        (T − 1)/(N − 2T + 1) is instead E[ΔSS]/E[SSR_F] with row 0 included (k = T − 1, N − p_F
        residual degrees of freedom): a ratio to the residual, not to the total sum of squares,
        and larger by ≈ 2/T."""
        return self.k / (self.n_pairs - 1)

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The design's arrays as float64 tensors on ``device`` (cached). torch is imported here,
        not with the module: the summaries read designs with numpy alone."""
        import torch

        key = str(device)
        if key not in self._torch:
            t = lambda a: torch.as_tensor(
                np.ascontiguousarray(a), dtype=torch.float64, device=device
            )  # noqa: E731
            self._torch[key] = {
                "gx_pinv": t(self.gx_pinv),
                "b": t(self.b),
                "m_pinv": t(self.m_pinv),
                "h": t(self.h),
                "c": t(self.c_strata),
                "c_diag": t(np.diag(self.c_strata)),
                "n_off": t(self.n_offset),
                "offsets": t(np.arange(self.seq_len)),
                **{k: t(v) for k, v in self.null_weights().items()},
            }
            gx = np.diag(self.gx_pinv)
            if np.array_equal(self.gx_pinv, np.diag(gx)):
                self._torch[key]["gx_diag"] = t(gx)
        return self._torch[key]

    def null_weights(self) -> dict[str, np.ndarray]:
        """Per offset stratum s, the weights of Σ y² (``null_q``) and of (Σ y)² (``null_o``) in
        the exact permutation-null mean without its off-diagonal C terms (:func:`~causalpos.paper2.extraction.metric.fit_sums`):
        q_s h_s + o_s (C_ss − h_s) = Σy² (h_s/n_s − g_s) + (Σy)² g_s, g_s = (C_ss − h_s)/(n_s(n_s − 1)),
        each 0 where the stratum has too few pairs (n_s = 0; g_s also n_s = 1)."""
        n, h, cd = self.n_offset, self.h, np.diag(self.c_strata)
        a = np.where(n > 0, h / np.maximum(n, 1.0), 0.0)
        g = np.where(n > 1, (cd - h) / np.maximum(n * (n - 1.0), 1.0), 0.0)
        return {"null_q": a - g, "null_o": g}


def _pinv_sym(m: np.ndarray, size: int | None = None) -> tuple[np.ndarray, int]:
    """Pseudo-inverse and rank of a symmetric PSD matrix (eigen-decomposition, matrix_rank's
    tolerance for a matrix of ``size`` rows: ``m``'s own by default, the full matrix's where
    ``m`` is the block of its rows and columns that are not 0 throughout).

    Exact shortcuts of the same decomposition: a diagonal matrix is its own (eigenvalues the
    diagonal, eigenvectors the unit vectors), and rows and columns that are 0 throughout (levels
    without a pair: query rows outside a window, offsets beyond a sliding window) are eigenvectors
    of eigenvalue 0, so only the block of the others is decomposed.
    """
    m = (m + m.T) / 2.0
    diag = np.diag(m)
    if np.array_equal(m, np.diag(diag)):
        w, act, v = diag, np.arange(len(diag)), None
    else:
        act = np.flatnonzero(m.any(axis=0))
        w, v = np.linalg.eigh(m[np.ix_(act, act)])
    size = m.shape[0] if size is None else size
    tol = max(abs(w).max(initial=0.0), 1e-300) * size * np.finfo(np.float64).eps * 10
    keep = w > tol
    inv = np.zeros_like(m)
    if v is None:
        inv[act[keep], act[keep]] = 1.0 / w[keep]
    else:
        inv[np.ix_(act, act)] = (v[:, keep] / w[keep]) @ v[:, keep].T
    return inv, int(keep.sum())


def _null_strata(levels, d, n_zs, act, n_off, b, x_s, m_pinv):
    """(h (T,), C (T, T)): the stratum-aggregated leverages and cross terms of P_Δ = Z̃ M⁺ Z̃ᵀ
    (Z̃ = Z residualized on X), for the exact permutation-null mean, from each pair's level(s)
    ``levels`` and offset ``d``; computed on the levels with pairs (``act``) and the strata with
    pairs (every other row of Z̃ᵀ1_s (``n_zs``: Zᵀ1_s) and of M⁺ is 0)."""
    T = n_off.shape[0]
    st = np.flatnonzero(n_off > 0)
    saturated = x_s.shape[0] == T and b.shape[1] == T
    w = b[act][:, st] if saturated else b[act] @ x_s[:, st]  # G_ZX G_X⁺ x_s (x_s = e_s: b)
    nz = n_zs[act][:, st]
    mp = m_pinv[np.ix_(act, act)]
    k_strata = nz - w * n_off[None, st]  # Z̃ᵀ1_s
    c_strata = np.zeros((T, T))
    c_strata[np.ix_(st, st)] = k_strata.T @ mp @ k_strata
    zz = sum(m_pinv[a, a] for a in levels)
    if len(levels) == 2:  # query and key levels ("both"): i and T + j
        zz = zz + 2.0 * m_pinv[levels[0], levels[1]]
    h = np.bincount(d, weights=zz, minlength=T)
    h[st] += -2.0 * (w * (mp @ nz)).sum(axis=0) + n_off[st] * (w * (mp @ w)).sum(axis=0)
    return h, c_strata


@lru_cache(maxsize=256)
def _build_design_cached(
    mask_bytes: bytes, seq_len: int, baseline: str, absolute: str, landmark: bool = False
) -> Design:
    mask = np.frombuffer(mask_bytes, dtype=bool).reshape(seq_len, seq_len).copy()
    T = seq_len
    i, j = np.nonzero(mask)
    d = i - j
    n = i.size
    if n < 2:
        raise ValueError(f"the pair mask selects {n} pair(s); a leakage fit needs at least 2")
    n_off = np.bincount(d, minlength=T).astype(np.float64)
    offsets = np.arange(T, dtype=np.float64)

    # Baseline columns, written per stratum: x_s is the baseline row shared by every pair of offset s.
    if baseline == "saturated":
        gx = np.diag(n_off)
        x_s = np.eye(T)  # (p, T)
    else:
        gx = np.array(
            [[n, (n_off * offsets).sum()], [(n_off * offsets).sum(), (n_off * offsets**2).sum()]]
        )
        x_s = np.stack([np.ones(T), offsets])  # (2, T)

    # Absolute columns: the level(s) each pair belongs to; Zᵀ1_s (q, T), the pairs of level z in
    # stratum s, and G_Z = ZᵀZ (q, q), exact integer counts as float64; the levels with pairs.
    levels = {"query": [i], "key": [j], "both": [i, T + j]}[absolute]
    q = T * len(levels)
    n_zs = sum(np.bincount(lev * T + d, minlength=q * T) for lev in levels).reshape(q, T)
    gz = sum(np.bincount(a * q + b_, minlength=q * q) for a in levels for b_ in levels)
    act = np.flatnonzero(n_zs.any(axis=1))
    n_zs, gz = n_zs.astype(np.float64), gz.reshape(q, q).astype(np.float64)
    # Σ_s Zᵀ1_s x_sᵀ (q, p); x_s = e_s for a saturated baseline
    gzx = n_zs if baseline == "saturated" else n_zs @ x_s.T
    if landmark:
        # One more baseline column, the key-0 indicator: its pairs (s, 0) are one per stratum s.
        k0 = mask[:, 0].astype(np.float64)  # [s]: pair (s, 0) measured (offset s)
        gxk = x_s @ k0  # (p,) Xᵀk0
        gx = np.block([[gx, gxk[:, None]], [gxk[None, :], np.array([[k0.sum()]])]])
        zk_cols = np.zeros(T)
        zk_cols[0] = k0.sum()
        zk = {"query": k0, "key": zk_cols, "both": np.concatenate([k0, zk_cols])}[absolute]
        gzx = np.concatenate([gzx, zk[:, None]], axis=1)  # Zᵀk0: query level s holds pair (s, 0)
    gx_pinv, rank_base = _pinv_sym(gx)
    # The levels and baseline columns with pairs; every other row of G_ZX (and of B, M, M⁺)
    # and column of G_ZX is 0, so the products run over these alone.
    cols = np.flatnonzero(gzx.any(axis=0))
    b = np.zeros((q, gzx.shape[1]))
    if baseline == "saturated" and not landmark:  # G_X⁺ diagonal: a column scaling
        b[act] = gzx[act] * np.diag(gx_pinv)[None, :]
    else:
        b[act] = gzx[np.ix_(act, cols)] @ gx_pinv[cols]
    m_act = gz[np.ix_(act, act)] - b[np.ix_(act, cols)] @ gzx[np.ix_(act, cols)].T
    m_act, k = _pinv_sym(m_act, size=q)
    m_pinv = np.zeros((q, q))
    m_pinv[np.ix_(act, act)] = m_act

    if landmark:  # the within-offset null below assumes stratum-constant baseline columns
        h, c_strata = np.full(T, np.nan), np.full((T, T), np.nan)
    else:
        h, c_strata = _null_strata(levels, d, n_zs, act, n_off, b, x_s, m_pinv)
    return Design(
        mask=mask,
        baseline=baseline,
        absolute=absolute,
        n_pairs=int(n),
        rank_base=rank_base,
        k=k,
        n_offset=n_off,
        gx_pinv=gx_pinv,
        b=b,
        m_pinv=m_pinv,
        h=h,
        c_strata=c_strata,
        landmark=landmark,
    )


def build_design(
    mask: np.ndarray, fit: str = "saturated+query", *, landmark: bool = False
) -> Design:
    """Data-free structure of the fit ``fit`` on the pairs selected by ``mask`` ((T, T) bool, cached).

    ``mask`` must lie in the lower triangle (j ≤ i); build it with :func:`pair_mask`.
    ``landmark``: B and F also hold one indicator column of key 0 (the absolute landmark a fixed
    token 0 puts into the data; see :mod:`causalpos.paper2.estimator.expected`). The c-vector then needs
    the key-0 sum (``sums["cols"][..., 0]``); the exact permutation-null mean is not defined
    (``h``, ``c_strata`` NaN).
    """
    baseline, absolute = parse_fit(fit)
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2 or mask.shape[0] != mask.shape[1]:
        raise ValueError(f"pair mask must be square (T, T), got shape {mask.shape}")
    if np.triu(mask, 1).any():
        raise ValueError(
            "pair mask selects pairs above the diagonal (j > i); leakage is defined on "
            "causal pairs j <= i only — build the mask with causalpos.paper2.extraction.design.pair_mask"
        )
    return _build_design_cached(
        np.ascontiguousarray(mask).tobytes(), mask.shape[0], baseline, absolute, bool(landmark)
    )
