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

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp
import torch
import xarray as xr

from causalpos import stats

__all__ = [
    "BASELINES",
    "ABSOLUTES",
    "DEFAULT_FITS",
    "DEFAULT_WINDOWS",
    "TARGETS",
    "SPLIT_TERMS",
    "Design",
    "LeakageFit",
    "parse_fit",
    "query_window",
    "pair_mask",
    "build_design",
    "null_floor",
    "log_attention",
    "leakage",
    "observational_split",
    "decompose",
    "permutation_test",
    "PermutationResult",
    "DEFAULT_CONDITIONS",
    "LeakageReducer",
    "leakage_summary",
    "tables",
    "ROPE_CONDITIONS",
    "PAPER2_TABLES",
    "pool_small_strata",
    "leakage_stage",
    "paper2_tables",
    "paper2_markdown",
    "paper2_tables_stage",
]

BASELINES = ("saturated", "linear")
ABSOLUTES = ("query", "key", "both")
DEFAULT_FITS = ("saturated+query", "linear+query", "saturated+key", "saturated+both")
DEFAULT_WINDOWS = ("all", "early16", "early32", "early64", "late")
TARGETS = ("logit", "logattn")
SPLIT_TERMS = ("logit", "logz", "cross", "logattn")


# --------------------------------------------------------------------------------------------
# Masks and designs
# --------------------------------------------------------------------------------------------

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
    ``"late"`` = rows T//2..T−1 (the second half, paper 2 §4's contrast to early queries).
    Row 0 (a single key) is never measured.
    """
    if name == "all":
        return 1, seq_len
    if name == "late":
        return max(1, seq_len // 2), seq_len
    m = re.fullmatch(r"early(\d+)", name)
    if m:
        return 1, min(int(m.group(1)), seq_len)
    raise ValueError(f"unknown query window {name!r}; use 'all', 'late' or 'early<K>' (e.g. 'early16')")


def pair_mask(seq_len: int, *, window: str = "all", allowed: np.ndarray | None = None,
              subsample: np.ndarray | None = None) -> np.ndarray:
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
                raise ValueError(f"{name} mask must have shape ({seq_len}, {seq_len}), got {extra.shape}")
            mask &= extra
    return mask


@dataclass(eq=False)
class Design:
    """Pair-count structure of one (mask, fit): everything the solver needs that is data-free.

    Shapes: p = T (saturated) or 2 (linear) baseline columns; q = T (query or key) or 2T (both)
    absolute columns; strata = offsets 0..T−1.
    """

    mask: np.ndarray        # (T, T) bool measured pairs
    baseline: str
    absolute: str
    n_pairs: int            # N
    rank_base: int          # rank(B), including the intercept
    k: int                  # rank(F) − rank(B): extra parameters the absolute effects add
    n_offset: np.ndarray    # (T,) pairs per offset stratum
    gx_pinv: np.ndarray     # (p, p) G_X⁺
    b: np.ndarray           # (q, p) G_ZX G_X⁺
    m_pinv: np.ndarray      # (q, q) M⁺
    h: np.ndarray           # (T,) Σ over stratum s of the leverages of P_Δ
    c_strata: np.ndarray    # (T, T) 1_sᵀ P_Δ 1_t
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
            t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64, device=device)  # noqa: E731
            self._torch[key] = {
                "gx_pinv": t(self.gx_pinv), "b": t(self.b), "m_pinv": t(self.m_pinv), "h": t(self.h),
                "c": t(self.c_strata), "c_diag": t(np.diag(self.c_strata)), "n_off": t(self.n_offset),
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
def _build_design_cached(mask_bytes: bytes, seq_len: int, baseline: str, absolute: str) -> Design:
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
        x_s = np.eye(T)                                   # (p, T)
    else:
        gx = np.array([[n, (n_off * offsets).sum()], [(n_off * offsets).sum(), (n_off * offsets**2).sum()]])
        x_s = np.stack([np.ones(T), offsets])             # (2, T)
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
    n_zs = np.zeros((q, T))                               # Zᵀ1_s: pairs of level z in stratum s
    for lev in levels:
        np.add.at(n_zs, (lev, d), 1.0)
    gz = np.zeros((q, q))
    for a in levels:
        for b_ in levels:
            np.add.at(gz, (a, b_), 1.0)
    gzx = n_zs @ x_s.T                                    # (q, p): Σ_s Zᵀ1_s x_sᵀ
    b = gzx @ gx_pinv
    m = gz - b @ gzx.T
    m_pinv, k = _pinv_sym(m)

    # Stratum-aggregated projector P_Δ = Z̃ M⁺ Z̃ᵀ (Z̃ = Z residualized on X), for the exact
    # permutation-null mean.
    w = b @ x_s                                           # (q, T): column s = G_ZX G_X⁺ x_s
    k_strata = n_zs - w * n_off[None, :]                  # Z̃ᵀ1_s
    c_strata = k_strata.T @ m_pinv @ k_strata
    zz = sum(m_pinv[a, a] for a in levels)
    if absolute == "both":
        zz = zz + 2.0 * m_pinv[i, T + j]
    h = (np.bincount(d, weights=zz, minlength=T)
         - 2.0 * (w * (m_pinv @ n_zs)).sum(axis=0)
         + n_off * (w * (m_pinv @ w)).sum(axis=0))
    return Design(mask=mask, baseline=baseline, absolute=absolute, n_pairs=int(n), rank_base=rank_base,
                  k=k, n_offset=n_off, gx_pinv=gx_pinv, b=b, m_pinv=m_pinv, h=h, c_strata=c_strata)


def build_design(mask: np.ndarray, fit: str = "saturated+query") -> Design:
    """Data-free structure of the fit ``fit`` on the pairs selected by ``mask`` ((T, T) bool, cached).

    ``mask`` must lie in the lower triangle (j ≤ i); build it with :func:`pair_mask`.
    """
    baseline, absolute = parse_fit(fit)
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2 or mask.shape[0] != mask.shape[1]:
        raise ValueError(f"pair mask must be square (T, T), got shape {mask.shape}")
    if np.triu(mask, 1).any():
        raise ValueError("pair mask selects pairs above the diagonal (j > i); leakage is defined on "
                         "causal pairs j <= i only — build the mask with leakage.pair_mask")
    return _build_design_cached(np.ascontiguousarray(mask).tobytes(), mask.shape[0], baseline, absolute)


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


# --------------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# The solver on sufficient statistics
# --------------------------------------------------------------------------------------------

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


def _query_sums(lz: torch.Tensor, w_np: np.ndarray, n_pairs: int, lo: int, hi: int) -> dict[str, torch.Tensor]:
    """The same sums for a query-only target ℓ_i (..., T) (log Z), by (T, T) matrix products."""
    T = w_np.shape[0]
    i, j = np.nonzero(w_np)
    wsk = np.zeros((T, T))
    wsk[i, i - j] = 1.0                                           # [i, d]: pair (i, i − d) measured
    wf = torch.as_tensor(w_np, dtype=torch.float64, device=lz.device)
    wsk = torch.as_tensor(wsk, device=lz.device)
    n_i = wf.sum(dim=-1)
    lz = lz.to(torch.float64)
    lc = lz - ((lz * n_i).sum(dim=-1) / n_pairs)[..., None]
    lw = torch.zeros_like(lc)
    lw[..., lo:hi] = lc[..., lo:hi]
    off = lw @ wsk
    off2 = (lw * lw) @ wsk
    return {"rows": n_i * lw, "cols": lw @ wf, "off": off, "off2": off2,
            "S": off.sum(dim=-1), "Q": off2.sum(dim=-1)}


def _c_vector(sums: dict[str, torch.Tensor], design: Design) -> tuple[torch.Tensor, torch.Tensor]:
    """(c = Zᵀy − G_ZX G_X⁺ Xᵀy, u = Xᵀy) for every leading index."""
    t = design.tensors(sums["off"].device)
    if design.baseline == "saturated":
        u = sums["off"]
    else:
        u = torch.stack([sums["S"], sums["off"] @ t["offsets"]], dim=-1)
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
    null = ((t["h"] * qm).sum(-1) + (o * (t["c_diag"] - t["h"])).sum(-1)
            + ((mu @ t["c"]) * mu).sum(-1) - (mu * mu * t["c_diag"]).sum(-1))
    return {"sst": sst, "ss_base": ss_base, "dss": dss, "null": null, "c": c}


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), torch.nan)


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


def _measured_mask(finite: torch.Tensor, mask: np.ndarray | None, window: str,
                   allowed: np.ndarray | None = None) -> np.ndarray:
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
            raise ValueError(f"the pair mask selects pair ({i}, {j}) where the target is NaN/inf; "
                             "drop those pairs from the mask or fix the target")
    return pair_mask(T, window=window, allowed=allowed, subsample=mask)


@dataclass(frozen=True)
class LeakageFit:
    """Leakage of each map; every array has the maps' leading shape ``(...)``."""

    r2_base: np.ndarray     # R²(B)
    r2_full: np.ndarray     # R²(F)
    delta: np.ndarray       # ΔR² = R²(F) − R²(B) (computed as ΔSS/SST, no cancellation)
    null_mean: np.ndarray   # exact mean of ΔR² under the within-offset permutation null
    sst: np.ndarray         # total sum of squares about the pair mean
    n_pairs: int
    k: int                  # extra parameters of F over B
    floor: float            # k/(N − 1): pure-noise E[ΔR²]

    @property
    def excess(self) -> np.ndarray:
        """ΔR² minus its permutation-null mean: leakage reported against the null (§2)."""
        return self.delta - self.null_mean


def leakage(y, *, fit: str = "saturated+query", mask: np.ndarray | None = None,
            window: str = "all") -> LeakageFit:
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
    np_ = lambda x: x.cpu().numpy()  # noqa: E731
    return LeakageFit(
        r2_base=np_(_ratio(f["ss_base"], f["sst"])),
        r2_full=np_(_ratio(f["ss_base"] + f["dss"], f["sst"])),
        delta=np_(_ratio(f["dss"], f["sst"])),
        null_mean=np_(_ratio(f["null"], f["sst"])),
        sst=np_(f["sst"]), n_pairs=design.n_pairs, k=design.k, floor=design.floor,
    )


def _split_terms(s_sums: dict, l_sums: dict, design: Design, a_fit: dict) -> torch.Tensor:
    """(..., 4) split of ΔSS(a) into logit, logz, cross, logattn, in units of SST(a)."""
    c_s, _ = _c_vector(s_sums, design)
    c_l, _ = _c_vector(l_sums, design)
    terms = torch.stack([_quad(c_s, c_s, design), _quad(c_l, c_l, design),
                         -2.0 * _quad(c_s, c_l, design), a_fit["dss"]], dim=-1)
    return _ratio(terms, a_fit["sst"][..., None])


def observational_split(scores, *, fit: str = "saturated+query", mask: np.ndarray | None = None,
                        window: str = "all") -> dict[str, np.ndarray]:
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
    out["delta_logit"] = _ratio(s_fit["dss"], s_fit["sst"]).cpu().numpy()
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
        return {"total": total, "residual": residual, "causal_mask": mask_part,
                "share_residual": residual / total, "share_causal_mask": mask_part / total}


# --------------------------------------------------------------------------------------------
# Monte-Carlo permutation test (on prompt-mean maps)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PermutationResult:
    observed: np.ndarray     # (...) ΔR²
    null_mean: np.ndarray    # (...) mean of the R null draws
    p: np.ndarray            # (...) (#{null ≥ obs} + 1)/(R + 1)
    n_perm: int


def permutation_test(maps, *, fit: str = "saturated+query", mask: np.ndarray | None = None,
                     window: str = "all", n_perm: int = 1000, seed: int = 0,
                     chunk: int = 16) -> PermutationResult:
    """Within-offset permutation test of ΔR² for each map (paper2.md §5).

    Query labels are permuted within offset strata (a pair moves along its own diagonal), which
    keeps the offset profile — and so R²(B) and SST — exactly and destroys absolute structure. The
    same R permutations are applied to every map (each map's null is exact; maps share draws).

    Args:
        maps: ``(..., T, T)`` target maps (e.g. prompt-mean logits or log-attention per layer, head).
        n_perm: R (default 1000).
        seed: permutation seed.
        chunk: permutations per sparse product (memory ≈ chunk × q × maps floats).

    Returns:
        :class:`PermutationResult` with arrays of the maps' leading shape.
    """
    yt, _ = _as_tensor(maps)
    lead = tuple(yt.shape[:-2])
    T = yt.shape[-1]
    w = _measured_mask(torch.isfinite(yt), mask, window)
    design = build_design(w, fit)
    i, j = np.nonzero(w)
    d = i - j
    n = i.size
    y = yt.to(torch.float64).cpu().numpy().reshape(-1, T, T)[:, i, j]       # (M, N)
    y = y - y.mean(axis=1, keepdims=True)
    levels = {"query": [i], "key": [j], "both": [i, T + j]}[design.absolute]
    q = design.m_pinv.shape[0]
    # Baseline sums Xᵀy are invariant under within-offset permutations.
    x_off = sp.csr_matrix((np.ones(n), (np.arange(n), d)), shape=(n, T))
    off = (x_off.T @ y.T).T                                               # (M, T)
    if design.baseline == "saturated":
        u = off
    else:
        u = np.stack([off.sum(1), off @ np.arange(T)], axis=1)
    base_c = u @ design.b.T                                               # (M, q)
    sst = (y * y).sum(1)

    def dss_of(v: np.ndarray) -> np.ndarray:                              # v (..., M, q)
        c = v - base_c
        return ((c @ design.m_pinv) * c).sum(-1)       # a GEMM, not an einsum loop

    z_rows = np.concatenate(levels)
    z = sp.csr_matrix((np.ones(z_rows.size), (z_rows, np.tile(np.arange(n), len(levels)))), shape=(q, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        observed = dss_of((z @ y.T).T) / sst
    count = np.zeros_like(observed)
    total = np.zeros_like(observed)
    for sigma in stats.within_strata_permutations(d, n_perm, seed, chunk):
        c = sigma.shape[0]
        # Row (r, level of position m) collects the value moved into position m: y[sigma[r, m]].
        rows = np.concatenate([(np.arange(c)[:, None] * q + lev[None, :]).ravel() for lev in levels])
        cols = np.concatenate([sigma.ravel()] * len(levels))
        s_mat = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(c * q, n))
        v = (s_mat @ y.T).reshape(c, q, -1).transpose(0, 2, 1)            # (c, M, q)
        with np.errstate(divide="ignore", invalid="ignore"):
            null = dss_of(v) / sst
        count += (null >= observed[None]).sum(0)
        total += null.sum(0)
    p = np.where(np.isnan(observed), np.nan, (count + 1.0) / (n_perm + 1.0))
    return PermutationResult(observed=observed.reshape(lead), null_mean=(total / n_perm).reshape(lead),
                             p=p.reshape(lead), n_perm=n_perm)


# --------------------------------------------------------------------------------------------
# Reducer (extraction-time)
# --------------------------------------------------------------------------------------------

class LeakageReducer:
    """Per-(sequence, layer, head) leakage during extraction; implements capture's Reducer protocol.

    For every map it stores, per query window × fit × target (``logit``, ``logattn``): R²(B),
    R²(F), ΔR², the exact permutation-null mean of ΔR² and SST; the observational split of the
    log-attention ΔSS; and, optionally, float64 sums of the target maps over sequences (for the
    prompt-mean-map permutation test).

    Result variables (all prefixed ``leak_`` so they merge into the score store without clashes):

    - ``leak_r2_base``, ``leak_r2_full``, ``leak_delta``, ``leak_null``, ``leak_sst``:
      (sequence, layer, head, leak_window, leak_fit, leak_target) float64 (sst has no leak_fit);
    - ``leak_split``: (sequence, layer, head, leak_window, leak_fit, leak_term) float64, terms
      logit/logz/cross/logattn in units of SST(log-attention);
    - ``leak_floor`` (layer, leak_window, leak_fit) k/(N−1); ``leak_n_pairs`` (layer, leak_window);
    - ``leak_map_sum`` (leak_target, layer, head, query, key) float64 and ``leak_map_count`` ().

    Args:
        fits: fit names (``"<baseline>+<absolute>"``).
        windows: query windows (:func:`query_window`).
        pair_subsample: if set, at most this many pairs per offset (stratified, seeded), the same
            pairs for every map.
        seed: seed of the pair subsample.
        mean_maps: accumulate ``leak_map_sum`` (memory: 2 × layers × heads × T² float64).

    Cost: per (layer, batch) a few passes over the (batch, head, T, T) scores in float64 plus one
    T-sized quadratic form per map, window, fit and target; designs (pinv of ≤ 2T × 2T count
    matrices) are built once per pair mask and cached. ``*+both`` fits are the most expensive.
    """

    name = "leakage"
    _PER_SEQ = ("leak_r2_base", "leak_r2_full", "leak_delta", "leak_null", "leak_sst", "leak_split")

    def __init__(self, *, fits: Sequence[str] = DEFAULT_FITS, windows: Sequence[str] = DEFAULT_WINDOWS,
                 pair_subsample: int | None = None, seed: int = 0, mean_maps: bool = True) -> None:
        for f in fits:
            parse_fit(f)
        for wname in windows:
            query_window(wname, 64)
        if not fits or not windows:
            raise ValueError("LeakageReducer needs at least one fit and one window")
        self.fits = tuple(fits)
        self.windows = tuple(windows)
        self.pair_subsample = pair_subsample
        self.seed = seed
        self.mean_maps = mean_maps
        self._rows: dict[int, dict[int, dict[str, np.ndarray]]] = {}   # layer -> seq -> arrays
        self._meta: dict[int, tuple[np.ndarray, np.ndarray]] = {}     # layer -> (floor, n_pairs)
        self._map_sum: dict[int, torch.Tensor] = {}
        self._count: dict[int, int] = {}
        self._shape: tuple[int, int] | None = None                    # (heads, T)

    def _base_mask(self, finite: torch.Tensor) -> np.ndarray:
        """Measured pairs over all query rows (windows restrict rows of this mask)."""
        T = finite.shape[-1]
        sub = None
        if self.pair_subsample is not None:
            sub = stats.stratified_pair_mask(T, self.pair_subsample, self.seed)
        allowed = _allowed(finite)
        if sub is not None:
            sub = sub & allowed      # a sliding window may forbid sampled pairs: measure what exists
        return _measured_mask(finite, sub, "all", allowed)

    @torch.no_grad()
    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        """Add one layer of one batch: ``scores`` (batch, head, query, key) float32, NaN where masked."""
        if scores.ndim != 4 or scores.shape[-1] != scores.shape[-2]:
            raise ValueError(f"scores must be (batch, head, T, T), got {tuple(scores.shape)}")
        seq_ids = np.asarray(seq_ids).astype(np.int64)
        if seq_ids.shape != (scores.shape[0],):
            raise ValueError(f"seq_ids must have one id per batch row ({scores.shape[0]}), got {seq_ids.shape}")
        shape = (scores.shape[1], scores.shape[-1])
        if self._shape is None:
            self._shape = shape
        elif shape != self._shape:
            raise ValueError(f"scores changed (heads, T) from {self._shape} to {shape} within one reducer")
        layer = int(layer)
        seen = self._rows.setdefault(layer, {})
        dup = [int(s) for s in seq_ids if int(s) in seen]
        if dup:
            raise ValueError(f"sequence ids {dup[:5]} already added for layer {layer}")

        s = scores.to(torch.float64)
        lz, fin = _log_z(s)
        a = torch.where(fin, s - lz[..., None], torch.nan)
        nw, nf = len(self.windows), len(self.fits)
        lead = tuple(s.shape[:2])
        out = {k: torch.full(lead + (nw, nf, 2), torch.nan, dtype=torch.float64, device=s.device)
               for k in ("leak_r2_base", "leak_r2_full", "leak_delta", "leak_null")}
        out["leak_sst"] = torch.full(lead + (nw, 2), torch.nan, dtype=torch.float64, device=s.device)
        out["leak_split"] = torch.full(lead + (nw, nf, 4), torch.nan, dtype=torch.float64, device=s.device)
        floors = np.full((nw, nf), np.nan)
        n_pairs = np.zeros(nw, dtype=np.int64)
        base_np = self._base_mask(fin)
        n_base = int(base_np.sum())
        base = torch.as_tensor(base_np, device=s.device)
        # Row-resolved sums once per target; each query window then only sums a row range.
        tsums = {"logit": _target_sums(s, base, n_base), "logattn": _target_sums(a, base, n_base)}
        T = s.shape[-1]
        for wi, wname in enumerate(self.windows):
            lo, hi = query_window(wname, T)
            w_np = base_np & ((np.arange(T) >= lo) & (np.arange(T) < hi))[:, None]
            n = int(w_np.sum())
            n_pairs[wi] = n
            if n < 2:
                continue            # too few pairs in this window (e.g. a short sequence): NaN
            sums = {t: _window_sums(tsums[t], lo, hi) for t in TARGETS}
            l_sums = _query_sums(lz, base_np, n_base, lo, hi)
            for fi, fit in enumerate(self.fits):
                design = build_design(w_np, fit)
                floors[wi, fi] = design.floor
                fits = {}
                for ti, target in enumerate(TARGETS):
                    f = fits[target] = _fit(sums[target], design)
                    out["leak_r2_base"][..., wi, fi, ti] = _ratio(f["ss_base"], f["sst"])
                    out["leak_r2_full"][..., wi, fi, ti] = _ratio(f["ss_base"] + f["dss"], f["sst"])
                    out["leak_delta"][..., wi, fi, ti] = _ratio(f["dss"], f["sst"])
                    out["leak_null"][..., wi, fi, ti] = _ratio(f["null"], f["sst"])
                    out["leak_sst"][..., wi, ti] = f["sst"]
                out["leak_split"][..., wi, fi, :] = _split_terms(sums["logit"], l_sums, design, fits["logattn"])
        if layer in self._meta:
            old_f, old_n = self._meta[layer]
            if not (np.array_equal(old_n, n_pairs)):
                raise ValueError(f"layer {layer}: the measured pair set changed between batches "
                                 f"({old_n.tolist()} vs {n_pairs.tolist()} pairs per window)")
        self._meta[layer] = (floors, n_pairs)
        host = {k: v.cpu().numpy() for k, v in out.items()}
        for b, sid in enumerate(seq_ids):
            seen[int(sid)] = {k: v[b] for k, v in host.items()}
        if self.mean_maps:
            batch_sum = torch.stack([s.sum(0), a.sum(0)])          # (target, head, T, T)
            if layer in self._map_sum:
                self._map_sum[layer] += batch_sum
            else:
                self._map_sum[layer] = batch_sum.clone()
            self._count[layer] = self._count.get(layer, 0) + len(seq_ids)

    def result(self) -> xr.Dataset:
        """This shard's contribution (see the class docstring for the variables)."""
        if not self._rows or self._shape is None:
            raise ValueError("LeakageReducer.result(): no scores were added (update was never called)")
        layers = sorted(self._rows)
        seqs = sorted(self._rows[layers[0]])
        for lay in layers:
            if sorted(self._rows[lay]) != seqs:
                raise ValueError(f"layer {lay} has a different set of sequences than layer {layers[0]}; "
                                 "every sequence must be added for every layer")
        n_heads, T = self._shape
        dims_t = ("sequence", "layer", "head", "leak_window", "leak_fit", "leak_target")
        data = {}
        for k in self._PER_SEQ:
            arr = np.stack([np.stack([self._rows[lay][sid][k] for lay in layers]) for sid in seqs])
            if k == "leak_sst":
                dims = ("sequence", "layer", "head", "leak_window", "leak_target")
            elif k == "leak_split":
                dims = ("sequence", "layer", "head", "leak_window", "leak_fit", "leak_term")
            else:
                dims = dims_t
            data[k] = (dims, arr)
        data["leak_floor"] = (("layer", "leak_window", "leak_fit"), np.stack([self._meta[l][0] for l in layers]))
        data["leak_n_pairs"] = (("layer", "leak_window"), np.stack([self._meta[l][1] for l in layers]))
        if self.mean_maps:
            data["leak_map_sum"] = (("leak_target", "layer", "head", "query", "key"),
                                    torch.stack([self._map_sum[l] for l in layers], dim=1).cpu().numpy())
            counts = {self._count[l] for l in layers}
            if len(counts) != 1:
                raise ValueError(f"layers were summed over different numbers of sequences: {sorted(counts)}")
            data["leak_map_count"] = ((), np.int64(counts.pop()))
        ds = xr.Dataset(
            data,
            coords={"sequence": np.asarray(seqs, dtype=np.int64), "layer": np.asarray(layers),
                    "head": np.arange(n_heads), "leak_window": list(self.windows),
                    "leak_fit": list(self.fits), "leak_target": list(TARGETS), "leak_term": list(SPLIT_TERMS),
                    "query": np.arange(T), "key": np.arange(T)},
            attrs={"leak_fits": list(self.fits), "leak_windows": list(self.windows),
                   "leak_pair_subsample": -1 if self.pair_subsample is None else int(self.pair_subsample),
                   "leak_seed": int(self.seed),
                   "leak_note": "pairs 0<=j<=i<T, row 0 excluded; logattn = s - logsumexp over the "
                                "model's own allowed keys (float64); leak_null = exact within-offset "
                                "permutation mean of delta"},
        )
        # Also on a variable: stage-level merges may drop dataset attributes.
        ds["leak_delta"].attrs.update({k: v for k, v in ds.attrs.items() if k != "leak_note"})
        return ds

    @classmethod
    def merge(cls, parts: Sequence[xr.Dataset]) -> xr.Dataset:
        """Exact merge of shard results: per-sequence arrays concatenated (sorted by id), map sums added."""
        parts = list(parts)
        if not parts:
            raise ValueError("LeakageReducer.merge needs at least one shard result")
        ids = np.concatenate([p["sequence"].values for p in parts])
        if np.unique(ids).size != ids.size:
            raise ValueError("LeakageReducer.merge: the shards share sequence ids; each sequence must "
                             "be in exactly one shard")
        first = parts[0]
        for p in parts[1:]:
            for k in ("leak_floor", "leak_n_pairs"):
                if not np.array_equal(p[k].values, first[k].values, equal_nan=True):
                    raise ValueError(f"LeakageReducer.merge: shards disagree on {k} (different T, mask, "
                                     "windows or fits); rerun them with one configuration")
        per_seq = [k for k in cls._PER_SEQ if k in first]
        merged = xr.concat([p[per_seq] for p in parts], dim="sequence").sortby("sequence")
        out = merged.assign(leak_floor=first["leak_floor"], leak_n_pairs=first["leak_n_pairs"])
        if "leak_map_sum" in first:
            out["leak_map_sum"] = sum((p["leak_map_sum"] for p in parts[1:]), first["leak_map_sum"])
            out["leak_map_count"] = sum((p["leak_map_count"] for p in parts[1:]), first["leak_map_count"])
        out.attrs = dict(first.attrs)
        return out


# --------------------------------------------------------------------------------------------
# Stage: per (model, dataset) summary over variants
# --------------------------------------------------------------------------------------------

DEFAULT_CONDITIONS: dict[str, tuple[str, str]] = {
    "rope": ("causal", "bidirectional"),
    "identity_rope": ("identity_rope", "identity_rope_bidirectional"),
    "scrambled_rope": ("scrambled_rope", "scrambled_rope_bidirectional"),
}
STAT = ("estimate", "lo", "hi")


def _default_bos(variants: Iterable[str]) -> dict[str, tuple[str, str, str]]:
    """bos_replace_* variants -> (intervention, baseline, target).

    A bidirectional intervention (name ending in ``_bidirectional``) is compared with the
    ``bidirectional`` run on log-attention (the residual-stream component of §3 itself); a causal
    one with the ``causal`` run on logits (the observational residual-stream component: absolute
    position that reached q, k). Decision: the spec names C_res without saying which runs exist.
    """
    out = {}
    for v in variants:
        if v.startswith("bos_replace_"):
            name = v[len("bos_replace_"):]
            if v.endswith("_bidirectional"):
                out[name] = (v, "bidirectional", "logattn")
            else:
                out[name] = (v, "causal", "logit")
    return out


def _ci(samples: np.ndarray, estimate: np.ndarray, level: float) -> np.ndarray:
    lo, hi = stats.percentile_ci(samples, level)
    return np.stack([estimate, lo, hi], axis=-1)


def leakage_summary(stores: Mapping[str, xr.Dataset], *, fit: str = "saturated+query", window: str = "all",
                    conditions: Mapping[str, tuple[str, str]] | None = None,
                    bos: Mapping[str, tuple[str, str, str]] | None = None,
                    bos_windows: Sequence[str] = ("early16", "early32", "early64", "late"),
                    floor_correct: bool = True, n_boot: int = 2000, n_perm: int = 1000,
                    level: float = 0.95, alpha: float = 0.05, seed: int = 0,
                    strata: np.ndarray | None = None, taus: Sequence[float] = (0.3, 0.5, 0.8),
                    perm_chunk: int = 16, perm_variants: Sequence[str] | None = None) -> xr.Dataset:
    """Paper-2 leakage stage for one (model, dataset): per-head/layer/model leakage with CIs,
    permutation p and BH q per head, decomposition per condition, observational split per causal
    run, BOS effects, sink heads.

    Output variables (``stat`` = estimate, lo, hi): ``leakage_head`` (variant, target, layer, head,
    stat), ``leakage_layer``, ``leakage_model``; ``leakage_raw`` / ``null_floor`` (prompt means of
    ΔR² and of its exact permutation-null mean); ``leakage_mean_map``, ``perm_null_mean``,
    ``p_value``, ``q_value`` (prompt-mean maps), ``fraction_significant`` (variant, target);
    ``decomposition`` (condition, component, stat) and ``decomposition_layer``;
    ``observational_split`` (causal_variant, obs_term, stat); ``bos_effect``, ``bos_c_res``,
    ``bos_c_res_baseline`` (intervention, bos_window, stat); ``sink_attention`` (variant, layer,
    head) and ``sink_head`` (tau, variant, layer, head).

    Args:
        stores: variant name -> merged score store holding :class:`LeakageReducer` outputs
            (``leak_*``) and optionally ``sink_attention`` (sequence, layer, head). All stores must
            cover the same sequence ids (prompts are resampled jointly across variants).
        fit, window: which fit and query window the headline numbers use.
        conditions: condition -> (causal variant, bidirectional variant); default
            :data:`DEFAULT_CONDITIONS`, keeping those whose variants are in ``stores``.
        bos: intervention -> (variant, baseline variant, target); default from ``bos_replace_*``
            names (:func:`_default_bos`).
        floor_correct: use ΔR² − (exact permutation-null mean) per prompt ("never raw", §2).
        n_boot, level: bootstrap over prompts (percentile CI).
        n_perm: within-offset permutations for the per-head test on prompt-mean maps (0 = skip).
        strata: optional per-sequence source labels (stratified bootstrap), aligned with the
            stores' sorted sequence ids.
        taus: sink-head thresholds on mean attention to key 0.
        perm_variants: variants whose heads get the permutation test (None = every variant);
            the others keep NaN p / q values. The test costs R passes over every head's map, so
            a CPU run may test the decomposition's two runs only.

    Returns:
        xr.Dataset; ``stat`` = (estimate, lo, hi). See :func:`tables` for the flat views.
    """
    parse_fit(fit)
    leak_vars = {v: ds for v, ds in stores.items() if "leak_delta" in ds}
    if not leak_vars:
        raise ValueError("leakage_summary: no store holds leak_delta; run extraction with LeakageReducer")
    seqs = None
    for v, ds in leak_vars.items():
        if fit not in ds["leak_fit"].values or window not in ds["leak_window"].values:
            raise ValueError(f"variant {v!r}: fit {fit!r} / window {window!r} not in the store "
                             f"(fits {list(ds['leak_fit'].values)}, windows {list(ds['leak_window'].values)})")
        s = np.sort(ds["sequence"].values)
        if seqs is None:
            seqs = s
        elif not np.array_equal(s, seqs):
            raise ValueError(f"variant {v!r} covers different sequence ids than the others; the bootstrap "
                             "resamples prompts jointly across variants, so run every variant on the same prompts")
    counts = stats.bootstrap_counts(seqs.size, n_boot, seed, strata)
    variants = list(leak_vars)
    first = leak_vars[variants[0]]
    layers, heads = first["layer"].values, first["head"].values

    def per_seq(v: str, target: str, win: str = window) -> np.ndarray:
        ds = leak_vars[v].sortby("sequence").sel(leak_fit=fit, leak_window=win, leak_target=target)
        x = ds["leak_delta"].values
        return x - ds["leak_null"].values if floor_correct else x     # (seq, layer, head)

    nv, nl, nh = len(variants), len(layers), len(heads)
    head_ci = np.full((nv, 2, nl, nh, 3), np.nan)
    layer_ci = np.full((nv, 2, nl, 3), np.nan)
    model_ci = np.full((nv, 2, 3), np.nan)
    raw = np.full((nv, 2, nl, nh), np.nan)
    floor = np.full((nv, 2, nl, nh), np.nan)
    p_val = np.full((nv, 2, nl, nh), np.nan)
    mc_null = np.full((nv, 2, nl, nh), np.nan)
    mean_map = np.full((nv, 2, nl, nh), np.nan)
    for vi, v in enumerate(variants):
        ds = leak_vars[v].sortby("sequence").sel(leak_fit=fit, leak_window=window)
        for ti, target in enumerate(TARGETS):
            x = per_seq(v, target)
            head_ci[vi, ti] = _ci(stats.bootstrap_means(x, counts), x.mean(0), level)
            xl = x.mean(2)
            layer_ci[vi, ti] = _ci(stats.bootstrap_means(xl, counts), xl.mean(0), level)
            xm = x.mean((1, 2))
            model_ci[vi, ti] = _ci(stats.bootstrap_means(xm, counts), xm.mean(0), level)
            raw[vi, ti] = ds["leak_delta"].sel(leak_target=target).values.mean(0)
            floor[vi, ti] = ds["leak_null"].sel(leak_target=target).values.mean(0)
            if n_perm > 0 and "leak_map_sum" in ds and (perm_variants is None or v in perm_variants):
                maps = ds["leak_map_sum"].sel(leak_target=target).values / float(ds["leak_map_count"])
                res = permutation_test(maps, fit=fit, window=window, n_perm=n_perm, seed=seed,
                                       chunk=perm_chunk)
                p_val[vi, ti], mc_null[vi, ti], mean_map[vi, ti] = res.p, res.null_mean, res.observed
    q_val = np.full_like(p_val, np.nan)
    frac = np.full((nv, 2), np.nan)
    for vi in range(nv):
        for ti in range(2):
            if np.isfinite(p_val[vi, ti]).any():
                # BH across (layer, head) within one model, per variant and target (§5).
                q_val[vi, ti] = stats.benjamini_hochberg(p_val[vi, ti])
                frac[vi, ti] = stats.fraction_significant(q_val[vi, ti], alpha)

    out = xr.Dataset(
        {
            "leakage_head": (("variant", "target", "layer", "head", "stat"), head_ci),
            "leakage_layer": (("variant", "target", "layer", "stat"), layer_ci),
            "leakage_model": (("variant", "target", "stat"), model_ci),
            "leakage_raw": (("variant", "target", "layer", "head"), raw),
            "null_floor": (("variant", "target", "layer", "head"), floor),
            "p_value": (("variant", "target", "layer", "head"), p_val),
            "q_value": (("variant", "target", "layer", "head"), q_val),
            "perm_null_mean": (("variant", "target", "layer", "head"), mc_null),
            "leakage_mean_map": (("variant", "target", "layer", "head"), mean_map),
            "fraction_significant": (("variant", "target"), frac),
        },
        coords={"variant": variants, "target": list(TARGETS), "layer": layers, "head": heads, "stat": list(STAT)},
    )

    # Decomposition (§3) per condition, at model and layer level; shares are ratios of means.
    conds = dict(DEFAULT_CONDITIONS if conditions is None else conditions)
    conds = {c: pair for c, pair in conds.items() if pair[0] in leak_vars and pair[1] in leak_vars}
    comps = ("total", "residual", "causal_mask", "share_residual", "share_causal_mask")
    if conds:
        dec_m = np.full((len(conds), len(comps), 3), np.nan)
        dec_l = np.full((len(conds), len(comps), nl, 3), np.nan)
        for ci, (c, (cv, bv)) in enumerate(conds.items()):
            tot, res = per_seq(cv, "logattn"), per_seq(bv, "logattn")
            for agg, dest in (((1, 2), dec_m), ((2,), dec_l)):
                t_, r_ = tot.mean(agg), res.mean(agg)
                est = decompose(t_.mean(0), r_.mean(0))
                boot = decompose(stats.bootstrap_means(t_, counts), stats.bootstrap_means(r_, counts))
                for k, comp in enumerate(comps):
                    dest[ci, k] = _ci(boot[comp], est[comp], level)
        out["decomposition"] = (("condition", "component", "stat"), dec_m)
        out["decomposition_layer"] = (("condition", "component", "layer", "stat"), dec_l)
        out = out.assign_coords(condition=list(conds), component=list(comps))

    # Observational split (§3) of every causal-mask run (the controls too, which have no
    # bidirectional twin), in units of SST(log-attention). Raw terms satisfy
    # logit + logz + cross = logattn exactly; with floor_correct the logit and logattn terms lose
    # their permutation-null means (logit's rescaled by SST(s)/SST(a)), and softmax = logattn − logit.
    causal_runs = [v for v in variants if "bidirectional" not in v]
    obs_terms = ("logit", "logz", "cross", "logattn", "softmax", "share_logit", "share_softmax")
    obs = np.full((len(causal_runs), len(obs_terms), 3), np.nan)
    for ci, cv in enumerate(causal_runs):
        ds = leak_vars[cv].sortby("sequence").sel(leak_fit=fit, leak_window=window)
        split, sst = ds["leak_split"], ds["leak_sst"]
        lg = split.sel(leak_term="logit").values
        la = split.sel(leak_term="logattn").values
        if floor_correct:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = sst.sel(leak_target="logit").values / sst.sel(leak_target="logattn").values
            lg = lg - ds["leak_null"].sel(leak_target="logit").values * ratio
            la = la - ds["leak_null"].sel(leak_target="logattn").values
        parts = {"logit": lg, "logz": split.sel(leak_term="logz").values,
                 "cross": split.sel(leak_term="cross").values, "logattn": la}
        per = {k: v_.mean((1, 2)) for k, v_ in parts.items()}          # (seq,)
        per["softmax"] = per["logattn"] - per["logit"]
        est = {k: v_.mean(0) for k, v_ in per.items()}
        boot = {k: stats.bootstrap_means(v_, counts) for k, v_ in per.items()}
        with np.errstate(divide="ignore", invalid="ignore"):
            for dct in (est, boot):
                dct["share_logit"] = dct["logit"] / dct["logattn"]
                dct["share_softmax"] = dct["softmax"] / dct["logattn"]
        for k, term in enumerate(obs_terms):
            obs[ci, k] = _ci(boot[term], est[term], level)
    if causal_runs:
        out["observational_split"] = (("causal_variant", "obs_term", "stat"), obs)
        out = out.assign_coords(causal_variant=causal_runs, obs_term=list(obs_terms))

    # BOS replacement (§4): effect = 1 − C_res(intervention)/C_res(baseline), early vs late queries.
    bos_pairs = dict(_default_bos(leak_vars) if bos is None else bos)
    bos_pairs = {k: t for k, t in bos_pairs.items() if t[0] in leak_vars and t[1] in leak_vars}
    if bos_pairs:
        wins = [w for w in bos_windows if w in first["leak_window"].values]
        eff = np.full((len(bos_pairs), len(wins), 3), np.nan)
        c_int = np.full((len(bos_pairs), len(wins), 3), np.nan)
        c_base = np.full((len(bos_pairs), len(wins), 3), np.nan)
        for bi, (name, (iv, bv, target)) in enumerate(bos_pairs.items()):
            for wi, win in enumerate(wins):
                ci_ = per_seq(iv, target, win).mean((1, 2))
                cb_ = per_seq(bv, target, win).mean((1, 2))
                bi_s, bb_s = stats.bootstrap_means(ci_, counts), stats.bootstrap_means(cb_, counts)
                with np.errstate(divide="ignore", invalid="ignore"):
                    eff[bi, wi] = _ci(1.0 - bi_s / bb_s, 1.0 - ci_.mean() / cb_.mean(), level)
                c_int[bi, wi] = _ci(bi_s, ci_.mean(), level)
                c_base[bi, wi] = _ci(bb_s, cb_.mean(), level)
        out["bos_effect"] = (("intervention", "bos_window", "stat"), eff)
        out["bos_c_res"] = (("intervention", "bos_window", "stat"), c_int)
        out["bos_c_res_baseline"] = (("intervention", "bos_window", "stat"), c_base)
        out = out.assign_coords(intervention=list(bos_pairs), bos_window=wins)

    # Sink-reading heads (§4), from the SinkReducer's per-sequence mean attention to key 0.
    sink_vars = [v for v in variants if "sink_attention" in stores[v]]
    if sink_vars:
        sink = np.full((nv, nl, nh), np.nan)
        for v in sink_vars:
            sink[variants.index(v)] = stores[v]["sink_attention"].mean("sequence").values
        out["sink_attention"] = (("variant", "layer", "head"), sink)
        taus_a = np.asarray(taus, dtype=np.float64)
        out["sink_head"] = (("tau", "variant", "layer", "head"), sink[None] >= taus_a[:, None, None, None])
        out = out.assign_coords(tau=taus_a)

    out.attrs.update({
        "fit": fit, "window": window, "floor_correct": int(floor_correct), "n_boot": n_boot, "n_perm": n_perm,
        "level": level, "alpha": alpha, "seed": seed, "n_sequences": int(seqs.size),
        "perm_variants": list(variants if perm_variants is None else [v for v in variants if v in perm_variants]),
        "stratified_bootstrap": int(strata is not None),
        "conditions": json.dumps(conds), "bos": json.dumps(bos_pairs),
        "note": "leakage = mean over prompts of per-prompt dR2 (minus exact within-offset permutation-null "
                "mean when floor_correct); shares = ratios of prompt means; p/q: within-offset permutation "
                "test on prompt-mean maps, BH over (layer, head) per variant and target",
    })
    return out


def tables(summary: xr.Dataset) -> dict[str, "pd.DataFrame"]:  # noqa: F821
    """Flat tables of a :func:`leakage_summary` result (one DataFrame per name).

    Names: ``leakage_by_model``, ``leakage_by_layer``, ``heads``, plus ``decomposition``,
    ``decomposition_by_layer``, ``observational_split`` (Table 6 style), ``bos_effects``
    (Table 9 style) and ``sink_heads`` when the summary has them.
    """
    import pandas as pd

    def wide(da: xr.DataArray) -> pd.DataFrame:
        return da.to_dataset(dim="stat").to_dataframe().reset_index()

    out: dict[str, pd.DataFrame] = {}
    m = wide(summary["leakage_model"])
    m["fraction_significant"] = summary["fraction_significant"].to_dataframe().reset_index()["fraction_significant"]
    m["raw"] = summary["leakage_raw"].mean(("layer", "head")).to_dataframe().reset_index()["leakage_raw"]
    m["null_floor"] = summary["null_floor"].mean(("layer", "head")).to_dataframe().reset_index()["null_floor"]
    out["leakage_by_model"] = m
    out["leakage_by_layer"] = wide(summary["leakage_layer"])
    h = wide(summary["leakage_head"])
    for k in ("leakage_raw", "null_floor", "leakage_mean_map", "perm_null_mean", "p_value", "q_value"):
        h[k] = summary[k].to_dataframe().reset_index()[k].values
    if "sink_attention" in summary:
        sink = summary["sink_attention"].to_dataframe().reset_index()
        h = h.merge(sink, on=["variant", "layer", "head"], how="left")
    out["heads"] = h
    if "decomposition" in summary:
        out["decomposition"] = wide(summary["decomposition"])
        out["decomposition_by_layer"] = wide(summary["decomposition_layer"])
    if "observational_split" in summary:
        out["observational_split"] = wide(summary["observational_split"])
    if "bos_effect" in summary:
        out["bos_effects"] = wide(summary["bos_effect"])
    if "sink_head" in summary:
        n = summary["sink_head"].sum(("layer", "head"))
        df = n.rename("n_sink_heads").to_dataframe().reset_index()
        df["fraction"] = df["n_sink_heads"] / (summary.sizes["layer"] * summary.sizes["head"])
        out["sink_heads"] = df
    return out


# --------------------------------------------------------------------------------------------
# Pipeline stages: stores in, stores / tables out (what workflow/scripts call)
# --------------------------------------------------------------------------------------------

#: Paper 2 Table 6 analog: the RoPE conditions and the causal run each is measured on.
ROPE_CONDITIONS: dict[str, str] = {"rope": "causal", "identity_rope": "identity_rope", "scrambled_rope": "scrambled_rope"}

#: Tables written by :func:`paper2_tables_stage` (file stem -> what it holds).
PAPER2_TABLES: dict[str, str] = {
    "leakage_by_model": "leakage per (model, dataset, variant, target), mean over layers and heads, with CI, "
                        "raw dR2, null floor and the fraction of heads significant after BH",
    "decomposition": "total / residual-stream / causal-mask leakage and shares per condition, with CIs",
    "leakage_by_layer": "leakage per layer (variant, target) with CIs",
    "decomposition_by_layer": "decomposition per layer with CIs",
    "rope_controls": "Table 6 analog: causal vs identity vs scrambled RoPE",
    "bos_effects": "Table 9 analog: BOS-replacement effects at early and late queries",
    "observational_split": "logit vs softmax (log Z) parts of one causal run's log-attention leakage",
    "heads": "per head: leakage with CI, p and BH q (prompt-mean map), sink attention",
    "sink_heads": "number / fraction of sink-reading heads at each tau",
    "position0": "position-0 residual stream: cross-prompt std per layer and condition, probes",
    "position0_probes": "content probes: best layer of the position-0 probe, sink-head value probe",
}


def pool_small_strata(labels: np.ndarray, min_size: int = 5) -> tuple[np.ndarray, int]:
    """Labels with every stratum of fewer than ``min_size`` prompts merged into one pooled stratum.

    A stratified bootstrap resamples each stratum within itself, so a stratum of one prompt always
    redraws that prompt (no variance) and small ones understate it by (n_s − 1)/n_s; e.g. Wikipedia
    chunks labelled by article title are almost all singletons. Returns (labels, number of
    prompts pooled).
    """
    labels = np.array([str(x) for x in np.asarray(labels).ravel()], dtype=object)
    names, counts = np.unique(labels, return_counts=True)
    small = np.isin(labels, names[counts < min_size])
    labels[small] = "(pooled small strata)"
    return labels, int(small.sum())


def leakage_stage(stores: Mapping[str, str], out, *, data_store=None, strata: str = "none",
                  min_stratum: int = 5, attrs: Mapping | None = None, **summary_kw) -> xr.Dataset:
    """``leakage`` rule: :func:`leakage_summary` of the merged score stores of one (model, dataset).

    Args:
        stores: variant -> path of ``results/scores/{model}/{dataset}/{variant}.zarr``.
        out: path of the summary store.
        data_store: the dataset's token store (its ``source`` labels, for ``strata="source"``).
        strata: ``"none"`` (plain bootstrap over prompts) or ``"source"`` (stratified by the
            prompts' source, e.g. KJV book; sources with fewer than ``min_stratum`` prompts are
            pooled into one stratum, see :func:`pool_small_strata`).
        attrs: extra attributes (model, dataset, code fingerprint, config choices).
        summary_kw: :func:`leakage_summary` keywords.
    """
    from causalpos.store import open_dataset, write_dataset

    if strata not in ("none", "source"):
        raise ValueError(f"strata must be 'none' or 'source', got {strata!r}")
    opened = {v: open_dataset(p) for v, p in stores.items()}
    labels = None
    if strata == "source":
        if data_store is None:
            raise ValueError("strata='source' needs the dataset's store (data_store)")
        first = next(iter(opened.values()))
        seqs = np.sort(first["sequence"].values)
        labels, n_pooled = pool_small_strata(open_dataset(data_store)["source"].sel(sequence=seqs).values,
                                             min_stratum)
        if np.unique(labels).size < 2:
            labels = None          # one stratum: the plain bootstrap
    ds = leakage_summary(opened, strata=labels, **summary_kw)
    if strata == "source":
        ds.attrs.update({"strata_min_size": min_stratum, "strata_pooled_prompts": n_pooled,
                         "strata_n": 1 if labels is None else int(np.unique(labels).size)})
    # The extraction-time choices (fits, windows, pair subsample) travel on leak_delta's attrs.
    reducer = {f"reducer_{k.removeprefix('leak_')}": v
               for k, v in next(iter(opened.values()))["leak_delta"].attrs.items() if k.startswith("leak_")}
    ds.attrs.update({"variants": list(opened), "strata": strata, **reducer, **dict(attrs or {})})
    write_dataset(ds, out)
    return ds


def _wide(da: xr.DataArray, index: Sequence[str], columns: str) -> "pd.DataFrame":  # noqa: F821
    """(…, ``columns``, stat) -> one row per ``index`` with ``<col>``, ``<col>_lo``, ``<col>_hi``."""
    df = da.to_dataset(dim="stat").to_dataframe().reset_index()
    wide = df.pivot(index=list(index), columns=columns, values=list(STAT))
    order = list(dict.fromkeys(da[columns].values.tolist()))
    cols = {}
    for c in order:
        cols[c] = wide[("estimate", c)]
        cols[f"{c}_lo"] = wide[("lo", c)]
        cols[f"{c}_hi"] = wide[("hi", c)]
    import pandas as pd

    return pd.DataFrame(cols).reset_index()


def _rope_controls(summary: xr.Dataset) -> "pd.DataFrame":  # noqa: F821
    """Table 6 analog of one summary: per RoPE condition whose causal run exists, the total
    leakage (causal run, log-attention), its logit leakage, the observational split's shares and,
    where the condition has a bidirectional twin, the decomposition's shares."""
    import pandas as pd

    rows = []
    variants = list(summary["variant"].values)
    for cond, cv in ROPE_CONDITIONS.items():
        if cv not in variants:
            continue
        row = {"condition": cond, "causal_variant": cv}
        for tgt, name in (("logattn", "total"), ("logit", "logit")):
            est, lo, hi = summary["leakage_model"].sel(variant=cv, target=tgt).values
            row.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
        if "observational_split" in summary and cv in summary["causal_variant"].values:
            for term in ("share_logit", "share_softmax"):
                est, lo, hi = summary["observational_split"].sel(causal_variant=cv, obs_term=term).values
                row.update({f"obs_{term}": est, f"obs_{term}_lo": lo, f"obs_{term}_hi": hi})
        has_dec = "decomposition" in summary and cond in summary["condition"].values
        for comp in ("residual", "causal_mask", "share_residual", "share_causal_mask"):
            est, lo, hi = (summary["decomposition"].sel(condition=cond, component=comp).values
                           if has_dec else (np.nan, np.nan, np.nan))
            row.update({comp: est, f"{comp}_lo": lo, f"{comp}_hi": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def _bos_table(summary: xr.Dataset) -> "pd.DataFrame":  # noqa: F821
    import pandas as pd

    pairs = json.loads(summary.attrs.get("bos", "{}"))
    rows = []
    for name in summary["intervention"].values:
        iv, bv, target = pairs.get(str(name), ("", "", ""))
        for win in summary["bos_window"].values:
            row = {"intervention": str(name), "variant": iv, "baseline": bv, "target": target, "bos_window": str(win)}
            for var, pre in (("bos_effect", "effect"), ("bos_c_res", "c_res"), ("bos_c_res_baseline", "c_res_baseline")):
                est, lo, hi = summary[var].sel(intervention=name, bos_window=win).values
                row.update({pre: est, f"{pre}_lo": lo, f"{pre}_hi": hi})
            rows.append(row)
    return pd.DataFrame(rows)


def _position0_frames(p0: xr.Dataset) -> tuple["pd.DataFrame", dict]:  # noqa: F821
    """(per condition and layer frame, probe summary row) of a position-0 store."""
    per_layer = [v for v in p0.data_vars if set(p0[v].dims) <= {"condition", "layer"}]
    df = p0[per_layer].to_dataframe().reset_index()
    probe = {"probe_labels": p0.attrs.get("probe_labels", ""), "probe_n_prompts": p0.attrs.get("probe_n_prompts", 0),
             "probe_n_classes": p0.attrs.get("probe_n_classes", 0)}
    if "probe_accuracy" in p0:
        acc = p0["probe_accuracy"].sel(condition=p0.attrs.get("probe_condition", "causal"))
        if np.isfinite(acc.values).any():
            best = int(np.nanargmax(acc.values))
            for k in ("accuracy", "chance", "null_mean", "p_value"):
                v = p0[f"probe_{k}"].sel(condition=p0.attrs.get("probe_condition", "causal")).values
                probe[f"best_layer_{k}"] = float(v[best])
            probe["best_layer"] = int(acc["layer"].values[best])
            probe["min_p_value"] = float(np.nanmin(p0["probe_p_value"].sel(
                condition=p0.attrs.get("probe_condition", "causal")).values))
    probe["n_sink_heads"] = p0.attrs.get("n_sink_heads", 0)
    for k in ("accuracy", "chance", "null_mean", "p_value"):
        probe[f"sink_probe_{k}"] = p0.attrs.get(f"sink_probe_{k}", np.nan)
    return df, probe


def paper2_tables(summaries: Mapping[tuple[str, str], xr.Dataset],
                  position0: Mapping[tuple[str, str], xr.Dataset] | None = None) -> dict[str, "pd.DataFrame"]:  # noqa: F821
    """Every paper-2 table over (model, dataset) pairs: :data:`PAPER2_TABLES` names -> DataFrame.

    Each frame starts with ``model`` and ``dataset`` columns; values are copied from the summaries
    (no recomputation), so a table cell equals the store's number.
    """
    import pandas as pd

    parts: dict[str, list] = {name: [] for name in PAPER2_TABLES}
    probes = []

    def add(name, df, model, dataset):
        df = df.copy()
        df.insert(0, "dataset", dataset)
        df.insert(0, "model", model)
        parts[name].append(df)

    for (model, dataset), s in summaries.items():
        flat = tables(s)
        add("leakage_by_model", flat["leakage_by_model"], model, dataset)
        add("leakage_by_layer", flat["leakage_by_layer"], model, dataset)
        add("heads", flat["heads"], model, dataset)
        if "decomposition" in s:
            add("decomposition", _wide(s["decomposition"], ["condition"], "component"), model, dataset)
            add("decomposition_by_layer", _wide(s["decomposition_layer"], ["condition", "layer"], "component"),
                model, dataset)
        if "observational_split" in s:
            add("observational_split", _wide(s["observational_split"], ["causal_variant"], "obs_term"), model, dataset)
        add("rope_controls", _rope_controls(s), model, dataset)
        if "bos_effect" in s:
            add("bos_effects", _bos_table(s), model, dataset)
        if "sink_heads" in flat:
            add("sink_heads", flat["sink_heads"], model, dataset)
    for (model, dataset), p0 in (position0 or {}).items():
        df, probe = _position0_frames(p0)
        add("position0", df, model, dataset)
        probes.append({"model": model, "dataset": dataset, **probe})
    out = {name: (pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame(columns=["model", "dataset"]))
           for name, dfs in parts.items()}
    out["position0_probes"] = pd.DataFrame(probes) if probes else pd.DataFrame(columns=["model", "dataset"])
    return out


def _fmt(x) -> str:
    if isinstance(x, (float, np.floating)):
        if not np.isfinite(x):
            return "–"
        return f"{x:.4g}"
    return str(x)


def _ci_cell(row, name: str, pct: bool = False) -> str:
    est, lo, hi = row[name], row[f"{name}_lo"], row[f"{name}_hi"]
    if not np.isfinite(est):
        return "–"
    if pct:
        return f"{100 * est:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"
    return f"{est:.4g} [{lo:.4g}, {hi:.4g}]"


def _markdown(df: "pd.DataFrame") -> str:  # noqa: F821
    if df.empty:
        return "_(none)_\n"
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in df.columns) + " |")
    return "\n".join(lines) + "\n"


def paper2_markdown(tabs: Mapping[str, "pd.DataFrame"], *, title: str = "Paper 2 (Ruscio et al. 2026): tables") -> str:  # noqa: F821
    """A readable Markdown digest of :func:`paper2_tables` (estimates with [95 % CI])."""
    import pandas as pd

    out = [f"# {title}\n",
           "Leakage = ΔR² of the saturated relative baseline plus absolute query effects, minus its exact "
           "within-offset permutation-null mean, averaged over prompts, layers and heads; CIs: percentile "
           "bootstrap over prompts. Full precision in the CSV files beside this one.\n"]

    def section(name, df):
        out.append(f"\n## {name}\n\n")
        out.append(_markdown(df))

    dec = tabs["decomposition"]
    if not dec.empty:
        section("Total leakage and component shares (bidirectional ablation, Eq. 5)", pd.DataFrame({
            "model": dec["model"], "dataset": dec["dataset"], "condition": dec["condition"],
            "total": [_ci_cell(r, "total") for _, r in dec.iterrows()],
            "residual stream": [_ci_cell(r, "residual") for _, r in dec.iterrows()],
            "causal mask": [_ci_cell(r, "causal_mask") for _, r in dec.iterrows()],
            "residual share": [_ci_cell(r, "share_residual", True) for _, r in dec.iterrows()],
            "causal-mask share": [_ci_cell(r, "share_causal_mask", True) for _, r in dec.iterrows()],
        }))
    rc = tabs["rope_controls"]
    if not rc.empty:
        cols = {"model": rc["model"], "dataset": rc["dataset"], "condition": rc["condition"],
                "total (log-attn)": [_ci_cell(r, "total") for _, r in rc.iterrows()],
                "logit": [_ci_cell(r, "logit") for _, r in rc.iterrows()]}
        if "obs_share_logit" in rc:
            cols["observational logit share"] = [_ci_cell(r, "obs_share_logit", True) for _, r in rc.iterrows()]
            cols["observational softmax share"] = [_ci_cell(r, "obs_share_softmax", True) for _, r in rc.iterrows()]
        cols["residual share (ablation)"] = [_ci_cell(r, "share_residual", True) for _, r in rc.iterrows()]
        section("Table 6 analog: causal vs identity vs scrambled RoPE", pd.DataFrame(cols))
    bos = tabs["bos_effects"]
    if not bos.empty:
        section("Table 9 analog: BOS-embedding replacement (effect = 1 − C_res(intervention)/C_res(baseline))",
                pd.DataFrame({
                    "model": bos["model"], "dataset": bos["dataset"], "intervention": bos["intervention"],
                    "queries": bos["bos_window"], "target": bos["target"],
                    "effect": [_ci_cell(r, "effect", True) for _, r in bos.iterrows()],
                    "C_res": [_ci_cell(r, "c_res") for _, r in bos.iterrows()],
                    "C_res baseline": [_ci_cell(r, "c_res_baseline") for _, r in bos.iterrows()],
                }))
    obs = tabs["observational_split"]
    if not obs.empty:
        section("Observational split of the causal runs (units of SST(log-attention))", pd.DataFrame({
            "model": obs["model"], "dataset": obs["dataset"], "run": obs["causal_variant"],
            "logit": [_ci_cell(r, "logit") for _, r in obs.iterrows()],
            "log Z": [_ci_cell(r, "logz") for _, r in obs.iterrows()],
            "cross": [_ci_cell(r, "cross") for _, r in obs.iterrows()],
            "log-attention": [_ci_cell(r, "logattn") for _, r in obs.iterrows()],
            "logit share": [_ci_cell(r, "share_logit", True) for _, r in obs.iterrows()],
        }))
    bm = tabs["leakage_by_model"]
    if not bm.empty:
        section("Leakage per run and fraction of significant heads (BH q < α)", pd.DataFrame({
            "model": bm["model"], "dataset": bm["dataset"], "variant": bm["variant"], "target": bm["target"],
            "leakage": [f"{r['estimate']:.4g} [{r['lo']:.4g}, {r['hi']:.4g}]" for _, r in bm.iterrows()],
            "raw ΔR²": bm["raw"], "null floor": bm["null_floor"],
            "significant heads": bm["fraction_significant"],
        }))
    sk = tabs["sink_heads"]
    if not sk.empty:
        piv = sk.pivot_table(index=["model", "dataset", "variant"], columns="tau", values="fraction").reset_index()
        piv.columns = [c if isinstance(c, str) else f"τ = {c:g}" for c in piv.columns]
        section("Sink-reading heads (fraction of heads with mean attention to key 0 ≥ τ)", piv)
    p0 = tabs["position0"]
    if not p0.empty:
        g = p0.groupby(["model", "dataset", "condition"], sort=False)
        section("Position-0 trajectory: cross-prompt std of the residual stream (mean over dims)", pd.DataFrame({
            "std (embedding)": g["std"].first(), "std (last block)": g["std"].last(),
            "max std over layers": g["std"].max(), "max ratio to norm": g["ratio"].max(),
            "exactly 0 at every layer": g["std"].apply(lambda s: bool((s == 0).all())),
        }).reset_index())
    pr = tabs["position0_probes"]
    if not pr.empty:
        section("Content probes (cross-validated; chance = majority class)", pr)
    return "".join(out)


def paper2_tables_stage(summaries: Mapping[tuple[str, str], str], position0: Mapping[tuple[str, str], str],
                        outputs: Mapping[str, str]) -> dict[str, "pd.DataFrame"]:  # noqa: F821
    """``aggregate_leakage`` rule: every table as CSV (``outputs[name]``) and the Markdown digest
    (``outputs["markdown"]``) from the summary and position-0 stores of (model, dataset) pairs."""
    from pathlib import Path

    from causalpos.store import open_dataset

    tabs = paper2_tables({k: open_dataset(p) for k, p in summaries.items()},
                         {k: open_dataset(p) for k, p in position0.items()})
    for name, df in tabs.items():
        if name in outputs:
            Path(outputs[name]).parent.mkdir(parents=True, exist_ok=True)
            df.to_csv(outputs[name], index=False)
    if "markdown" in outputs:
        Path(outputs["markdown"]).write_text(paper2_markdown(tabs))
    return tabs
