"""Paper 2 §5: the within-offset permutation test of ΔR², Monte Carlo, on prompt-mean maps (the
per-prompt reading's per-head test, :func:`causalpos.paper2.summary.per_prompt.head_tests`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from causalpos import stats
from causalpos.paper2 import inference as inf
from causalpos.paper2.extraction.design import build_design
from causalpos.paper2.extraction.metric import delta_r2, measured_mask


@dataclass(frozen=True)
class PermutationResult:
    observed: np.ndarray  # (...) ΔR²
    null_mean: np.ndarray  # (...) mean of the R null draws
    p: np.ndarray  # (...) (#{null ≥ obs} + 1)/(R + 1)
    n_perm: int


def permutation_test(
    maps,
    *,
    fit: str = "saturated+query",
    mask: np.ndarray | None = None,
    window: str = "all",
    n_perm: int = 1000,
    seed: int = 0,
    chunk: int = 16,
) -> PermutationResult:
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
    yt = np.asarray(maps)
    lead = tuple(yt.shape[:-2])
    T = yt.shape[-1]
    w = measured_mask(np.isfinite(yt), mask, window)
    design = build_design(w, fit)
    i, j = np.nonzero(w)
    d = i - j
    n = i.size
    y = yt.astype(np.float64).reshape(-1, T, T)[:, i, j]  # (M, N)
    y = y - y.mean(axis=1, keepdims=True)
    # (N, M) in C order: the layout the sparse products read (scipy copies y.T into it per call)
    y_t = np.ascontiguousarray(y.T)
    levels = {"query": [i], "key": [j], "both": [i, T + j]}[design.absolute]
    q = design.m_pinv.shape[0]
    # Baseline sums Xᵀy are invariant under within-offset permutations.
    x_off = sp.csr_matrix((np.ones(n), (np.arange(n), d)), shape=(n, T))
    off = (x_off.T @ y_t).T  # (M, T)
    if design.baseline == "saturated":
        u = off
    else:
        u = np.stack([off.sum(1), off @ np.arange(T)], axis=1)
    base_c = u @ design.b.T  # (M, q)
    sst = (y * y).sum(1)

    def dss_of(v: np.ndarray) -> np.ndarray:  # v (..., M, q)
        c = v - base_c
        return ((c @ design.m_pinv) * c).sum(-1)  # a GEMM, not an einsum loop

    z_rows = np.concatenate(levels)
    z = sp.csr_matrix(
        (np.ones(z_rows.size), (z_rows, np.tile(np.arange(n), len(levels)))), shape=(q, n)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        observed = delta_r2(dss_of((z @ y_t).T), sst)
    count = np.zeros_like(observed)
    total = np.zeros_like(observed)
    for sigma in stats.within_strata_permutations(d, n_perm, seed, chunk):
        c = sigma.shape[0]
        # Row (r, level of position m) collects the value moved into position m: y[sigma[r, m]].
        # Entries listed column by column (k = sigma[r, m], m = sigma⁻¹[r, k]), so each row's
        # columns arrive sorted: the matrix is canonical without a sort of its indices.
        inv = np.empty_like(sigma)
        np.put_along_axis(inv, sigma, np.arange(n)[None, :], axis=-1)
        rows = np.concatenate([(np.arange(c)[:, None] * q + lev[inv]).ravel() for lev in levels])
        cols = np.tile(np.arange(n), c * len(levels))
        s_mat = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(c * q, n))
        v = (s_mat @ y_t).reshape(c, q, -1).transpose(0, 2, 1)  # (c, M, q)
        with np.errstate(divide="ignore", invalid="ignore"):
            null = delta_r2(dss_of(v), sst)
        count += (null >= observed[None]).sum(0)
        total += null.sum(0)
    p = np.where(np.isnan(observed), np.nan, inf.exceedance_pvalue(count, n_perm))
    return PermutationResult(
        observed=observed.reshape(lead),
        null_mean=(total / n_perm).reshape(lead),
        p=p.reshape(lead),
        n_perm=n_perm,
    )
