"""The leakage of a batch of maps in every query window and fit at once (the extraction reducer's
arithmetic, :class:`causalpos.paper2.extraction.reducers.LeakageReducer`).

The windows' designs of one fit are stacked (:class:`DesignStack`), so each fit is solved for all
windows and both targets (logit, log-attention) by a few batched tensor operations instead of one
small solve per window × fit × target; the sums, the fits and the split are those of
:mod:`causalpos.paper2.extraction.metric` (:func:`~causalpos.paper2.extraction.metric.target_sums`,
:func:`~causalpos.paper2.extraction.metric.window_sums`, :func:`~causalpos.paper2.extraction.metric.fit_sums`,
:func:`~causalpos.paper2.extraction.metric.r2_terms`), term for term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from causalpos.paper2.extraction.design import Design, build_design, query_window
from causalpos.paper2.extraction.metric import (
    TARGETS,
    _quad,
    c_vector,
    delta_r2,
    fit_sums,
    query_centred,
    r2_terms,
    target_sums,
    window_sums,
    windowed_query_sums,
)

#: Design arrays per map (broadcast over targets and maps: one leading singleton) and per offset
#: (two: they multiply (window, target, map, offset) sums elementwise).
_MATRICES = ("gx_pinv", "b", "m_pinv", "c")
_VECTORS = ("h", "c_diag", "n_off")


class DesignStack:
    """The designs of one fit on several pair sets (the query windows), stacked on a leading
    axis: quacks like a :class:`~causalpos.paper2.extraction.design.Design` for
    :func:`~causalpos.paper2.extraction.metric.c_vector`, :func:`~causalpos.paper2.extraction.metric.fit_sums` and
    :func:`~causalpos.paper2.extraction.metric._quad` on sums shaped (window, target, map, T)."""

    def __init__(self, designs: Sequence[Design]) -> None:
        if not designs:
            raise ValueError("DesignStack: no designs")
        d0 = designs[0]
        for d in designs:
            if (d.baseline, d.absolute, d.landmark, d.seq_len) != (
                d0.baseline,
                d0.absolute,
                d0.landmark,
                d0.seq_len,
            ):
                raise ValueError("DesignStack: the designs of one stack must be of one fit and T")
        self.designs = tuple(designs)
        self.baseline, self.absolute, self.landmark = d0.baseline, d0.absolute, d0.landmark
        self._torch: dict[str, dict[str, torch.Tensor]] = {}

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """Each design's tensors stacked on axis 0, with singleton axes for the targets and
        maps; ``n`` (window, 1, 1) the pair counts; ``offsets`` (T,) shared (cached)."""
        key = str(device)
        if key not in self._torch:
            ts = [d.tensors(device) for d in self.designs]
            out = {k: torch.stack([t[k] for t in ts]) for k in _MATRICES}
            out.update({k: torch.stack([t[k] for t in ts])[:, None] for k in _VECTORS})
            out["offsets"] = ts[0]["offsets"]
            counts = [float(d.n_pairs) for d in self.designs]
            out["n"] = torch.tensor(counts, dtype=torch.float64, device=device)[:, None]
            self._torch[key] = out
        return self._torch[key]


@dataclass(frozen=True)
class WindowPlan:
    """Everything about one pair set that does not depend on the data: per window its rows, pair
    count, and (where it has ≥ 2 pairs) its designs; per fit the stack of those designs."""

    bounds: tuple[tuple[int, int], ...]  # (lo, hi) query rows of each window
    n_pairs: np.ndarray  # (window,) int64
    valid: tuple[int, ...]  # windows with ≥ 2 pairs (the others are NaN)
    floors: np.ndarray  # (window, fit) k/(N−1), NaN where not valid
    stacks: tuple[DesignStack, ...]  # per fit, over the valid windows


def plan_windows(base: np.ndarray, windows: Sequence[str], fits: Sequence[str]) -> WindowPlan:
    """The :class:`WindowPlan` of the measured pairs ``base`` (T, T) bool."""
    T = base.shape[0]
    rows = np.arange(T)
    bounds, counts, valid, designs = [], [], [], []
    floors = np.full((len(windows), len(fits)), np.nan)
    for wi, wname in enumerate(windows):
        lo, hi = query_window(wname, T)
        w_np = base & ((rows >= lo) & (rows < hi))[:, None]
        bounds.append((lo, hi))
        counts.append(int(w_np.sum()))
        if counts[-1] < 2:
            continue  # too few pairs in this window (e.g. a short sequence): NaN
        valid.append(wi)
        designs.append([build_design(w_np, fit) for fit in fits])
        floors[wi] = [d.floor for d in designs[-1]]
    stacks = (
        tuple(DesignStack([d[fi] for d in designs]) for fi in range(len(fits))) if valid else ()
    )
    return WindowPlan(
        tuple(bounds), np.asarray(counts, dtype=np.int64), tuple(valid), floors, stacks
    )


def query_sums_windows(
    lz: torch.Tensor, w_np: np.ndarray, n_pairs: int, bounds: Sequence[tuple[int, int]]
) -> dict[str, torch.Tensor]:
    """:func:`causalpos.paper2.extraction.metric.query_sums` of every window in ``bounds`` stacked on a
    leading axis: ``rows``, ``cols``, ``off``, ``off2`` (window, ..., T), ``S``, ``Q``
    (window, ...)."""
    wf, wsk, n_i, lc = query_centred(lz, w_np, n_pairs)
    lw = lc.new_zeros((len(bounds),) + tuple(lc.shape))
    for k, (lo, hi) in enumerate(bounds):
        lw[k, ..., lo:hi] = lc[..., lo:hi]
    return windowed_query_sums(lw, wf, wsk, n_i)


def window_leakage(
    s: torch.Tensor,
    a: torch.Tensor,
    lz: torch.Tensor,
    base: np.ndarray,
    plan: WindowPlan,
    n_fits: int,
    expected: Sequence[int] = (),
) -> dict[str, torch.Tensor]:
    """Leakage of every map of ``s`` (logits) and ``a`` (log-attention), (b, h, T, T) float64,
    in every window and fit of ``plan`` on the measured pairs ``base`` (T, T) bool.

    ``lz`` (b, h, T): log Z of each query row. ``expected``: indices of the windows whose
    expected-map sums are kept. Returns float64 tensors, NaN in windows without a fit:
    ``leak_r2_base``, ``leak_r2_full``, ``leak_delta``, ``leak_null`` (b, h, window, fit,
    target), ``leak_sst`` (b, h, window, target), ``leak_split`` (b, h, window, fit, term), and
    with ``expected`` ``leak_offsum`` (b, h, expected window, target, T), ``leak_key0sum``
    (b, h, expected window, target), ``leak_rowsum`` (b, h, target, T).
    """
    b, h, T = s.shape[0], s.shape[1], s.shape[-1]
    m, nw = b * h, len(plan.bounds)
    nan = dict(dtype=torch.float64, device=s.device)
    out = {
        k: torch.full((nw, n_fits, 2, m), torch.nan, **nan)
        for k in ("leak_r2_base", "leak_r2_full", "leak_delta", "leak_null")
    }
    out["leak_sst"] = torch.full((nw, 2, m), torch.nan, **nan)
    out["leak_split"] = torch.full((nw, n_fits, 4, m), torch.nan, **nan)
    n_base = int(base.sum())
    # Both targets' row-resolved sums in one pass each; the windows then sum row ranges.
    first = min(lo for lo, _ in plan.bounds)  # ≥ 1: row 0 is never measured
    ts = target_sums((s, a), torch.as_tensor(base, device=s.device), n_base, first_row=first)
    ts["row_sums"] = ts["yz"].sum(dim=-1)  # (2 × map, T), for every window
    per = {wi: window_sums(ts, *plan.bounds[wi]) for wi in plan.valid}
    res = {}
    if expected:
        none = torch.full((2, b, h, T), torch.nan, **nan)  # a window without a fit: NaN
        off = [per[wi]["off"] if wi in per else none for wi in expected]
        key0 = [per[wi]["cols"][..., 0] if wi in per else none[..., 0] for wi in expected]
        # (target, b, h, window, ...) -> (b, h, window, target, ...)
        res["leak_offsum"] = torch.stack(off, dim=3).permute(1, 2, 3, 0, 4)
        res["leak_key0sum"] = torch.stack(key0, dim=3).permute(1, 2, 3, 0)
        res["leak_rowsum"] = ts["row_sums"].reshape(2, b, h, T).permute(1, 2, 0, 3)
    if plan.valid:
        valid = list(plan.valid)
        sums = {
            k: torch.stack([per[wi][k] for wi in valid]).reshape(len(valid), 2 * m, -1)
            for k in ("rows", "cols", "off", "off2")
        }
        sums["S"], sums["Q"] = sums["off"].sum(dim=-1), sums["off2"].sum(dim=-1)
        l_sums = query_sums_windows(lz.reshape(m, T), base, n_base, [plan.bounds[w] for w in valid])
        for fi, stack in enumerate(plan.stacks):
            f = {
                k: v.reshape(len(valid), 2, m, -1).squeeze(-1)
                for k, v in fit_sums(sums, stack).items()
            }
            for key, value in r2_terms(f).items():
                out[f"leak_{key}"][valid, fi] = value
            out["leak_sst"][valid] = f["sst"]
            c_s, c_l = f["c"][:, 0], c_vector(l_sums, stack)[0]
            terms = torch.stack(
                [
                    f["dss"][:, 0],
                    _quad(c_l, c_l, stack),
                    -2.0 * _quad(c_s, c_l, stack),
                    f["dss"][:, 1],
                ],
                dim=1,
            )  # (window, term, map)
            out["leak_split"][valid, fi] = delta_r2(terms, f["sst"][:, 1:2])
    # (window, [fit,] target|term, map) -> (b, h, window, [fit,] target|term)
    for k, v in out.items():
        res[k] = v.movedim(-1, 0).reshape((b, h) + tuple(v.shape[:-1]))
    return res


__all__ = ["TARGETS", "DesignStack", "WindowPlan", "plan_windows", "window_leakage"]
