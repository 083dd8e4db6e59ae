"""Paper 2 (Ruscio et al. 2026): ΔR², the absolute-position leakage of an attention map, defined once.

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
(:attr:`causalpos.paper2.extraction.design.Design.floor`).

**Observational split (§3).** One causal run's log-attention leakage split as
ΔSS(a) = ΔSS(s) + ΔSS(ℓ) − 2⟨P_Δ s, P_Δ ℓ⟩ with a = s − ℓ, ℓ_i = log Z_i, in units of SST(a)
(:func:`split_terms`). The decomposition into causal-mask and residual-stream components:
:mod:`causalpos.paper2.decomposition` (the headline reading) and
:func:`causalpos.paper2.summary.per_prompt.per_prompt_components` (the per-prompt reading).

Scores are float32 pre-softmax logits with NaN where the model's mask forbids the pair; every
reduction here runs in float64. The functions that compute on tensors (extraction's reducers)
import torch themselves; the module does not, so the summaries, which pass numpy arrays
(:func:`c_vector`, :func:`delta_r2`, :func:`measured_mask`), run without loading it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from causalpos.paper2.extraction.design import Design, pair_mask

if TYPE_CHECKING:
    import torch

DEFAULT_FITS = ("saturated+query", "linear+query", "saturated+key", "saturated+both")


DEFAULT_WINDOWS = ("all", "early16", "early32", "early64", "late")


TARGETS = ("logit", "logattn")


SPLIT_TERMS = ("logit", "logz", "cross", "logattn")


def to_tensor(x) -> tuple[torch.Tensor, bool]:
    """(``x`` as a tensor, whether it was a numpy array): numpy input is wrapped without a copy,
    a tensor is returned as is (same dtype, shape and device)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x, False
    return torch.from_numpy(np.asarray(x)), True


def log_z(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log partition function of every query row of scores ``s`` (..., T, T), NaN where masked.

    Returns ``(log Z, finite)``: log Z (..., T) float64, the logsumexp over the finite keys of
    each row; ``finite`` (..., T, T) bool, the finite pattern of ``s`` (the allowed pairs).
    """
    import torch

    s = s.to(torch.float64)
    fin = torch.isfinite(s)
    lse = torch.logsumexp(torch.where(fin, s, -torch.inf), dim=-1)
    return lse, fin


def _skew(pad: torch.Tensor) -> torch.Tensor:
    """Diagonals as columns without a gather: ``pad`` (M, T, 2T), zeros in columns < T and the
    map in columns ≥ T -> strided view V (M, T, T) with V[m, i, e] = map[m, i, i − (T−1−e)]
    (0 where that key is < 0). Summing V over rows and flipping the last axis gives offset sums.

    Flat index i·2T + T + i − d = i(2T+1) + 1 + e stays inside row i for every (i, e), so the
    view never reads another row or map.
    """
    m, t, _ = pad.shape
    return pad.as_strided((m, t, t), (2 * t * t, 2 * t + 1, 1), pad.storage_offset() + 1)


def target_sums(
    y: torch.Tensor | Sequence[torch.Tensor], w: torch.Tensor, n_pairs: int, first_row: int = 0
) -> dict:
    """Row-resolved partial sums of y over the pairs ``w``, reusable by every query window.

    Args:
        y: ``(..., T, T)`` target maps, or a sequence of such tensors of one shape (stacked
            along a new leading axis, each centred and summed exactly as on its own); centred by
            their mean over ``w`` first (R² is invariant to it and it avoids cancellation in
            Σy² − (Σy)²/N).
        w: ``(T, T)`` bool tensor, the measured pairs.
        n_pairs: ``w.sum()``.
        first_row: the first query row any window will sum (:func:`window_sums`' ``lo``); from
            1 on, and where ``w`` lies in the lower triangle without row 0, the diagonals are
            read from the centred maps themselves (:func:`_diagonals`) instead of a padded copy.

    Returns:
        dict for :func:`window_sums`: ``yz`` (M, T, T) the centred maps, 0 off ``w`` (M = prod
        of the leading shape), ``V`` / ``V2`` (M, T − r0, T) their diagonals (and of squares)
        as columns for the query rows r0..T−1 (:func:`_skew`; :func:`_diagonals` where ``w``
        lies in the lower triangle without row 0, r0 = 1), ``r0``, ``lead`` the leading shape.
    """
    import torch

    ys = list(y) if isinstance(y, (list, tuple)) else [y]
    T = ys[0].shape[-1]
    lead = ((len(ys),) if isinstance(y, (list, tuple)) else ()) + tuple(ys[0].shape[:-2])
    m = math.prod(ys[0].shape[:-2])
    causal = first_row >= 1 and _causal_rows(w)
    if causal:
        yz = torch.empty((len(ys) * m, T, T), dtype=torch.float64, device=ys[0].device)
        dest = yz
    else:
        pad = torch.zeros((len(ys) * m, T, 2 * T), dtype=torch.float64, device=ys[0].device)
        dest = pad[..., T:]
    off_w = ~w
    for k, yk in enumerate(ys):
        if tuple(yk.shape) != tuple(ys[0].shape):
            raise ValueError(f"target_sums: targets of shapes {[tuple(t.shape) for t in ys]}")
        yk = yk.reshape(-1, T, T).to(torch.float64)
        mean = torch.where(w, yk, 0.0).sum(dim=(-2, -1)) / n_pairs
        part = dest[k * m : (k + 1) * m]
        torch.sub(yk, mean[:, None, None], out=part)
        part.masked_fill_(off_w, 0.0)  # = torch.where(w, yk − mean, 0), in place
    if causal:
        return {"yz": yz, "V": _diagonals(yz), "V2": _diagonals(yz * yz), "r0": 1, "lead": lead}
    pad2 = pad * pad
    return {"yz": pad[..., T:], "V": _skew(pad), "V2": _skew(pad2), "r0": 0, "lead": lead}


def _causal_rows(w: torch.Tensor) -> bool:
    """Whether the pairs ``w`` (T, T) lie in the lower triangle (j ≤ i) and outside row 0."""
    import torch

    T = w.shape[-1]
    upper = torch.ones(T, T, dtype=torch.bool, device=w.device).triu(diagonal=1)
    return not bool(w[0].any()) and not bool((w & upper).any())


def _diagonals(yz: torch.Tensor) -> torch.Tensor:
    """:func:`_skew` without the padding, for maps ``yz`` (M, T, T) that are 0 above the diagonal
    and on row 0: a strided view V (M, T − 1, T) with V[m, i − 1, e] = yz[m, i, i − (T−1−e)]
    for the rows i ≥ 1, and 0 where that key is < 0.

    Flat index i·T + i − d = i(T+1) − (T−1) + e: where i − d < 0 it reads row i − 1 at column
    T + i − d > i − 1, above the diagonal, hence 0 as the padding of :func:`_skew` gives; from
    row 1 on it never reads before the map's first element nor past its last (i = e = T − 1
    reads element T² − 1).
    """
    m, t, _ = yz.shape
    return yz.as_strided((m, t - 1, t), (t * t, t + 1, 1), yz.storage_offset() + 2)


def window_sums(ts: dict, lo: int, hi: int) -> dict[str, torch.Tensor]:
    """Per-offset/query/key sums of one :func:`target_sums` result over query rows [lo, hi).

    Returns:
        dict of float64 tensors with the maps' leading shape ``(...)`` first: ``rows`` (..., T)
        per-query sums (0 outside [lo, hi)), ``cols`` (..., T) per-key sums, ``off`` / ``off2``
        (..., T) per-offset sums of y and y², ``S`` / ``Q`` (...) the totals — the input of
        :func:`fit_sums`.
    """
    yz = ts["yz"]
    T = yz.shape[-1]
    if lo < ts["r0"]:
        raise ValueError(f"window_sums: query rows from {lo}, but the sums start at row {ts['r0']}")
    rows = yz.new_zeros(yz.shape[0], T)
    if "row_sums" in ts:  # every row's sum, taken once for all windows (the same per-row sums)
        rows[:, lo:hi] = ts["row_sums"][:, lo:hi]
    else:
        rows[:, lo:hi] = yz[:, lo:hi].sum(dim=-1)
    v = slice(lo - ts["r0"], hi - ts["r0"])
    off = ts["V"][:, v].sum(dim=-2).flip(-1)
    off2 = ts["V2"][:, v].sum(dim=-2).flip(-1)
    out = {"rows": rows, "cols": yz[:, lo:hi].sum(dim=-2), "off": off, "off2": off2}
    out = {k: v.reshape(ts["lead"] + (T,)) for k, v in out.items()}
    out["S"], out["Q"] = out["off"].sum(dim=-1), out["off2"].sum(dim=-1)
    return out


def pair_sums(y: torch.Tensor, w: torch.Tensor, n_pairs: int) -> dict[str, torch.Tensor]:
    """Per-offset/query/key sums of y (..., T, T) over the pairs ``w`` for every leading index."""
    return window_sums(target_sums(y, w, n_pairs), 0, y.shape[-1])


def windowed_query_sums(
    lw: torch.Tensor, wf: torch.Tensor, wsk: torch.Tensor, n_i: torch.Tensor
) -> dict[str, torch.Tensor]:
    """:func:`window_sums`' dict for a query-only target ℓ_i (log Z), by (T, T) matrix products:
    from ``lw`` (..., T), ℓ centred over the measured pairs and zeroed outside the window's query
    rows, the measured pairs ``wf`` (T, T) float64, their offset indicator ``wsk`` ([i, d] = 1
    where pair (i, i − d) is measured) and the pairs per query row ``n_i`` (T,). Returns
    ``rows``, ``cols``, ``off``, ``off2`` (..., T) and ``S``, ``Q`` (...), float64."""
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


def c_vector(sums: dict[str, torch.Tensor], design: Design) -> tuple[torch.Tensor, torch.Tensor]:
    """(c = Zᵀy − G_ZX G_X⁺ Xᵀy, u = Xᵀy) for every leading index.

    ``design``: a :class:`~causalpos.paper2.extraction.design.Design`, or a stack of designs whose tensors
    carry leading axes that broadcast against the sums' (:class:`causalpos.paper2.extraction.windows.DesignStack`).
    Sums as numpy arrays (the summaries' Grams, :func:`causalpos.paper2.estimator.pairgrams.prompt_grams`):
    the same operations on a single design's float64 arrays, in numpy (torch is not loaded).
    """
    if isinstance(sums["off"], np.ndarray):
        t = {"b": design.b, "offsets": np.arange(design.seq_len, dtype=np.float64)}
        stack, cat = np.stack, np.concatenate
    else:
        import torch

        t = design.tensors(sums["off"].device)
        stack, cat = torch.stack, torch.cat
    if design.baseline == "saturated":
        u = sums["off"]
    else:
        u = stack([sums["S"], sums["off"] @ t["offsets"]], -1)
    if design.landmark:
        u = cat([u, sums["cols"][..., :1]], -1)
    if design.absolute == "query":
        v = sums["rows"]
    elif design.absolute == "key":
        v = sums["cols"]
    else:
        v = cat([sums["rows"], sums["cols"]], -1)
    return v - u @ t["b"].mT, u


def _quad(c1: torch.Tensor, c2: torch.Tensor, design: Design) -> torch.Tensor:
    """⟨P_Δ y₁, P_Δ y₂⟩ = c₁ᵀ M⁺ c₂ (the ΔSS bilinear form)."""
    return ((c1 @ design.tensors(c1.device)["m_pinv"]) * c2).sum(dim=-1)


def fit_sums(sums: dict[str, torch.Tensor], design: Design) -> dict[str, torch.Tensor]:
    """The fit of every map from its sums (:func:`window_sums`, :func:`windowed_query_sums`).

    Args:
        sums: ``rows``, ``cols``, ``off``, ``off2`` (..., T) and ``S``, ``Q`` (...).
        design: the :class:`~causalpos.paper2.extraction.design.Design` of the same pairs and fit.

    Returns:
        dict of float64 tensors of the leading shape (...): ``sst`` (total SS about the pair
        mean), ``ss_base`` (baseline SS beyond the mean), ``dss`` (ΔSS), ``null`` (exact
        E_π ΔSS under the within-offset permutation null); ``c`` (..., q), the residualized
        absolute-effect vector (for :func:`split_terms`), and ``cm`` = c M⁺.
    """
    import torch

    t = design.tensors(sums["off"].device)
    n = t["n"] if "n" in t else float(design.n_pairs)  # a stack's pair counts, per design
    c, u = c_vector(sums, design)
    s, q = sums["S"], sums["Q"]
    sst = q - s * s / n
    # uᵀ G_X⁺ u; G_X⁺ diagonal (saturated baseline): elementwise, as the product would give
    gxu = u * t["gx_diag"] if "gx_diag" in t else u @ t["gx_pinv"]
    ss_base = (gxu * u).sum(dim=-1) - s * s / n
    cm = c @ t["m_pinv"]
    dss = (cm * c).sum(dim=-1)
    # E_π ΔSS = Σ_s q_s h_s + Σ_s o_s (C_ss − h_s) + Σ_{s≠t} μ_s μ_t C_st, per stratum weights
    # of Σ y² and (Σ y)² (Design.tensors); the off-diagonal sum vanishes with a saturated
    # baseline (C = 0: P_Δ annihilates every offset indicator)
    off = sums["off"]
    null = (sums["off2"] * t["null_q"]).sum(-1) + (off * off * t["null_o"]).sum(-1)
    if not design.c_zero:
        n_s = t["n_off"]
        mu = torch.where(n_s > 0, off / torch.clamp(n_s, min=1.0), 0.0)
        null = null + ((mu @ t["c"]) * mu).sum(-1) - (mu * mu * t["c_diag"]).sum(-1)
    return {"sst": sst, "ss_base": ss_base, "dss": dss, "null": null, "c": c, "cm": cm}


def delta_r2(ss, sst):
    """R²-type ratio ``ss / SST`` (NaN where SST = 0: a constant target has nothing to explain).

    The one definition every consumer uses: ΔR² = ΔSS/SST (no cancellation from R²(F) − R²(B)),
    R²(B) = SS_B/SST, and the permutation-null mean in the same units. numpy arrays or torch
    tensors, broadcast together.
    """
    if _is_tensor(ss):
        import torch

        ok = sst > 0
        return torch.where(ok, ss / torch.where(ok, sst, 1.0), torch.nan)
    ss, sst = np.asarray(ss, dtype=np.float64), np.asarray(sst, dtype=np.float64)
    ok = sst > 0
    return np.where(ok, ss / np.where(ok, sst, 1.0), np.nan)


def _is_tensor(x) -> bool:
    """Whether ``x`` is a torch tensor, without importing torch (where torch was never imported,
    nothing is one)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def null_corrected(delta, null_mean):
    """Leakage reported against the null (paper2.md §2, "never raw"): ΔR² minus the mean of its
    within-offset permutation null (exact per map, :func:`fit_sums`'s ``null``; or Monte Carlo)."""
    return delta - null_mean


def r2_terms(f: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``r2_base``, ``r2_full``, ``delta`` (ΔR²) and ``null`` (its exact permutation-null mean) of
    one :func:`fit_sums` result, each by :func:`delta_r2`."""
    return {
        "r2_base": delta_r2(f["ss_base"], f["sst"]),
        "r2_full": delta_r2(f["ss_base"] + f["dss"], f["sst"]),
        "delta": delta_r2(f["dss"], f["sst"]),
        "null": delta_r2(f["null"], f["sst"]),
    }


def allowed_pattern(finite) -> np.ndarray:
    """``(T, T)`` bool numpy array: the lower-triangle finite pattern shared by every map of
    ``finite`` (..., T, T) bool, a torch tensor or a numpy array; raises when two maps' patterns
    differ (one pair set per call)."""
    T = finite.shape[-1]
    flat = finite.reshape(-1, T, T)
    pattern = flat[0]
    if isinstance(finite, np.ndarray):
        tri = np.tril(np.ones((T, T), dtype=bool))
    else:
        import torch

        tri = torch.tril(torch.ones(T, T, dtype=torch.bool, device=finite.device))
    if not bool(((flat == pattern) | ~tri).all()):
        raise ValueError(
            "a map of this batch is NaN in the lower triangle where another has a value (the "
            "finite pattern differs between maps): NaN "
            "scores produced by the model (non-finite weights or activations: retrain a diverged "
            "model with a lower train.lr, run a float16 model in bfloat16 or float32), or maps "
            "with different attention masks passed together (leakage needs one pair set per call)"
        )
    if not isinstance(pattern, np.ndarray):
        pattern = pattern.cpu().numpy()
    return pattern & np.tril(np.ones((T, T), dtype=bool))


def measured_mask(
    finite, mask: np.ndarray | None, window: str, allowed: np.ndarray | None = None
) -> np.ndarray:
    """``(T, T)`` bool numpy pair mask: lower triangle ∧ query ``window`` ∧ finite ∧ ``mask``.

    Args:
        finite: ``(..., T, T)`` bool tensor or numpy array, the same pattern for every leading
            index (one design per call).
        mask: optional ``(T, T)`` bool pair subsample; a pair it selects where the target is not
            finite raises.
        window: query window (:func:`~causalpos.paper2.extraction.design.query_window`).
        allowed: :func:`allowed_pattern` of ``finite`` when already computed.
    """
    T = finite.shape[-1]
    if allowed is None:
        allowed = allowed_pattern(finite)
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


def split_terms(s_sums: dict, l_sums: dict, design: Design, a_fit: dict) -> torch.Tensor:
    """Observational split of ΔSS(a), a = s − ℓ, from the sums of the logits and of log Z.

    Args:
        s_sums: :func:`window_sums` of the logits s.
        l_sums: :func:`windowed_query_sums` (or :func:`window_sums`) of ℓ = log Z.
        design: the :class:`~causalpos.paper2.extraction.design.Design` of the pairs and fit.
        a_fit: :func:`fit_sums` of the log-attention a on the same pairs.

    Returns:
        ``(..., 4)`` float64 tensor: logit, logz, cross, logattn (:data:`SPLIT_TERMS`), in units
        of SST(a); the first three sum to the fourth.
    """
    import torch

    c_s, _ = c_vector(s_sums, design)
    c_l, _ = c_vector(l_sums, design)
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
