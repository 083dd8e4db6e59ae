"""An oracle of paper 2's metric for the tests: ΔR² and the observational split of whole maps
held in memory (maps in, numbers out), from the solver of
:mod:`causalpos.paper2.extraction.metric` (the one the reducers run on the same sums during
extraction, :class:`~causalpos.paper2.extraction.reducers.LeakageReducer`), and the log-attention
of a map of scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from causalpos.paper2.extraction.design import build_design
from causalpos.paper2.extraction.metric import (
    SPLIT_TERMS,
    c_vector,
    delta_r2,
    fit_sums,
    measured_mask,
    null_corrected,
    r2_terms,
)


def to_tensor(x):
    """(``x`` as a tensor, whether it was a numpy array): numpy input wrapped without a copy."""
    import torch

    if isinstance(x, torch.Tensor):
        return x, False
    return torch.from_numpy(np.asarray(x)), True


def log_z(s):
    """(log Z (..., T) float64: the logsumexp over each row's finite keys of scores ``s``
    (..., T, T), the finite pattern of ``s``)."""
    import torch

    s = s.to(torch.float64)
    fin = torch.isfinite(s)
    return torch.logsumexp(torch.where(fin, s, -torch.inf), dim=-1), fin


def window_sums(y, w, n_pairs: int, lo: int, hi: int) -> dict:
    """Per-offset/query/key sums of y (..., T, T), centred by its mean over the pairs ``w``
    ((T, T) bool, in the lower triangle) and 0 off them, over the query rows [lo, hi): the sums
    :func:`~causalpos.paper2.extraction.metric.fit_sums` reads (loops over the offsets: the
    reference the reducers' stacked windows are tested against)."""
    import torch

    y = torch.as_tensor(y).to(torch.float64)
    w = torch.as_tensor(w)
    T = y.shape[-1]
    mean = torch.where(w, y, 0.0).sum(dim=(-2, -1)) / n_pairs
    yz = torch.where(w, y - mean[..., None, None], 0.0)
    yz[..., :lo, :] = 0.0
    yz[..., hi:, :] = 0.0
    diag = [torch.diagonal(yz, offset=-d, dim1=-2, dim2=-1) for d in range(T)]
    out = {
        "rows": yz.sum(dim=-1),
        "cols": yz.sum(dim=-2),
        "off": torch.stack([x.sum(dim=-1) for x in diag], dim=-1),
        "off2": torch.stack([(x * x).sum(dim=-1) for x in diag], dim=-1),
    }
    out["S"], out["Q"] = out["off"].sum(dim=-1), out["off2"].sum(dim=-1)
    return out


def pair_sums(y, w, n_pairs: int) -> dict:
    """:func:`window_sums` over every query row."""
    return window_sums(y, w, n_pairs, 0, y.shape[-1])


def _quad(c1, c2, design):
    """⟨P_Δ y₁, P_Δ y₂⟩ = c₁ᵀ M⁺ c₂ (the ΔSS bilinear form)."""
    return ((c1 @ design.tensors(c1.device)["m_pinv"]) * c2).sum(dim=-1)


def split_terms(s_sums: dict, l_sums: dict, design, a_fit: dict):
    """Observational split of ΔSS(a), a = s − ℓ (ℓ = log Z), from the sums of the logits and of
    ℓ and the fit of a: (..., 4) logit, logz, cross, logattn (``SPLIT_TERMS``) in units of
    SST(a), the first three summing to the fourth (what the reducers' stacked windows compute)."""
    import torch

    c_s, _ = c_vector(s_sums, design)
    c_l, _ = c_vector(l_sums, design)
    quads = [_quad(c_s, c_s, design), _quad(c_l, c_l, design), -2.0 * _quad(c_s, c_l, design)]
    terms = torch.stack([*quads, a_fit["dss"]], dim=-1)
    return delta_r2(terms, a_fit["sst"][..., None])


def log_attention(scores):
    """Log-attention a_ij = s_ij − log Σ_{k allowed} exp(s_ik), in float64.

    The allowed keys of row i are the finite entries of ``scores[..., i, :]`` (the model's own mask:
    causal = j ≤ i, bidirectional = all, sliding window = the window). NaN where not allowed.

    Args:
        scores: ``(..., query, key)`` numpy array or torch tensor, NaN where masked.

    Returns:
        Same type and shape as ``scores``, float64.
    """
    import torch

    s, was_numpy = to_tensor(scores)
    lse, fin = log_z(s)
    a = torch.where(fin, s.to(torch.float64) - lse[..., None], torch.nan)
    return a.numpy() if was_numpy else a


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


def fit_leakage(
    y, *, fit: str = "saturated+query", mask: np.ndarray | None = None, window: str = "all"
) -> LeakageFit:
    """Leakage ΔR² of target maps ``y`` (..., query, key) under ``fit``.

    The measured pairs are the lower triangle without row 0, restricted to ``window``, to the finite
    entries of ``y`` (identical across maps) and to ``mask`` when given.

    Args:
        y: ``(..., T, T)`` numpy array or torch tensor (logits or log-attention), NaN where masked.
        fit: ``"<baseline>+<absolute>"``, e.g. ``"saturated+query"``.
        mask: optional ``(T, T)`` bool pair subsample.
        window: query window (:func:`causalpos.paper2.extraction.design.query_window`).

    Returns:
        :class:`LeakageFit` with numpy arrays of shape ``y.shape[:-2]``.
    """
    import torch

    yt, _ = to_tensor(y)
    if yt.ndim < 2 or yt.shape[-1] != yt.shape[-2]:
        raise ValueError(f"y must be (..., T, T) with square maps, got shape {tuple(yt.shape)}")
    w = measured_mask(torch.isfinite(yt), mask, window)
    design = build_design(w, fit)
    sums = pair_sums(yt, torch.as_tensor(w, device=yt.device), design.n_pairs)
    f = fit_sums(sums, design)
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
    import torch

    st, _ = to_tensor(scores)
    st = st.to(torch.float64)
    lz, fin = log_z(st)
    a = torch.where(fin, st - lz[..., None], torch.nan)
    w_np = measured_mask(fin, mask, window)
    design = build_design(w_np, fit)
    w = torch.as_tensor(w_np, device=st.device)
    s_sums = pair_sums(st, w, design.n_pairs)
    a_sums = pair_sums(a, w, design.n_pairs)
    l_sums = pair_sums(lz[..., :, None].expand(st.shape), w, design.n_pairs)
    a_fit = fit_sums(a_sums, design)
    s_fit = fit_sums(s_sums, design)
    terms = split_terms(s_sums, l_sums, design, a_fit).cpu().numpy()
    out = {name: terms[..., n] for n, name in enumerate(SPLIT_TERMS)}
    out["delta_logit"] = delta_r2(s_fit["dss"], s_fit["sst"]).cpu().numpy()
    return out
