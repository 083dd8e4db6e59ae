"""Streaming reducers of captured score maps: per-head moments and per-group head-averaged maps.

Each reducer implements :class:`Reducer`: ``update(layer, scores, seq_ids)`` per layer and batch,
``result()`` per shard, ``merge(parts)`` across shards (exact).
"""

from __future__ import annotations

import errno
import functools
import math
import mmap
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import torch
import xarray as xr

from causalpos.capture import merging
from causalpos.models import footprint

#: Score elements per float64 chunk on CPU (bounds the float64 temporaries of the reducers).
_CPU_TILE = 1 << 18

#: Score cells per chunk of a batch for float64 whole-map reducers, on CPU and at most on a GPU.
WORK_CELLS, WORK_CELLS_CUDA = footprint.WORK_CELLS, footprint.WORK_CELLS_CUDA


@functools.cache
def work_cells(device: torch.device | str) -> int:
    """Score cells per chunk of a batch that the reducers work through on ``device``."""
    device = torch.device(device)
    if device.type != "cuda":
        return WORK_CELLS
    total = torch.cuda.get_device_properties(device).total_memory
    return int(max(WORK_CELLS, min(WORK_CELLS_CUDA, total // 1024)))


@runtime_checkable
class Reducer(Protocol):
    """Streams a statistic of the scores; memory independent of the number of sequences."""

    name: str

    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        """Fold in one layer of one batch: ``scores (batch, head, query, key)`` float32
        pre-softmax logits (post-RoPE, model scaling, GQA keys repeated), NaN where masked;
        read-only (shared, and the buffer is reused for the next layer: copy what you keep).
        ``seq_ids (batch,)``: the global sequence indices of the rows."""

    def result(self) -> xr.Dataset: ...  # this shard's contribution

    @classmethod
    def merge(cls, parts: Sequence[xr.Dataset]) -> xr.Dataset: ...  # exact merge of results


def reducer_path(reducer: Reducer | type) -> str:
    """``module:qualname`` of a reducer class: what stores record to find its ``merge``."""
    cls = reducer if isinstance(reducer, type) else type(reducer)
    return f"{cls.__module__}:{cls.__qualname__}"


def _state_zeros(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Zeroed float64 reducer state; on CPU in its own anonymous memory map.

    glibc keeps freed ~20 MB blocks in its heap, so state freed layer by layer in ``result()``
    would not shrink the process (measured: peak = state + output). A private mapping is
    returned to the system when the tensor dies, so ``result()`` can hand memory over from
    state to output and the peak stays near the state's size.
    """
    nbytes = max(math.prod(shape) * 8, 8)
    try:
        if device.type != "cpu":
            return torch.zeros(shape, dtype=torch.float64, device=device)
        buf = mmap.mmap(-1, nbytes)  # anonymous pages are zero
    except (OSError, MemoryError, torch.OutOfMemoryError) as exc:
        if isinstance(exc, OSError) and exc.errno != errno.ENOMEM:
            raise
        raise MemoryError(
            f"capture: the reducer state of one layer, float64 {tuple(shape)} "
            f"({nbytes / 2**30:.2f} GiB), does not fit in the memory of {device}. It grows with "
            "seq_len² × heads (per layer, two such arrays for the score moments, one per group "
            "for the group means), not with the batch: lower datasets.<name>.seq_len, or "
            "extract.n_groups (group means), or run on a device with more memory (the config's "
            "`device`); extract.batch_size and extract.shard_size do not change it"
        ) from exc
    return torch.from_numpy(
        np.frombuffer(buf, dtype=np.float64, count=math.prod(shape)).reshape(shape)
    )


def _out_view(target: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """A tensor to compute into: ``target`` itself on CPU, a device temporary otherwise."""
    if like.device.type == "cpu":
        return torch.from_numpy(target)
    return torch.empty(target.shape, dtype=torch.float64, device=like.device)


def _copy_back(target: np.ndarray, computed: torch.Tensor) -> None:
    if computed.device.type != "cpu":
        target[...] = computed.cpu().numpy()


def _coords(n_layers: int, n_heads: int | None, n_query: int, n_key: int) -> dict:
    c = {"layer": np.arange(n_layers), "query": np.arange(n_query), "key": np.arange(n_key)}
    if n_heads is not None:
        c["head"] = np.arange(n_heads)
    return c


class ScoreMoments:
    """Per (layer, head) mean and sum of squared deviations of the score maps, in float64.

    Accumulates ``Σ x`` and ``Σ x²`` per cell in float64 (a float32 score squared is exact in
    float64), one sequence at a time so temporaries are one (head, query, key) map.
    :meth:`result` gives ``score_mean``, ``score_m2`` (``Σ (x - mean)²``; variance =
    ``score_m2 / (n_sequences - 1)``) and ``n_sequences``; :meth:`merge` combines shards with
    Chan et al.'s parallel formula. Relative precision of ``score_m2`` is about
    ``1e-16 · (mean² / var + 1)``, far below the float32 resolution of the scores themselves.
    Memory: two float64 (layer, head, query, key) arrays on the scores' device.
    """

    name = "score_moments"

    def __init__(self) -> None:
        self._s1: dict[int, torch.Tensor] = {}
        self._s2: dict[int, torch.Tensor] = {}
        self._n: dict[int, int] = {}
        self._buf: torch.Tensor | None = None
        self._consumed = False

    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        if self._consumed:
            raise RuntimeError(f"{self.name}: update() after result(); use a new reducer per shard")
        b, h, tq, tk = scores.shape
        if layer not in self._s1:
            self._s1[layer] = _state_zeros((h, tq, tk), scores.device)
            self._s2[layer] = _state_zeros((h, tq, tk), scores.device)
            self._n[layer] = 0
        s1, s2 = self._s1[layer], self._s2[layer]
        if s1.shape != (h, tq, tk):
            raise ValueError(
                f"{self.name}: layer {layer} scores {tuple(scores.shape)} after {tuple(s1.shape)}"
            )
        x = scores.reshape(b, -1)
        s1f, s2f = s1.view(-1), s2.view(-1)
        n = s1f.numel()
        # On CPU, tiles of 2^18 cells keep the state's slice in cache while all sequences of
        # the batch are added (measured 20-40 % faster than whole maps, which stream the
        # float64 state from memory once per sequence). On a GPU, whole maps.
        step = min(n, _CPU_TILE) if scores.device.type == "cpu" else n
        if self._buf is None or self._buf.numel() < step or self._buf.device != s1.device:
            self._buf = torch.empty(step, dtype=torch.float64, device=s1.device)
        for start in range(0, n, step):
            stop = min(start + step, n)
            buf, t1, t2 = self._buf[: stop - start], s1f[start:stop], s2f[start:stop]
            for i in range(b):
                buf.copy_(x[i, start:stop])  # float32 -> float64: x² below is exact
                t1.add_(buf)
                t2.addcmul_(buf, buf)
        self._n[layer] += b

    def result(self) -> xr.Dataset:
        if self._consumed:
            raise RuntimeError(f"{self.name}: result() was already taken (it consumes the state)")
        if not self._s1:
            raise RuntimeError(f"{self.name}: no scores were seen (empty shard?)")
        layers = sorted(self._s1)
        ns = {self._n[layer] for layer in layers}
        if len(ns) != 1 or layers != list(range(len(layers))):
            raise RuntimeError(
                f"{self.name}: layers {layers} saw unequal sequence counts {self._n}"
            )
        n = ns.pop()
        shape = (len(layers), *self._s1[0].shape)
        mean, m2 = np.empty(shape), np.empty(shape)
        self._consumed = True
        # Layer by layer, written straight into the outputs (fresh temporaries cost page faults
        # that were measured to quadruple the time of these passes on CPU), freeing each layer's
        # state once read: output pages are touched only as the state is released.
        for layer in layers:
            s1, s2 = self._s1.pop(layer), self._s2.pop(layer)
            mean_l, m2_l = _out_view(mean[layer], s1), _out_view(m2[layer], s1)
            torch.div(s1, n, out=mean_l)
            torch.mul(s1, mean_l, out=m2_l)
            torch.sub(s2, m2_l, out=m2_l)
            # Clamped: rounding can leave -1e-16-sized values where a cell is constant.
            m2_l.clamp_(min=0.0)
            _copy_back(mean[layer], mean_l)
            _copy_back(m2[layer], m2_l)
            del s1, s2, mean_l, m2_l
        self._buf = None
        dims = ("layer", "head", "query", "key")
        return xr.Dataset(
            {"score_mean": (dims, mean), "score_m2": (dims, m2), "n_sequences": ((), np.int64(n))},
            coords=_coords(*shape),
        )

    merge = staticmethod(merging.merge_moments)  # exact


def group_labels(n_sequences: int, *, n_groups: int = 10) -> np.ndarray:
    """Group label of every sequence, ``(sequence,)`` int64, for :class:`GroupMeans`: sequence i
    in group ``i % n_groups`` (each group a spread of the draw, not a block of it)."""
    return (np.arange(n_sequences) % n_groups).astype(np.int64)


class GroupMeans:
    """Head-averaged score maps per group of sequences: ``score_group_mean (group, layer, query, key)``.

    For resampling (bootstrap over groups) without storing one map per sequence. ``labels``
    maps global sequence ids to group labels (:func:`group_labels`). Each sequence's map is
    averaged over heads in float64, then summed per group; ``group_n_sequences (group)`` holds
    the counts. Memory: ``n_groups × layer × query × key`` float64; :meth:`result` consumes
    it layer by layer (call it once).
    """

    name = "score_group_mean"

    def __init__(self, labels: np.ndarray) -> None:
        self.labels = np.asarray(labels, dtype=np.int64)
        self.groups = np.unique(self.labels)
        self._index = {int(g): i for i, g in enumerate(self.groups)}
        self._sum: dict[int, torch.Tensor] = {}
        self._count: dict[int, np.ndarray] = {}
        self._heads = 1
        self._consumed = False

    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        if self._consumed:
            raise RuntimeError(f"{self.name}: update() after result(); use a new reducer per shard")
        b, h, tq, tk = scores.shape
        if layer not in self._sum:
            self._sum[layer] = _state_zeros((len(self.groups), tq, tk), scores.device)
            self._count[layer] = np.zeros(len(self.groups), dtype=np.int64)
        acc = self._sum[layer]
        self._heads = h
        seq_ids = np.asarray(seq_ids)
        bad = (seq_ids < 0) | (seq_ids >= len(self.labels))
        if bad.any():
            raise IndexError(
                f"{self.name}: sequence id {seq_ids[bad][0]} outside the {len(self.labels)} "
                "labels given"
            )
        rows = np.array([self._index[int(g)] for g in self.labels[seq_ids]], dtype=np.int64)
        if scores.device.type == "cpu":
            for i, g in enumerate(rows):
                # Head by head into the float64 group sum (float32 -> float64 on the fly):
                # measured 40 % faster on CPU than torch.sum(..., dtype=float64) over heads.
                for head in range(h):
                    acc[g].add_(scores[i, head])
        else:  # on a GPU, b x h small launches would dominate: one reduction, one scatter-add
            idx = torch.as_tensor(rows, device=acc.device)
            acc.index_add_(0, idx, scores.sum(dim=1, dtype=torch.float64))
        np.add.at(self._count[layer], rows, 1)

    def result(self) -> xr.Dataset:
        if self._consumed:
            raise RuntimeError(f"{self.name}: result() was already taken (it consumes the state)")
        if not self._sum:
            raise RuntimeError(f"{self.name}: no scores were seen (empty shard?)")
        layers = sorted(self._sum)
        if layers != list(range(len(layers))) or any(
            (self._count[la] != self._count[0]).any() for la in layers
        ):
            raise RuntimeError(f"{self.name}: layers {layers} saw unequal sequence counts")
        counts = self._count[layers[0]]
        self._consumed = True
        seen = np.flatnonzero(counts > 0)
        tq, tk = self._sum[layers[0]].shape[1:]
        mean = np.empty((len(seen), len(layers), tq, tk))
        for layer in layers:
            acc = self._sum.pop(layer)
            for i, g in enumerate(seen):
                out = _out_view(mean[i, layer], acc)
                torch.div(acc[g], int(counts[g]) * self._heads, out=out)
                _copy_back(mean[i, layer], out)
        return xr.Dataset(
            {
                "score_group_mean": (("group", "layer", "query", "key"), mean),
                "group_n_sequences": (("group",), counts[seen]),
            },
            coords={"group": self.groups[seen], **_coords(len(layers), None, tq, tk)},
        )

    merge = staticmethod(merging.merge_group_means)  # exact


class ScoreMaps:
    """Every sequence's score maps, float32 as captured: ``score_maps (sequence, map_layer, head,
    query, key)``, NaN where masked, the layers ``layers`` (default every layer; coordinate
    ``map_layer``, apart from the other reducers' ``layer`` so that a subset merges beside their
    every layer). Kept in host memory: ``n_sequences × len(layers) × heads × T²`` × 4 bytes (a
    notebook's reading of a few prompts; extraction never runs it). :meth:`merge` concatenates
    shards by sequence id.
    """

    name = "score_maps"

    def __init__(self, layers: Sequence[int] | None = None) -> None:
        self.layers = None if layers is None else sorted({int(x) for x in layers})
        self._maps: dict[int, list[np.ndarray]] = {}
        self._ids: dict[int, list[np.ndarray]] = {}

    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        if self.layers is not None and layer not in self.layers:
            return
        self._maps.setdefault(layer, []).append(scores.detach().to("cpu", copy=True).numpy())
        self._ids.setdefault(layer, []).append(np.asarray(seq_ids, dtype=np.int64).copy())

    def result(self) -> xr.Dataset:
        if not self._maps:
            raise RuntimeError(f"{self.name}: no scores were seen (empty shard, or no layer kept)")
        layers = sorted(self._maps)
        if self.layers is not None and layers != self.layers:
            raise ValueError(
                f"{self.name}: layers {sorted(set(self.layers) - set(layers))} were asked for "
                f"but the model has only layers 0..{max(layers)} captured"
            )
        ids = np.concatenate(self._ids[layers[0]])
        maps = np.stack([np.concatenate(self._maps.pop(la)) for la in layers], axis=1)
        dims = ("sequence", "map_layer", "head", "query", "key")
        cells = {d: np.arange(n) for d, n in zip(dims[2:], maps.shape[2:], strict=True)}
        return xr.Dataset(
            {"score_maps": (dims, maps)},
            coords={"sequence": ids, "map_layer": np.asarray(layers), **cells},
        )

    merge = staticmethod(merging.merge_score_maps)  # exact
