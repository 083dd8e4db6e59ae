"""Closed forms and synthetic scores for paper 2's extraction tests: dense least-squares designs
and projectors (independent of the solver), relative maps, synthetic scores and the leakage
reducer run over batches."""

from __future__ import annotations

import numpy as np
import torch

from causalpos.paper2.extraction import design as L_design
from causalpos.paper2.extraction import reducers as L_reducers

FITS = [f"{b}+{a}" for b in L_design.BASELINES for a in L_design.ABSOLUTES]


def dense_design(mask: np.ndarray, fit: str) -> tuple[np.ndarray, np.ndarray]:
    baseline, absolute = L_design.parse_fit(fit)
    T = mask.shape[0]
    i, j = np.nonzero(mask)
    d = i - j
    x = (
        (d[:, None] == np.arange(T)).astype(float)
        if baseline == "saturated"
        else np.stack([np.ones(d.size), d], 1)
    )
    z = []
    if absolute in ("query", "both"):
        z.append((i[:, None] == np.arange(T)).astype(float))
    if absolute in ("key", "both"):
        z.append((j[:, None] == np.arange(T)).astype(float))
    return x, np.concatenate([x] + z, axis=1)


def dense_r2(y: np.ndarray, mask: np.ndarray, fit: str) -> tuple[float, float]:
    """(R²(B), R²(F)) of one map by lstsq on the dense (pairs × parameters) design."""
    x, f = dense_design(mask, fit)
    yy = y[mask]
    sst = ((yy - yy.mean()) ** 2).sum()

    def ssr(a):
        coef = np.linalg.lstsq(a, yy, rcond=None)[0]
        r = yy - a @ coef
        return r @ r

    return 1 - ssr(x) / sst, 1 - ssr(f) / sst


def projector_delta(mask: np.ndarray, fit: str) -> np.ndarray:
    """P_F − P_B over the pairs (dense), the projector whose squared norm is ΔSS."""
    x, f = dense_design(mask, fit)
    proj = lambda a: a @ np.linalg.pinv(a)  # noqa: E731
    return proj(f) - proj(x)


def causal(y: np.ndarray) -> np.ndarray:
    T = y.shape[-1]
    return np.where(np.tril(np.ones((T, T), dtype=bool)), y, np.nan)


def relative_map(T: int, f) -> np.ndarray:
    i, j = np.indices((T, T))
    return causal(f(np.clip(i - j, 0, None).astype(float)))


def F_REL(d: np.ndarray) -> np.ndarray:
    """A non-linear relative profile (several frequencies plus a decay, like RoPE logits)."""
    return np.cos(0.9 * d) + 2.0 * np.exp(-d / 4.0) + 0.1 * np.sin(0.13 * d * d)


def synthetic_scores(
    batch: int,
    heads: int,
    T: int,
    seed: int,
    *,
    bidirectional: bool = False,
    window: int | None = None,
) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    rel = torch.cos(0.8 * (i - j).float()) + torch.exp(-(i - j).abs().float() / 3)
    sink = torch.where(j == 0, 2.0, 0.0)
    s = (
        rel
        + sink * torch.rand(batch, heads, 1, 1, generator=g)
        + 0.5 * torch.randn(batch, heads, T, T, generator=g)
    )
    if not bidirectional:
        keep = j <= i
        if window is not None:
            keep = keep & (i - j < window)
        s = torch.where(keep, s, torch.nan)
    return s.float()


REDUCER_KW = dict(
    fits=("saturated+query", "linear+key", "saturated+both"), windows=("all", "early6", "late")
)


def run_reducer(batches, **kw):
    red = L_reducers.LeakageReducer(**{**REDUCER_KW, **kw})
    for seq_ids, per_layer in batches:
        for layer, s in enumerate(per_layer):
            red.update(layer, s, seq_ids)
    return red.result(), red


def make_batches(T=12, heads=2, seed=0, **kw):
    out = []
    sid = 0
    for b, size in enumerate((3, 2, 3)):
        ids = np.arange(sid, sid + size)
        sid += size
        out.append(
            (
                ids,
                [
                    synthetic_scores(size, heads, T, seed + 10 * b + layer, **kw)
                    for layer in range(2)
                ],
            )
        )
    return out
