"""Paper 2 (Ruscio et al. 2026): absolute-position leakage of attention maps and its decomposition.

**Metric (paper2.md §2).** For one map (one prompt, layer, head) and a target y over the measured
causal pairs 0 ≤ j ≤ i < T (row i = 0 excluded; optionally a window of query rows and a subsample
of pairs), leakage is ΔR² = R²(F) − R²(B) where

- B is a relative baseline: ``saturated`` (one level β_d per offset d = i − j) or ``linear``
  (b₀ + b₁ d);
- F = B + absolute effects: ``query`` (γ_i, the default), ``key`` (κ_j) or ``both``.

A fit is named ``"<baseline>+<absolute>"`` (``"saturated+query"`` is the paper's).

**Solver.** Frisch–Waugh–Lovell on the two-way design (offset × query/key): with X the baseline
columns and Z the absolute columns, the extra explained sum of squares is

    ΔSS = cᵀ M⁺ c,   c = Zᵀy − G_ZX G_X⁺ Xᵀy,   M = ZᵀZ − G_ZX G_X⁺ G_XZ

where every Gram matrix is a pair count that depends only on the mask, not on the data. M (at most
2T × 2T) is pseudo-inverted once per mask; a map then needs only its per-offset / per-query / per-key
sums (O(T²)) and one T-sized quadratic form. No (pairs × parameters) design matrix is ever formed.

**Null.** The within-offset permutation null (§5) permutes y within offset strata. Its mean has a
closed form used as the per-map noise floor (``null_mean``):

    E_π[ΔSS] = Σ_s q_s h_s + Σ_s o_s (C_ss − h_s) + Σ_{s≠t} μ_s μ_t C_st

with μ_s, q_s the stratum means of y and y², o_s = (S_s² − Q_s)/(n_s(n_s−1)), h_s the summed
leverages of the ΔSS projector P_Δ over stratum s and C_st = 1_sᵀ P_Δ 1_t. For the saturated
baseline C = 0 (P_Δ annihilates every offset indicator) and E_π[ΔSS] = Σ_s h_s v_s with v_s the
unbiased within-offset variance. For pure noise, E[ΔR²] = k/(N − 1) exactly, k = rank(F) − rank(B)
(``Design.floor``); see :func:`null_floor`.

**Decomposition (§3).** total = leakage(causal, log-attention), residual-stream = leakage(bidirectional,
log-attention), causal-mask = total − residual; and the observational split of one causal run,
ΔSS(a) = ΔSS(s) + ΔSS(ℓ) − 2⟨P_Δ s, P_Δ ℓ⟩ with a = s − ℓ, ℓ_i = log Z_i, in units of SST(a).

Scores are float32 pre-softmax logits with NaN where the model's mask forbids the pair; every
reduction here runs in float64.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch

BASELINES = ("saturated", "linear")


ABSOLUTES = ("query", "key", "both")


DEFAULT_FITS = ("saturated+query", "linear+query", "saturated+key", "saturated+both")


DEFAULT_WINDOWS = ("all", "early16", "early32", "early64", "late")


TARGETS = ("logit", "logattn")


SPLIT_TERMS = ("logit", "logz", "cross", "logattn")


def parse_fit(fit: str) -> tuple[str, str]:
    """``"saturated+query"`` -> ``("saturated", "query")``, validating both parts."""
    parts = fit.split("+")
    if len(parts) != 2 or parts[0] not in BASELINES or parts[1] not in ABSOLUTES:
        raise ValueError(
            f"fit must be '<baseline>+<absolute>' with baseline in {BASELINES} and absolute in "
            f"{ABSOLUTES}; got {fit!r} (e.g. 'saturated+query')"
        )
    return parts[0], parts[1]


def query_window(name: str, seq_len: int) -> tuple[int, int]:
    """Query rows ``[lo, hi)`` of a window name.

    ``"all"`` = rows 1..T−1; ``"earlyK"`` = rows 1..K−1 (queries i < K, clipped to T);
    ``"late"`` = rows T//2..T−1 (the second half, paper 2 §4's contrast to early queries);
    ``"fullW"`` = rows W..T−1−W, the rows whose sliding window of size W is full in the causal
    pass (keys i − W < j ≤ i) and in the bidirectional one (|i − j| ≤ W), so the visible-key
    count does not depend on i there (paper2.md §2, sliding window).
    Row 0 (a single key) is never measured.
    """
    if name == "all":
        return 1, seq_len
    if name == "late":
        return max(1, seq_len // 2), seq_len
    m = re.fullmatch(r"full(\d+)", name)
    if m:
        w = int(m.group(1))
        return max(1, w), max(1, seq_len - w)
    m = re.fullmatch(r"early(\d+)", name)
    if m:
        return 1, min(int(m.group(1)), seq_len)
    raise ValueError(
        f"unknown query window {name!r}; use 'all', 'late', 'early<K>' (e.g. 'early16') or "
        "'full<W>' (rows whose sliding window W is full, e.g. 'full32')"
    )


def pair_mask(
    seq_len: int,
    *,
    window: str = "all",
    allowed: np.ndarray | None = None,
    subsample: np.ndarray | None = None,
) -> np.ndarray:
    """Measured pairs: lower triangle (j ≤ i), query rows of ``window``, ∧ ``allowed`` ∧ ``subsample``.

    Args:
        seq_len: T.
        window: query window name (:func:`query_window`).
        allowed: ``(T, T)`` bool, pairs the model's own mask lets through (e.g. finite scores; a
            sliding window removes long offsets).
        subsample: ``(T, T)`` bool pair subsample (e.g. :func:`causalpos.stats.stratified_pair_mask`).

    Returns:
        ``(T, T)`` bool mask, query rows × key columns.
    """
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
    def floor(self) -> float:
        """E[ΔR²] for pure (spherical) noise: k / (N − 1). See :func:`null_floor`."""
        return self.k / (self.n_pairs - 1)

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The design's arrays as float64 tensors on ``device`` (cached)."""
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
            }
        return self._torch[key]


def _pinv_sym(m: np.ndarray) -> tuple[np.ndarray, int]:
    """Pseudo-inverse and rank of a symmetric PSD matrix (eigen-decomposition, matrix_rank's tolerance)."""
    m = (m + m.T) / 2.0
    w, v = np.linalg.eigh(m)
    tol = max(abs(w).max(initial=0.0), 1e-300) * m.shape[0] * np.finfo(np.float64).eps * 10
    keep = w > tol
    inv = (v[:, keep] / w[keep]) @ v[:, keep].T
    return inv, int(keep.sum())


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
    gx_pinv, rank_base = _pinv_sym(gx)

    # Absolute columns: the level(s) each pair belongs to.
    if absolute == "query":
        levels = [i]
        q = T
    elif absolute == "key":
        levels = [j]
        q = T
    else:
        levels = [i, T + j]
        q = 2 * T
    n_zs = np.zeros((q, T))  # Zᵀ1_s: pairs of level z in stratum s
    for lev in levels:
        np.add.at(n_zs, (lev, d), 1.0)
    gz = np.zeros((q, q))
    for a in levels:
        for b_ in levels:
            np.add.at(gz, (a, b_), 1.0)
    gzx = n_zs @ x_s.T  # (q, p): Σ_s Zᵀ1_s x_sᵀ
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
    b = gzx @ gx_pinv
    m = gz - b @ gzx.T
    m_pinv, k = _pinv_sym(m)

    if landmark:  # the within-offset null below assumes stratum-constant baseline columns
        h, c_strata = np.full(T, np.nan), np.full((T, T), np.nan)
    else:
        # Stratum-aggregated projector P_Δ = Z̃ M⁺ Z̃ᵀ (Z̃ = Z residualized on X), for the exact
        # permutation-null mean.
        w = b @ x_s  # (q, T): column s = G_ZX G_X⁺ x_s
        k_strata = n_zs - w * n_off[None, :]  # Z̃ᵀ1_s
        c_strata = k_strata.T @ m_pinv @ k_strata
        zz = sum(m_pinv[a, a] for a in levels)
        if absolute == "both":
            zz = zz + 2.0 * m_pinv[i, T + j]
        h = (
            np.bincount(d, weights=zz, minlength=T)
            - 2.0 * (w * (m_pinv @ n_zs)).sum(axis=0)
            + n_off * (w * (m_pinv @ w)).sum(axis=0)
        )
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
    token 0 puts into the data; see :mod:`causalpos.paper2.expected`). The c-vector then needs
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
            "causal pairs j <= i only — build the mask with leakage.pair_mask"
        )
    return _build_design_cached(
        np.ascontiguousarray(mask).tobytes(), mask.shape[0], baseline, absolute, bool(landmark)
    )


def null_floor(mask: np.ndarray, fit: str = "saturated+query") -> float:
    """Expected in-sample ΔR² of pure noise: k / (N − 1), k = rank(F) − rank(B), N pairs.

    Derivation: for spherical noise y, the residual of y on the intercept splits into orthogonal
    pieces; ΔSS is the squared norm of its projection on a k-dimensional subspace of the
    (N − 1)-dimensional centred space, so ΔR² = ΔSS/SST ~ Beta(k/2, (N − 1 − k)/2) with mean
    k/(N − 1). On the full triangle without row 0 (N = T(T+1)/2 − 1) k = T − 2 for query effects,
    T − 1 for key effects and 2T − 4 for both (one more null direction: β_d + γ_i + κ_j is
    unchanged by a linear trend c·(i − j − d) = 0). The spec's (T − 1)/(N − 2T + 1) is instead
    E[ΔSS]/E[SSR_F] with row 0 included (k = T − 1, N − p_F residual degrees of freedom): a ratio
    to the residual, not to the total sum of squares, and larger by ≈ 2/T.
    """
    return build_design(mask, fit).floor


def _as_tensor(x) -> tuple[torch.Tensor, bool]:
    if isinstance(x, torch.Tensor):
        return x, False
    return torch.from_numpy(np.asarray(x)), True


def _log_z(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log Z (..., T) over the finite keys of each row, finite mask), both in float64."""
    s = s.to(torch.float64)
    fin = torch.isfinite(s)
    lse = torch.logsumexp(torch.where(fin, s, -torch.inf), dim=-1)
    return lse, fin


def log_attention(scores):
    """Log-attention a_ij = s_ij − log Σ_{k allowed} exp(s_ik), in float64.

    The allowed keys of row i are the finite entries of ``scores[..., i, :]`` (the model's own mask:
    causal = j ≤ i, bidirectional = all, sliding window = the window). NaN where not allowed.

    Args:
        scores: ``(..., query, key)`` numpy array or torch tensor, NaN where masked.

    Returns:
        Same type and shape as ``scores``, float64.
    """
    s, was_numpy = _as_tensor(scores)
    lse, fin = _log_z(s)
    a = torch.where(fin, s.to(torch.float64) - lse[..., None], torch.nan)
    return a.numpy() if was_numpy else a


def _skew(pad: torch.Tensor) -> torch.Tensor:
    """Diagonals as columns without a gather: ``pad`` (M, T, 2T), zeros in columns < T and the
    map in columns ≥ T -> strided view V (M, T, T) with V[m, i, e] = map[m, i, i − (T−1−e)]
    (0 where that key is < 0). Summing V over rows and flipping the last axis gives offset sums.

    Flat index i·2T + T + i − d = i(2T+1) + 1 + e stays inside row i for every (i, e), so the
    view never reads another row or map.
    """
    m, t, _ = pad.shape
    return pad.as_strided((m, t, t), (2 * t * t, 2 * t + 1, 1), pad.storage_offset() + 1)


def _target_sums(y: torch.Tensor, w: torch.Tensor, n_pairs: int) -> dict:
    """Row-resolved partial sums of y over the pairs ``w`` ((T, T) bool), reusable by windows.

    y (..., T, T) is centred by its mean over ``w`` first: R² is invariant to it and it avoids
    cancellation in Σy² − (Σy)²/N.
    """
    T = y.shape[-1]
    lead = tuple(y.shape[:-2])
    y = y.reshape(-1, T, T).to(torch.float64)
    mean = torch.where(w, y, 0.0).sum(dim=(-2, -1)) / n_pairs
    pad = y.new_zeros(y.shape[0], T, 2 * T)
    pad[..., T:] = torch.where(w, y - mean[:, None, None], 0.0)
    pad2 = pad * pad
    return {"yz": pad[..., T:], "V": _skew(pad), "V2": _skew(pad2), "lead": lead}


def _window_sums(ts: dict, lo: int, hi: int) -> dict[str, torch.Tensor]:
    """Per-offset/query/key sums (and of squares) restricted to query rows [lo, hi)."""
    yz = ts["yz"]
    T = yz.shape[-1]
    rows = yz.new_zeros(yz.shape[0], T)
    rows[:, lo:hi] = yz[:, lo:hi].sum(dim=-1)
    off = ts["V"][:, lo:hi].sum(dim=-2).flip(-1)
    off2 = ts["V2"][:, lo:hi].sum(dim=-2).flip(-1)
    out = {"rows": rows, "cols": yz[:, lo:hi].sum(dim=-2), "off": off, "off2": off2}
    out = {k: v.reshape(ts["lead"] + (T,)) for k, v in out.items()}
    out["S"], out["Q"] = out["off"].sum(dim=-1), out["off2"].sum(dim=-1)
    return out


def _pair_sums(y: torch.Tensor, w: torch.Tensor, n_pairs: int) -> dict[str, torch.Tensor]:
    """Per-offset/query/key sums of y (..., T, T) over the pairs ``w`` for every leading index."""
    return _window_sums(_target_sums(y, w, n_pairs), 0, y.shape[-1])


def _query_sums(
    lz: torch.Tensor, w_np: np.ndarray, n_pairs: int, lo: int, hi: int
) -> dict[str, torch.Tensor]:
    """The same sums for a query-only target ℓ_i (..., T) (log Z), by (T, T) matrix products."""
    T = w_np.shape[0]
    i, j = np.nonzero(w_np)
    wsk = np.zeros((T, T))
    wsk[i, i - j] = 1.0  # [i, d]: pair (i, i − d) measured
    wf = torch.as_tensor(w_np, dtype=torch.float64, device=lz.device)
    wsk = torch.as_tensor(wsk, device=lz.device)
    n_i = wf.sum(dim=-1)
    lz = lz.to(torch.float64)
    lc = lz - ((lz * n_i).sum(dim=-1) / n_pairs)[..., None]
    lw = torch.zeros_like(lc)
    lw[..., lo:hi] = lc[..., lo:hi]
    off = lw @ wsk
    off2 = (lw * lw) @ wsk
    return {
        "rows": n_i * lw,
        "cols": lw @ wf,
        "off": off,
        "off2": off2,
        "S": off.sum(dim=-1),
        "Q": off2.sum(dim=-1),
    }


def _c_vector(sums: dict[str, torch.Tensor], design: Design) -> tuple[torch.Tensor, torch.Tensor]:
    """(c = Zᵀy − G_ZX G_X⁺ Xᵀy, u = Xᵀy) for every leading index."""
    t = design.tensors(sums["off"].device)
    if design.baseline == "saturated":
        u = sums["off"]
    else:
        u = torch.stack([sums["S"], sums["off"] @ t["offsets"]], dim=-1)
    if design.landmark:
        u = torch.cat([u, sums["cols"][..., :1]], dim=-1)
    if design.absolute == "query":
        v = sums["rows"]
    elif design.absolute == "key":
        v = sums["cols"]
    else:
        v = torch.cat([sums["rows"], sums["cols"]], dim=-1)
    return v - u @ t["b"].T, u


def _quad(c1: torch.Tensor, c2: torch.Tensor, design: Design) -> torch.Tensor:
    """⟨P_Δ y₁, P_Δ y₂⟩ = c₁ᵀ M⁺ c₂ (the ΔSS bilinear form)."""
    return ((c1 @ design.tensors(c1.device)["m_pinv"]) * c2).sum(dim=-1)


def _fit(sums: dict[str, torch.Tensor], design: Design) -> dict[str, torch.Tensor]:
    """sst, ss_base (beyond the mean), dss, null (exact E_π ΔSS), c for every leading index."""
    t = design.tensors(sums["off"].device)
    n = float(design.n_pairs)
    c, u = _c_vector(sums, design)
    s, q = sums["S"], sums["Q"]
    sst = q - s * s / n
    ss_base = ((u @ t["gx_pinv"]) * u).sum(dim=-1) - s * s / n
    dss = _quad(c, c, design)
    n_s = t["n_off"]
    off, off2 = sums["off"], sums["off2"]
    safe = torch.clamp(n_s, min=1.0)
    mu = torch.where(n_s > 0, off / safe, 0.0)
    qm = torch.where(n_s > 0, off2 / safe, 0.0)
    o = torch.where(n_s > 1, (off * off - off2) / torch.clamp(n_s * (n_s - 1.0), min=1.0), 0.0)
    null = (
        (t["h"] * qm).sum(-1)
        + (o * (t["c_diag"] - t["h"])).sum(-1)
        + ((mu @ t["c"]) * mu).sum(-1)
        - (mu * mu * t["c_diag"]).sum(-1)
    )
    return {"sst": sst, "ss_base": ss_base, "dss": dss, "null": null, "c": c}


def delta_r2(ss, sst):
    """R²-type ratio ``ss / SST`` (NaN where SST = 0: a constant target has nothing to explain).

    The one definition every consumer uses: ΔR² = ΔSS/SST (no cancellation from R²(F) − R²(B)),
    R²(B) = SS_B/SST, and the permutation-null mean in the same units. numpy arrays or torch
    tensors, broadcast together.
    """
    if isinstance(ss, torch.Tensor):
        ok = sst > 0
        return torch.where(ok, ss / torch.where(ok, sst, 1.0), torch.nan)
    ss, sst = np.asarray(ss, dtype=np.float64), np.asarray(sst, dtype=np.float64)
    ok = sst > 0
    return np.where(ok, ss / np.where(ok, sst, 1.0), np.nan)


def null_corrected(delta, null_mean):
    """Leakage reported against the null (paper2.md §2, "never raw"): ΔR² minus the mean of its
    within-offset permutation null (exact per map, :func:`_fit`'s ``null``; or Monte Carlo)."""
    return delta - null_mean


def r2_terms(f: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``r2_base``, ``r2_full``, ``delta`` (ΔR²) and ``null`` (its exact permutation-null mean) of
    one :func:`_fit` result, each by :func:`delta_r2`."""
    return {
        "r2_base": delta_r2(f["ss_base"], f["sst"]),
        "r2_full": delta_r2(f["ss_base"] + f["dss"], f["sst"]),
        "delta": delta_r2(f["dss"], f["sst"]),
        "null": delta_r2(f["null"], f["sst"]),
    }


def _allowed(finite: torch.Tensor) -> np.ndarray:
    """(T, T) lower-triangle finite pattern shared by every map of ``finite`` (..., T, T)."""
    T = finite.shape[-1]
    flat = finite.reshape(-1, T, T)
    pattern = flat[0]
    tri = torch.tril(torch.ones(T, T, dtype=torch.bool, device=finite.device))
    if not bool(((flat == pattern) | ~tri).all()):
        raise ValueError(
            "the finite (unmasked) pattern of the lower triangle differs between maps of one batch; "
            "leakage needs one pair set per call — pass maps with the same attention mask together"
        )
    return pattern.cpu().numpy() & np.tril(np.ones((T, T), dtype=bool))


def _measured_mask(
    finite: torch.Tensor, mask: np.ndarray | None, window: str, allowed: np.ndarray | None = None
) -> np.ndarray:
    """Pair mask from a finite-pattern tensor (..., T, T): lower triangle ∧ window ∧ finite ∧ mask.

    The finite pattern must be the same for every leading index (one design per call).
    """
    T = finite.shape[-1]
    if allowed is None:
        allowed = _allowed(finite)
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        bad = mask & np.tril(np.ones((T, T), dtype=bool)) & ~allowed
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(
                f"the pair mask selects pair ({i}, {j}) where the target is NaN/inf; "
                "drop those pairs from the mask or fix the target"
            )
    return pair_mask(T, window=window, allowed=allowed, subsample=mask)


@dataclass(frozen=True)
class LeakageFit:
    """Leakage of each map; every array has the maps' leading shape ``(...)``."""

    r2_base: np.ndarray  # R²(B)
    r2_full: np.ndarray  # R²(F)
    delta: np.ndarray  # ΔR² = R²(F) − R²(B) (computed as ΔSS/SST, no cancellation)
    null_mean: np.ndarray  # exact mean of ΔR² under the within-offset permutation null
    sst: np.ndarray  # total sum of squares about the pair mean
    n_pairs: int
    k: int  # extra parameters of F over B
    floor: float  # k/(N − 1): pure-noise E[ΔR²]

    @property
    def excess(self) -> np.ndarray:
        """ΔR² minus its permutation-null mean: leakage reported against the null (§2)."""
        return null_corrected(self.delta, self.null_mean)


def leakage(
    y, *, fit: str = "saturated+query", mask: np.ndarray | None = None, window: str = "all"
) -> LeakageFit:
    """Leakage ΔR² of target maps ``y`` (..., query, key) under ``fit``.

    The measured pairs are the lower triangle without row 0, restricted to ``window``, to the finite
    entries of ``y`` (identical across maps) and to ``mask`` when given.

    Args:
        y: ``(..., T, T)`` numpy array or torch tensor (logits or log-attention), NaN where masked.
        fit: ``"<baseline>+<absolute>"``, e.g. ``"saturated+query"``.
        mask: optional ``(T, T)`` bool pair subsample.
        window: query window (:func:`query_window`).

    Returns:
        :class:`LeakageFit` with numpy arrays of shape ``y.shape[:-2]``.
    """
    yt, _ = _as_tensor(y)
    if yt.ndim < 2 or yt.shape[-1] != yt.shape[-2]:
        raise ValueError(f"y must be (..., T, T) with square maps, got shape {tuple(yt.shape)}")
    w = _measured_mask(torch.isfinite(yt), mask, window)
    design = build_design(w, fit)
    sums = _pair_sums(yt, torch.as_tensor(w, device=yt.device), design.n_pairs)
    f = _fit(sums, design)
    r = r2_terms(f)
    np_ = lambda x: x.cpu().numpy()  # noqa: E731
    return LeakageFit(
        r2_base=np_(r["r2_base"]),
        r2_full=np_(r["r2_full"]),
        delta=np_(r["delta"]),
        null_mean=np_(r["null"]),
        sst=np_(f["sst"]),
        n_pairs=design.n_pairs,
        k=design.k,
        floor=design.floor,
    )


def _split_terms(s_sums: dict, l_sums: dict, design: Design, a_fit: dict) -> torch.Tensor:
    """(..., 4) split of ΔSS(a) into logit, logz, cross, logattn, in units of SST(a)."""
    c_s, _ = _c_vector(s_sums, design)
    c_l, _ = _c_vector(l_sums, design)
    terms = torch.stack(
        [
            _quad(c_s, c_s, design),
            _quad(c_l, c_l, design),
            -2.0 * _quad(c_s, c_l, design),
            a_fit["dss"],
        ],
        dim=-1,
    )
    return delta_r2(terms, a_fit["sst"][..., None])


def observational_split(
    scores, *, fit: str = "saturated+query", mask: np.ndarray | None = None, window: str = "all"
) -> dict[str, np.ndarray]:
    """Observational split of one run's log-attention leakage (paper2.md §3).

    With a = s − ℓ (ℓ_i = log Z_i) and P_Δ the projector of the extra ΔSS,
    ΔSS(a) = ΔSS(s) + ΔSS(ℓ) − 2⟨P_Δ s, P_Δ ℓ⟩ exactly. All terms are divided by SST(a), so
    ``logit + logz + cross == logattn`` (= ΔR² of the log-attention).

    Args:
        scores: ``(..., T, T)`` pre-softmax logits, NaN where masked.

    Returns:
        dict with ``logit``, ``logz``, ``cross``, ``logattn`` (each ``(...)``), and ``delta_logit``,
        the logit leakage in its own units (ΔSS(s)/SST(s)).
    """
    st, _ = _as_tensor(scores)
    st = st.to(torch.float64)
    lz, fin = _log_z(st)
    a = torch.where(fin, st - lz[..., None], torch.nan)
    w_np = _measured_mask(fin, mask, window)
    design = build_design(w_np, fit)
    w = torch.as_tensor(w_np, device=st.device)
    s_sums = _pair_sums(st, w, design.n_pairs)
    a_sums = _pair_sums(a, w, design.n_pairs)
    l_sums = _pair_sums(lz[..., :, None].expand(st.shape), w, design.n_pairs)
    a_fit = _fit(a_sums, design)
    s_fit = _fit(s_sums, design)
    terms = _split_terms(s_sums, l_sums, design, a_fit).cpu().numpy()
    out = {name: terms[..., n] for n, name in enumerate(SPLIT_TERMS)}
    out["delta_logit"] = delta_r2(s_fit["dss"], s_fit["sst"]).cpu().numpy()
    return out


def decompose(total: np.ndarray, residual: np.ndarray) -> dict[str, np.ndarray]:
    """Paper 2 Eq. 5: causal-mask = total − residual-stream; shares = component / total.

    Args:
        total: leakage of the causal run (log-attention), any shape (already aggregated: shares of
            means, not means of per-prompt shares, which are unstable when a prompt's total is ~0).
        residual: leakage of the bidirectional run, same shape.
    """
    total = np.asarray(total, dtype=np.float64)
    residual = np.asarray(residual, dtype=np.float64)
    mask_part = total - residual
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "total": total,
            "residual": residual,
            "causal_mask": mask_part,
            "share_residual": residual / total,
            "share_causal_mask": mask_part / total,
        }
