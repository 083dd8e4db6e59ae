"""Paper 2 (Ruscio et al. 2026): ΔR², the absolute-position leakage of an attention map, defined once.

**Metric (paper2.md §2).** For one map (prompt, layer, head) and a target y over the measured
causal pairs 0 ≤ j ≤ i < T (row 0 excluded; optionally a window of query rows and a pair
subsample), ΔR² = R²(F) − R²(B): B a relative baseline (``saturated``, one level per offset
d = i − j, or ``linear``, b₀ + b₁ d), F = B + absolute effects (``query`` γ_i, ``key`` κ_j or
``both``); the fit grammar: :mod:`causalpos.paper2.extraction.design`.

**Solver.** Frisch–Waugh–Lovell with X the baseline columns and Z the absolute columns:

    ΔSS = cᵀ M⁺ c,   c = Zᵀy − G_ZX G_X⁺ Xᵀy,   M = ZᵀZ − G_ZX G_X⁺ G_XZ

where every Gram matrix is a pair count of the mask alone: M (at most 2T × 2T) is pseudo-inverted
once per mask, and a map needs only its per-offset / per-query / per-key sums (O(T²)) and one
T-sized quadratic form. No (pairs × parameters) design matrix is ever formed.

**Null.** The within-offset permutation null (§5) has the closed-form mean (``null_mean``)

    E_π[ΔSS] = Σ_s q_s h_s + Σ_s o_s (C_ss − h_s) + Σ_{s≠t} μ_s μ_t C_st

with μ_s, q_s the stratum means of y and y², o_s = (S_s² − Q_s)/(n_s(n_s−1)), h_s the summed
leverages of the ΔSS projector P_Δ over stratum s and C_st = 1_sᵀ P_Δ 1_t (0 for the saturated
baseline). For pure noise E[ΔR²] = k/(N − 1) (:attr:`~causalpos.paper2.extraction.design.Design.floor`).

**Observational split (§3).** ΔSS(a) = ΔSS(s) + ΔSS(ℓ) − 2⟨P_Δ s, P_Δ ℓ⟩ with a = s − ℓ,
ℓ_i = log Z_i, in units of SST(a) (:data:`SPLIT_TERMS`; :mod:`causalpos.paper2.extraction.windows`).

Scores are float32 pre-softmax logits, NaN where the model's mask forbids the pair; every
reduction runs in float64. The module does not import torch, so the summaries, which pass numpy
arrays (:func:`c_vector`, :func:`delta_r2`, :func:`measured_mask`), run without loading it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

from causalpos.paper2.extraction.design import Design, pair_mask

if TYPE_CHECKING:
    import torch

DEFAULT_FITS = ("saturated+query", "linear+query", "saturated+key", "saturated+both")
DEFAULT_WINDOWS = ("all", "early16", "early32", "early64", "late")
TARGETS = ("logit", "logattn")
SPLIT_TERMS = ("logit", "logz", "cross", "logattn")


def windowed_query_sums(
    lw: torch.Tensor, wf: torch.Tensor, wsk: torch.Tensor, n_i: torch.Tensor
) -> dict[str, torch.Tensor]:
    """:func:`fit_sums`' sums for a query-only target ℓ_i (log Z), by (T, T) matrix products:
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


def fit_sums(sums: dict[str, torch.Tensor], design: Design) -> dict[str, torch.Tensor]:
    """The fit of every map from its ``sums`` on the pairs and fit of ``design``: those of the map
    y centred by its mean over the measured pairs (a window's query rows only), ``rows`` /
    ``cols`` (..., T) per-query / per-key, ``off`` / ``off2`` (..., T) per-offset d = i − j sums of
    y and y², ``S`` / ``Q`` (...) the totals.

    Returns float64 tensors (...): ``sst`` (total SS about the pair mean), ``ss_base`` (baseline
    SS beyond the mean), ``dss`` (ΔSS), ``null`` (exact E_π ΔSS under the within-offset
    permutation null); ``c`` (..., q), the residualized absolute-effect vector (for the
    observational split), and ``cm`` = c M⁺.
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
    torch = sys.modules.get("torch")  # never imported: nothing is a tensor
    if torch is not None and isinstance(ss, torch.Tensor):
        ok = sst > 0
        return torch.where(ok, ss / torch.where(ok, sst, 1.0), torch.nan)
    ss, sst = np.asarray(ss, dtype=np.float64), np.asarray(sst, dtype=np.float64)
    ok = sst > 0
    return np.where(ok, ss / np.where(ok, sst, 1.0), np.nan)


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
    """``(T, T)`` bool numpy pair mask: lower triangle ∧ query ``window`` ∧ ``finite`` ((..., T, T)
    bool tensor or array, one pattern for every map; its :func:`allowed_pattern` ``allowed`` where
    already computed) ∧ ``mask`` (an optional (T, T) pair subsample, refused where it selects a
    pair that is not finite)."""
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
