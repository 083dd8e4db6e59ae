"""The leakage of a batch of maps in every query window and fit at once (the arithmetic of
:class:`~causalpos.paper2.extraction.reducers.LeakageReducer`): the windows' designs of one fit are
stacked (:class:`DesignStack`), so each fit is solved for all windows and both targets by a few
batched tensor operations, from :func:`~causalpos.paper2.extraction.mapsums.tile_sums`' sums and
term for term as :mod:`causalpos.paper2.extraction.metric` fits one map.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from causalpos.paper2.extraction.design import Design, build_design, query_window
from causalpos.paper2.extraction.mapsums import PairKit
from causalpos.paper2.extraction.metric import (
    c_vector,
    delta_r2,
    fit_sums,
    r2_terms,
    windowed_query_sums,
)

#: Design arrays per map (broadcast over targets and maps: one leading singleton) and per offset
#: (two: they multiply (window, target, map, offset) sums elementwise).
_MATRICES = ("gx_pinv", "b", "m_pinv", "c")
_VECTORS = ("h", "c_diag", "n_off", "null_q", "null_o")


class DesignStack:
    """The designs of one fit on several pair sets (the query windows), stacked on a leading
    axis: quacks like a :class:`~causalpos.paper2.extraction.design.Design` for
    :func:`~causalpos.paper2.extraction.metric.c_vector` and
    :func:`~causalpos.paper2.extraction.metric.fit_sums` on sums shaped (window, target, map, T)."""

    def __init__(self, designs: Sequence[Design]) -> None:
        if not designs:
            raise ValueError("DesignStack: no designs")
        if len({(d.baseline, d.absolute, d.landmark, d.seq_len) for d in designs}) > 1:
            raise ValueError("DesignStack: the designs of one stack must be of one fit and T")
        d0 = designs[0]
        self.designs = tuple(designs)
        self.baseline, self.absolute, self.landmark = d0.baseline, d0.absolute, d0.landmark
        self.c_zero = all(d.c_zero for d in designs)
        self._torch: dict[str, dict[str, torch.Tensor]] = {}

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """Each design's tensors stacked on axis 0, with singleton axes for the targets and
        maps; ``n`` (window, 1, 1) the pair counts; ``offsets`` (T,) shared (cached)."""
        key = str(device)
        if key not in self._torch:
            ts = [d.tensors(device) for d in self.designs]
            out = {k: torch.stack([t[k] for t in ts]) for k in _MATRICES}
            out.update({k: torch.stack([t[k] for t in ts])[:, None] for k in _VECTORS})
            if all("gx_diag" in t for t in ts):
                out["gx_diag"] = torch.stack([t["gx_diag"] for t in ts])[:, None]
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
    stacks = tuple(DesignStack(per_fit) for per_fit in zip(*designs, strict=True))
    return WindowPlan(
        tuple(bounds), np.asarray(counts, dtype=np.int64), tuple(valid), floors, stacks
    )


def window_leakage(
    sums: dict[str, torch.Tensor],
    u: torch.Tensor,
    kit: PairKit,
    plan: WindowPlan,
    n_fits: int,
    expected: Sequence[int] = (),
) -> dict[str, torch.Tensor]:
    """Leakage of every map in every query window and fit of ``plan`` from the maps' sums.

    ``sums``: :func:`causalpos.paper2.extraction.mapsums.tile_sums`' sums of all b × h maps of a
    batch, concatenated on the map axis (``rows`` (b × h, T), ``cols``, ``off``, ``off2``,
    ``cross`` (block, b × h, T)); ``u`` (b, h, T) log Z centred over the pairs; ``kit`` the
    :class:`~causalpos.paper2.extraction.mapsums.PairKit` of the plan's pairs and windows.
    ``expected``: indices of the windows whose expected-map sums are kept. Returns float64
    tensors, NaN in windows without a fit: ``leak_r2_base``, ``leak_r2_full``, ``leak_delta``,
    ``leak_null`` (b, h, window, fit, target), ``leak_sst`` (b, h, window, target),
    ``leak_split`` (b, h, window, fit, term), and with ``expected`` ``leak_offsum`` (b, h,
    expected window, target, T), ``leak_key0sum`` (b, h, expected window, target),
    ``leak_rowsum`` (b, h, target, T).
    """
    b, h, T = u.shape
    m, nw = b * h, len(plan.bounds)
    nan = dict(dtype=torch.float64, device=u.device)
    out = {
        k: torch.full((nw, n_fits, 2, m), torch.nan, **nan)
        for k in ("leak_r2_base", "leak_r2_full", "leak_delta", "leak_null")
    }
    out["leak_sst"] = torch.full((nw, 2, m), torch.nan, **nan)
    out["leak_split"] = torch.full((nw, n_fits, 4, m), torch.nan, **nan)
    # Each window's logit sums (window, map, T): its blocks' sums, its rows' sums; those of
    # ℓ − ℓ̄ on its rows (the split's); the log-attention's, the logits' less ℓ's.
    lw = u.reshape(m, T)[None] * kit.win_rows[:, None, :]
    l_sums = windowed_query_sums(lw, kit.wf, kit.diag, kit.n_i)
    s_sums = {
        k: torch.einsum("wc,cmx->wmx", kit.win_blocks, sums[k])
        for k in ("cols", "off", "off2", "cross")
    }
    s_sums["rows"] = sums["rows"][None] * kit.win_rows[:, None, :]
    a_sums = {k: s_sums[k] - l_sums[k] for k in ("rows", "cols", "off")}
    a_sums["off2"] = s_sums["off2"] - 2.0 * s_sums["cross"] + l_sums["off2"]
    per = {k: torch.stack([s_sums[k], a_sums[k]], dim=1) for k in a_sums}  # (window, target, ...)
    row_sums = torch.stack([sums["rows"], sums["rows"] - kit.n_i * u.reshape(m, T)])
    res = {}
    if expected:
        off = torch.full((2, m, len(expected), T), torch.nan, **nan)
        key0 = torch.full((2, m, len(expected)), torch.nan, **nan)
        for k, wi in enumerate(expected):
            if wi in plan.valid:  # a window without a fit: NaN
                off[:, :, k] = per["off"][wi]
                key0[:, :, k] = per["cols"][wi][..., 0]
        # (target, b, h, window, ...) -> (b, h, window, target, ...)
        res["leak_offsum"] = off.reshape(2, b, h, -1, T).permute(1, 2, 3, 0, 4)
        res["leak_key0sum"] = key0.reshape(2, b, h, -1).permute(1, 2, 3, 0)
        res["leak_rowsum"] = row_sums.reshape(2, b, h, T).permute(1, 2, 0, 3)
    if plan.valid:
        valid = list(plan.valid)
        fs = {
            k: per[k][valid].reshape(len(valid), 2 * m, T) for k in ("rows", "cols", "off", "off2")
        }
        fs["S"], fs["Q"] = fs["off"].sum(dim=-1), fs["off2"].sum(dim=-1)
        l_sums = {k: v[valid] for k, v in l_sums.items()}
        for fi, stack in enumerate(plan.stacks):
            f = {
                k: v.reshape(len(valid), 2, m, -1).squeeze(-1)
                for k, v in fit_sums(fs, stack).items()
            }
            for key, value in r2_terms(f).items():
                out[f"leak_{key}"][valid, fi] = value
            out["leak_sst"][valid] = f["sst"]
            c_l = c_vector(l_sums, stack)[0]
            cm_l = c_l @ stack.tensors(u.device)["m_pinv"]
            terms = torch.stack(
                [
                    f["dss"][:, 0],
                    (cm_l * c_l).sum(dim=-1),  # c_lᵀ M⁺ c_l; c_sᵀ M⁺ c_l below
                    -2.0 * (f["cm"][:, 0] * c_l).sum(dim=-1),
                    f["dss"][:, 1],
                ],
                dim=1,
            )  # (window, term, map)
            out["leak_split"][valid, fi] = delta_r2(terms, f["sst"][:, 1:2])
    # (window, [fit,] target|term, map) -> (b, h, window, [fit,] target|term)
    for k, v in out.items():
        res[k] = v.movedim(-1, 0).reshape((b, h) + tuple(v.shape[:-1]))
    return res
