"""The per-cell work of paper 2's extraction reducers: each query row's log partition function
and the sums the leakage fits read, from one batch of score maps, tile by tile.

Scores are float32 pre-softmax logits, NaN where the run's mask hides a key. Every elementwise
pass runs in float64 on a tile of maps small enough for its temporaries to stay in the cache
(:data:`TILE_CELLS`; on a GPU the reducers' chunk); every reduction accumulates in float64.

**log Z** (:func:`row_log_z`, ``torch.logsumexp``'s arithmetic without the finite pattern): one
batch's log Z serves every reducer fed the same score tensor (:func:`shared_log_z`).

**Sums** (:func:`tile_sums`): x = the logits on the measured pairs (0 elsewhere), centred by
their mean there; the query rows are cut into blocks at every window bound, and per block the
sums of x's columns, of its offsets (its diagonals as columns, :func:`_diagonals`) and of their
squares (a window sums its blocks). The log-attention a = s − ℓ_i is never formed: centred,
a − ā = (s − s̄) − u_i (u = ℓ − ℓ̄), so its sums are the logits' less those of u
(:func:`~causalpos.paper2.extraction.metric.windowed_query_sums`), and Σ (x − u_i)² =
Σ x² − 2 Σ u_i x + Σ u_i² needs one more pass, each block's cross sum Σ_i u_i V[i, ·].
A measured pair that is not finite makes :func:`tile_sums` return None (the caller names it).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

#: Score cells per tile of the elementwise passes on CPU (at least one map a tile): a tile's two
#: float64 temporaries (16 bytes a cell) stay in the cache.
TILE_CELLS = 1 << 18


def map_tiles(n_maps: int, cells_per_map: int, device: torch.device) -> Iterator[slice]:
    """Slices of ``n_maps`` maps, :data:`TILE_CELLS` cells each on CPU (at least one map), the
    reducers' chunk on a GPU (:func:`causalpos.capture.reducers.work_cells`)."""
    from causalpos.capture.reducers import work_cells

    cells = TILE_CELLS if torch.device(device).type == "cpu" else work_cells(device)
    per = max(1, cells // max(1, cells_per_map))
    for start in range(0, n_maps, per):
        yield slice(start, min(start + per, n_maps))


def row_log_z(s: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
    """log Z (..., T) float64 of scores ``s`` (..., T, T), NaN where masked: the logsumexp of each
    row over its finite keys (−inf for a row without one); ``x``: ``s`` in float64, if at hand.

    The shift is the row's largest finite score. Where the result is not finite (a row without a
    finite key, an infinite score) the tile is recomputed as ``torch.logsumexp`` over the float64
    scores with every non-finite key at −inf, which treats an infinite score as masked.
    """
    inf = -torch.inf
    shift = torch.nan_to_num(s, nan=inf, posinf=inf, neginf=inf).amax(dim=-1, keepdim=True)
    shift = shift.to(torch.float64)
    if x is None:
        e = s.to(torch.float64, copy=True).sub_(shift)
    else:
        e = torch.sub(x, shift)
    lz = e.exp_().nansum(dim=-1).log_().add_(shift[..., 0])
    if not bool(torch.isfinite(lz).all()):
        x = s.to(torch.float64)
        lz = torch.logsumexp(torch.where(torch.isfinite(x), x, -torch.inf), dim=-1)
    return lz


def batch_log_z(scores: torch.Tensor) -> torch.Tensor:
    """:func:`row_log_z` of every map of ``scores`` (b, h, T, T), tile by tile: (b, h, T)."""
    b, h, T = scores.shape[0], scores.shape[1], scores.shape[-1]
    flat = scores.reshape(b * h, T, T)
    out = torch.empty((b * h, T), dtype=torch.float64, device=scores.device)
    for sl in map_tiles(b * h, T * T, scores.device):
        out[sl] = row_log_z(flat[sl])
    return out.reshape(b, h, T)


class _LastLogZ:
    """The log Z of the last score tensor computed, for the next reducer fed the same tensor
    (the capture hands one tensor to every reducer of a layer, read-only: Reducer protocol).

    The tensor is recognised by identity (a weak reference), its data pointer, shape and strides,
    and, where it tracks one (not an inference-mode tensor), its version counter, which any
    in-place write advances."""

    def __init__(self) -> None:
        self._ref: weakref.ref | None = None
        self._key: tuple | None = None
        self._lz: torch.Tensor | None = None

    @staticmethod
    def _key_of(t: torch.Tensor) -> tuple:
        version = None if t.is_inference() else t._version
        return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, version)

    def get(self, scores: torch.Tensor) -> torch.Tensor | None:
        if self._ref is not None and self._ref() is scores and self._key == self._key_of(scores):
            return self._lz
        return None

    def put(self, scores: torch.Tensor, lz: torch.Tensor) -> None:
        self._ref, self._key, self._lz = weakref.ref(scores), self._key_of(scores), lz


_LAST = _LastLogZ()


def shared_log_z(scores: torch.Tensor, lz: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`batch_log_z` of ``scores`` (b, h, T, T), computed once for every reducer fed the
    same tensor; ``lz`` already computed (e.g. tile by tile with the sums) is recorded as such."""
    if lz is None:
        lz = _LAST.get(scores)
        if lz is not None:
            return lz
        lz = batch_log_z(scores)
    _LAST.put(scores, lz)
    return lz


def cached_log_z(scores: torch.Tensor) -> torch.Tensor | None:
    """The log Z :func:`shared_log_z` recorded for ``scores`` (None: not computed yet)."""
    return _LAST.get(scores)


def key0_attention(scores: torch.Tensor, lz: torch.Tensor) -> torch.Tensor:
    """Mean attention to key 0 over query rows i ≥ 1, (b, h) float64: exp(s_i0 − log Z_i), 0
    where key 0 is masked (a sliding window that no longer reaches it)."""
    s0 = scores[..., 1:, 0].to(torch.float64)
    att = torch.where(torch.isfinite(s0), torch.exp(s0 - lz[..., 1:]), 0.0)
    return att.mean(dim=-1)


@dataclass(frozen=True)
class PairKit:
    """The data-free tensors of one pair set and its query windows on one device (float64 unless
    stated): ``off`` (T, T) bool the pairs not measured, ``wf`` (T, T) the measured pairs, ``diag``
    (T, T) [i, d] = 1 where pair (i, i − d) is measured, ``n_i`` (T,) pairs per query row, ``n``
    the pair count, ``band`` W where the pairs are every 0 ≤ i − j < W of rows i ≥ 1 (a causal
    band: the pairs of a global or sliding layer; None otherwise), ``blocks`` the query rows
    [lo, hi) of each block (the rows cut at every window bound), ``win_blocks`` (window, block)
    the blocks of each window, ``win_rows`` (window, T) each window's query rows."""

    off: torch.Tensor
    wf: torch.Tensor
    diag: torch.Tensor
    n_i: torch.Tensor
    n: int
    band: int | None
    blocks: tuple[tuple[int, int], ...]
    win_blocks: torch.Tensor
    win_rows: torch.Tensor


def pair_kit(base: np.ndarray, bounds: Sequence[tuple[int, int]], device: torch.device) -> PairKit:
    """The :class:`PairKit` of the measured pairs ``base`` (T, T) bool, which lie in the lower
    triangle outside row 0, and the windows' query rows ``bounds`` [(lo, hi), ...], lo ≥ 1."""
    T = base.shape[0]
    if np.triu(base, 1).any() or base[0].any() or min(lo for lo, _ in bounds) < 1:
        raise ValueError("pair_kit: the measured pairs must lie in the lower triangle, row 0 out")
    cuts = sorted({c for lo, hi in bounds for c in (lo, hi)})
    blocks = tuple(zip(cuts[:-1], cuts[1:], strict=True))
    rows = np.arange(T)
    win_blocks = np.array(
        [[float(lo <= b_lo and b_hi <= hi) for b_lo, b_hi in blocks] for lo, hi in bounds]
    )
    win_rows = np.stack([(rows >= lo) & (rows < hi) for lo, hi in bounds]).astype(np.float64)
    i, j = np.nonzero(base)
    diag = np.zeros((T, T))
    diag[i, i - j] = 1.0
    band = None
    if i.size:
        w = int((i - j).max()) + 1
        d = rows[:, None] - rows[None, :]
        if np.array_equal(base, (d >= 0) & (d < w) & (rows >= 1)[:, None]):
            band = w
    t = lambda a: torch.as_tensor(np.array(a, dtype=np.float64), device=device)  # noqa: E731
    return PairKit(
        off=torch.as_tensor(~base, device=device),
        wf=t(base),
        diag=t(diag),
        n_i=t(base.sum(axis=1)),
        n=int(base.sum()),
        band=band,
        blocks=blocks,
        win_blocks=t(win_blocks),
        win_rows=t(win_rows),
    )


def _diagonals(x: torch.Tensor) -> torch.Tensor:
    """x's diagonals as columns for the rows i ≥ 1 (x (m, T, T) contiguous, 0 above the diagonal
    and on row 0), without a gather: a strided view V (m, T − 1, T) with
    V[m, i − 1, e] = x[m, i, i − (T−1−e)], and 0 where that key is < 0.

    Flat index i·T + i − d = i(T+1) − (T−1) + e: where i − d < 0 it reads row i − 1 at column
    T + i − d > i − 1, above the diagonal, hence 0; from row 1 on it never reads before the map's
    first element nor past its last (i = e = T − 1 reads element T² − 1)."""
    m, t, _ = x.shape
    return x.as_strided((m, t - 1, t), (t * t, t + 1, 1), x.storage_offset() + 2)


def _on_pairs(x: torch.Tensor, kit: PairKit) -> torch.Tensor:
    """``x`` (m, T, T) float64 with every cell off the measured pairs set to 0, in place (a
    causal band by triangle selections, any other pair set by its mask)."""
    if kit.band is None:
        return x.masked_fill_(kit.off, 0.0)
    x.tril_()
    if kit.band < x.shape[-1]:
        x.triu_(1 - kit.band)
    x[:, 0] = 0.0
    return x


def tile_sums(
    x: torch.Tensor, lz: torch.Tensor, kit: PairKit
) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
    """The logits' centred sums of maps ``x`` (m, T, T) on the pairs of ``kit``, T ≥ 2, and the
    cross sums that give the log-attention's from them (module docstring), for log Z ``lz`` (m, T).
    ``x``: a contiguous float64 copy of the scores, overwritten.

    Returns ``(sums, u)``: ``rows`` (m, T) each query row's sum; ``cols``, ``off``, ``off2``,
    ``cross`` (block, m, T) each block's column sums, offset sums (index d = i − j), offset sums
    of squares and of the centred logits weighted by u; ``u`` (m, T) log Z centred over the
    pairs. None where a measured pair of some map is not finite.
    """
    x = _on_pairs(x, kit)
    total = x.sum(dim=(-2, -1))
    if not bool(torch.isfinite(total).all()):
        return None
    n = max(kit.n, 1)
    x.addcmul_((total / n)[:, None, None], kit.wf, value=-1.0)  # s − s̄ on the pairs, 0 elsewhere
    v = _diagonals(x)
    u = lz - ((lz * kit.n_i).sum(dim=-1) / n)[:, None]
    sums = {
        "rows": x.sum(dim=-1),
        "cols": torch.stack([x[:, lo:hi].sum(dim=-2) for lo, hi in kit.blocks]),
        "off": torch.stack([v[:, lo - 1 : hi - 1].sum(dim=-2) for lo, hi in kit.blocks]),
        "cross": torch.stack(
            [torch.bmm(u[:, None, lo:hi], v[:, lo - 1 : hi - 1])[:, 0] for lo, hi in kit.blocks]
        ),
    }
    x.mul_(x)  # v now reads the squares
    sums["off2"] = torch.stack([v[:, lo - 1 : hi - 1].sum(dim=-2) for lo, hi in kit.blocks])
    for k in ("off", "cross", "off2"):
        sums[k] = sums[k].flip(-1)  # diagonal e = T − 1 − d -> offset d
    return sums, u
