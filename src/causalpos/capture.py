"""Pre-softmax attention scores, captured inside the model's own forward pass.

How: a custom function is registered in transformers' ``AttentionInterface`` *and* a mask
function in ``AttentionMaskInterface`` under the same name (:data:`CAPTURE_IMPLEMENTATION`).
Without the mask registration transformers decides the implementation needs no mask and the
model silently runs unmasked (design.md, offline facts). The attention function receives the
post-RoPE ``query (batch, head, query, dim)`` and ``key (batch, kv_head, key, dim)`` (not yet
repeated for GQA) and the model's ``scaling``; it

1. computes ``scores = (q · kᵀ) · scaling`` in float32 whatever the model dtype (then tanh
   soft-capping where the layer passes ``softcap``); for GQA the query heads sharing a key
   head are folded into the rows of one matmul, so the keys are never copied;
2. sets masked cells to NaN using the mask the model built for this layer (causal, sliding
   window, bidirectional...): stores hold NaN, never ±inf or dtype-min values;
3. hands ``scores (batch, head, query, key)`` to every reducer;
4. computes the layer's real output with ``sdpa`` (the model's fast path), so the forward pass
   is the model's own: the captured model's logits equal the unhooked model's.

Memory is bounded by one batch × one layer of scores (one reusable float32 buffer) plus the
reducers' state; reducers stream statistics in float64.

Forward-pass variants (the ``{variant}`` wildcard): see :data:`VARIANT_PATTERN`.
"""

from __future__ import annotations

import json
import math
import mmap
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import xarray as xr

from . import __version__
from .models import disable_rope

CAPTURE_IMPLEMENTATION = "causalpos_capture"
_CPU_TILE = 1 << 18

#: Regular expression of the variant names (a Snakemake wildcard constraint).
VARIANT_PATTERN = (
    r"causal|bidirectional|identity_rope|scrambled_rope"
    r"|bos_replace_(?:mean|zeros|token|gaussian)|bos_replace_all_(?:token|gaussian)"
)
VARIANTS = (
    "causal",
    "bidirectional",
    "identity_rope",
    "scrambled_rope",
    "bos_replace_mean",
    "bos_replace_zeros",
    "bos_replace_token",
    "bos_replace_gaussian",
    "bos_replace_all_token",
    "bos_replace_all_gaussian",
)


# --------------------------------------------------------------------------------------------
# Reducers
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Reducer(Protocol):
    """Streams a statistic of the scores; memory independent of the number of sequences."""

    name: str

    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        """Fold in one layer of one batch.

        ``scores (batch, head, query, key)`` float32 pre-softmax logits (post-RoPE, model
        scaling, GQA keys repeated), NaN where masked; read-only (shared with other reducers,
        and the buffer is reused for the next layer: copy what you keep). ``seq_ids (batch,)``
        are the global sequence indices of the rows.
        """
        ...

    def result(self) -> xr.Dataset:
        """This shard's contribution."""
        ...

    @classmethod
    def merge(cls, parts: Sequence[xr.Dataset]) -> xr.Dataset:
        """Exact merge of shards' :meth:`result` datasets (same variables)."""
        ...


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
    if device.type != "cpu":
        return torch.zeros(shape, dtype=torch.float64, device=device)
    nbytes = max(math.prod(shape) * 8, 8)
    buf = mmap.mmap(-1, nbytes)  # anonymous pages are zero
    return torch.from_numpy(np.frombuffer(buf, dtype=np.float64, count=math.prod(shape)).reshape(shape))


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
            raise ValueError(f"{self.name}: layer {layer} scores {tuple(scores.shape)} after {tuple(s1.shape)}")
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
            raise RuntimeError(f"{self.name}: layers {layers} saw unequal sequence counts {self._n}")
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
            {
                "score_mean": (dims, mean),
                "score_m2": (dims, m2),
                "n_sequences": ((), np.int64(n)),
            },
            coords=_coords(*shape),
        )

    @classmethod
    def merge(cls, parts: Sequence[xr.Dataset]) -> xr.Dataset:
        """Chan et al. (1979) combination of ``(n, mean, M2)`` triples, in float64.

        Parts are read one at a time (lazily opened stores are fine): memory is the two
        output maps plus one part.
        """
        if not parts:
            raise ValueError(f"{cls.name}: nothing to merge")
        n = int(parts[0]["n_sequences"])
        mean = np.array(parts[0]["score_mean"].values, dtype=np.float64)
        m2 = np.array(parts[0]["score_m2"].values, dtype=np.float64)
        for p in parts[1:]:
            nb = int(p["n_sequences"])
            delta = np.asarray(p["score_mean"].values, dtype=np.float64) - mean
            if delta.shape != mean.shape:
                raise ValueError(f"{cls.name}: shard maps {delta.shape} vs {mean.shape}; same model and seq_len?")
            tot = n + nb
            m2 += p["score_m2"].values
            m2 += delta * delta * (n * nb / tot)
            delta *= nb / tot
            mean += delta
            n = tot
        dims = ("layer", "head", "query", "key")
        return xr.Dataset(
            {"score_mean": (dims, mean), "score_m2": (dims, m2), "n_sequences": ((), np.int64(n))},
            coords={d: parts[0][d].values for d in dims},
        )


def group_labels(
    n_sequences: int,
    *,
    scheme: str = "modulo",
    n_groups: int = 10,
    documents: np.ndarray | None = None,
) -> np.ndarray:
    """Group label of every sequence, ``(sequence,)`` int64, for :class:`GroupMeans`.

    ``scheme``: "modulo" (``i % n_groups``), "contiguous" (``n_groups`` consecutive blocks of
    near-equal size), or "document" (the sequence's ``document`` id, so resampling keeps chunks
    of one document together).
    """
    idx = np.arange(n_sequences)
    if scheme == "modulo":
        return (idx % n_groups).astype(np.int64)
    if scheme == "contiguous":
        return (idx * n_groups // max(n_sequences, 1)).astype(np.int64)
    if scheme == "document":
        if documents is None or len(documents) != n_sequences:
            raise ValueError("group_labels: scheme 'document' needs `documents` (one id per sequence)")
        return np.asarray(documents, dtype=np.int64)
    raise ValueError(f"group_labels: scheme {scheme!r} not in ('modulo', 'contiguous', 'document')")


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
        for i, sid in enumerate(np.asarray(seq_ids)):
            if not 0 <= sid < len(self.labels):
                raise IndexError(f"{self.name}: sequence id {sid} outside the {len(self.labels)} labels given")
            g = acc[self._index[int(self.labels[sid])]]
            # Head by head into the float64 group sum (float32 -> float64 on the fly): measured
            # 40 % faster than torch.sum(..., dtype=float64) over the head dim.
            for head in range(h):
                g.add_(scores[i, head])
            self._count[layer][self._index[int(self.labels[sid])]] += 1

    def result(self) -> xr.Dataset:
        if self._consumed:
            raise RuntimeError(f"{self.name}: result() was already taken (it consumes the state)")
        if not self._sum:
            raise RuntimeError(f"{self.name}: no scores were seen (empty shard?)")
        layers = sorted(self._sum)
        if layers != list(range(len(layers))) or any((self._count[la] != self._count[0]).any() for la in layers):
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

    @classmethod
    def merge(cls, parts: Sequence[xr.Dataset]) -> xr.Dataset:
        if not parts:
            raise ValueError(f"{cls.name}: nothing to merge")
        groups = np.unique(np.concatenate([p["group"].values for p in parts]))
        shape = parts[0]["score_group_mean"].shape[1:]
        total = np.zeros((len(groups), *shape))
        counts = np.zeros(len(groups), dtype=np.int64)
        for p in parts:
            idx = np.searchsorted(groups, p["group"].values)
            n = p["group_n_sequences"].values
            total[idx] += p["score_group_mean"].values * n[:, None, None, None]
            counts[idx] += n
        mean = total / counts[:, None, None, None]
        coords = {k: parts[0][k].values for k in ("layer", "query", "key")}
        return xr.Dataset(
            {
                "score_group_mean": (("group", "layer", "query", "key"), mean),
                "group_n_sequences": (("group",), counts),
            },
            coords={"group": groups, **coords},
        )


# --------------------------------------------------------------------------------------------
# Variants
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """A forward-pass variant: mask, rotary embedding and position-0 input."""

    name: str
    causal: bool = True
    rope: str = "rope"  # "rope" | "identity" | "scrambled"
    bos_replace: str | None = None  # "mean" | "zeros" | "token" | "gaussian"
    per_prompt: bool = False  # "replace all": a different replacement per prompt


def parse_variant(name: str) -> Variant:
    """Parse a variant name (one of :data:`VARIANTS`).

    - ``causal``: the model as trained;
    - ``bidirectional``: ``config.is_causal = False`` (same weights, no causal mask; sliding
      windows become symmetric, transformers' ``|i - j| <= window``);
    - ``identity_rope``: the rotation replaced by the identity at inference;
    - ``scrambled_rope``: position ids permuted within each sequence by a permutation seeded
      by ``(seed, sequence id)``; the causal order (the mask) stays;
    - ``bos_replace_{mean,zeros,token,gaussian}``: the model called with ``inputs_embeds``
      whose row 0 is replaced by the mean embedding, zeros, another token's embedding, or a
      Gaussian vector norm-matched to the original row 0 — the same replacement for every
      prompt;
    - ``bos_replace_all_{token,gaussian}``: "replace all" (paper2.md §4): a different
      replacement per prompt, seeded by ``(seed, sequence id)``.
    """
    if name == "causal":
        return Variant(name)
    if name == "bidirectional":
        return Variant(name, causal=False)
    if name == "identity_rope":
        return Variant(name, rope="identity")
    if name == "scrambled_rope":
        return Variant(name, rope="scrambled")
    for kind in ("mean", "zeros", "token", "gaussian"):
        if name == f"bos_replace_{kind}":
            return Variant(name, bos_replace=kind)
    for kind in ("token", "gaussian"):
        if name == f"bos_replace_all_{kind}":
            return Variant(name, bos_replace=kind, per_prompt=True)
    raise ValueError(f"variant {name!r} unknown; allowed: {list(VARIANTS)}")


def _rng(seed: int, seq_id: int | None, stream: int) -> np.random.Generator:
    # Keyed by the global sequence id, so a sequence gets the same draw in any shard or batch;
    # seq_id None: one draw shared by all sequences. ``stream`` separates the uses.
    entropy = [int(seed), stream] if seq_id is None else [int(seed), stream, int(seq_id)]
    return np.random.default_rng(entropy)


def scrambled_position_ids(seq_ids: np.ndarray, seq_len: int, seed: int) -> np.ndarray:
    """``(batch, position)`` int64: a seeded permutation of ``0..seq_len-1`` per sequence."""
    return np.stack([_rng(seed, s, 1).permutation(seq_len) for s in seq_ids]).astype(np.int64)


def _special_ids(config: Any) -> set[int]:
    ids: set[int] = set()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        v = getattr(config, key, None)
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if x is not None:
                ids.add(int(x))
    return ids


def _draw_token(vocab: int, exclude: set[int], rng: np.random.Generator) -> int:
    while True:
        t = int(rng.integers(0, vocab))
        if t not in exclude:
            return t


def bos_replaced_embeddings(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    seq_ids: np.ndarray,
    kind: str,
    *,
    per_prompt: bool,
    seed: int,
    token_id: int | None = None,
) -> torch.Tensor:
    """``inputs_embeds (batch, position, hidden)`` with only row 0 replaced.

    Embeddings come from the model's own input-embedding module (so models that scale
    embeddings inside it, like Gemma, stay correct). ``kind``: "mean" (mean embedding over the
    vocabulary), "zeros", "token" (embedding of ``token_id``, or of a token drawn from the
    non-special ids with the seed), "gaussian" (standard normal, rescaled to the norm of the
    original row 0). ``per_prompt``: draw the token / Gaussian per sequence, seeded by
    ``(seed, sequence id)``; otherwise one draw seeded by ``seed`` for all.
    """
    emb = model.get_input_embeddings()
    embeds = emb(input_ids)
    b, _, hidden = embeds.shape
    original = embeds[:, 0].float()
    if kind == "zeros":
        repl = torch.zeros_like(original)
    elif kind == "mean":
        scale = getattr(emb, "embed_scale", 1.0)
        scale = float(scale.item() if torch.is_tensor(scale) else scale)
        vocab_mean = emb.weight.float().mean(0) * scale
        repl = vocab_mean.expand(b, hidden)
    elif kind == "token":
        exclude = _special_ids(model.config)
        vocab = emb.weight.shape[0]
        if per_prompt:
            toks = [_draw_token(vocab, exclude, _rng(seed, s, 2)) for s in seq_ids]
        else:
            tok = token_id if token_id is not None else _draw_token(vocab, exclude, _rng(seed, None, 2))
            toks = [tok] * b
        repl = emb(torch.tensor(toks, device=input_ids.device)).float()
    elif kind == "gaussian":
        keys = list(seq_ids) if per_prompt else [None] * b
        g = np.stack([_rng(seed, s, 3).standard_normal(hidden) for s in keys])
        g = torch.from_numpy(g).to(device=embeds.device, dtype=torch.float32)
        repl = g / g.norm(dim=-1, keepdim=True) * original.norm(dim=-1, keepdim=True)
    else:
        raise ValueError(f"bos replacement {kind!r} not in ('mean', 'zeros', 'token', 'gaussian')")
    embeds = embeds.clone()
    embeds[:, 0] = repl.to(embeds.dtype)
    return embeds


# --------------------------------------------------------------------------------------------
# The capture session and the registered attention / mask functions
# --------------------------------------------------------------------------------------------


class _Session:
    def __init__(self, reducers: Sequence[Reducer]) -> None:
        self.reducers = list(reducers)
        self.seq_ids: np.ndarray = np.zeros(0, dtype=np.int64)
        self.scaling: dict[int, float] = {}
        self.softcap: dict[int, float | None] = {}
        self.calls: list[int] = []
        self._buffer: torch.Tensor | None = None
        self._masks: dict[int, tuple[torch.Tensor, torch.Tensor | None, str]] = {}

    def begin_batch(self, seq_ids: np.ndarray) -> None:
        self.seq_ids = np.asarray(seq_ids, dtype=np.int64)
        self.calls = []
        self._masks = {}

    def buffer(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        n = math.prod(shape)
        if self._buffer is None or self._buffer.numel() < n or self._buffer.device != device:
            self._buffer = torch.empty(n, dtype=torch.float32, device=device)
        return self._buffer[:n].view(shape)

    def mask_info(self, mask: torch.Tensor | None, tq: int, tk: int) -> tuple[torch.Tensor, torch.Tensor | None, str]:
        """``(allowed, nan_bias, kind)`` of a layer's boolean mask (cached per mask object).

        ``kind``: "causal" | "full" | "custom". ``nan_bias`` (float32, 0 where allowed, NaN where
        masked; None when nothing is masked) is added to the scores: one fused pass instead of
        a scale and a masked fill.
        """
        if mask is None:
            raise RuntimeError(
                "capture: the model passed no attention mask to the capture implementation, so "
                "masked cells cannot be marked. Either the mask registration "
                f"(AttentionMaskInterface[{CAPTURE_IMPLEMENTATION!r}]) is missing or the model "
                "builds masks another way; this architecture is not supported by the capture"
            )
        key = id(mask)
        if key not in self._masks:
            if mask.dtype != torch.bool:
                raise RuntimeError(f"capture: expected a boolean mask, got {mask.dtype}")
            # Without padding every row of the batch has the same mask: broadcast one.
            shared = mask[:1] if bool((mask == mask[:1]).all()) else mask
            causal = torch.ones((tq, tk), dtype=torch.bool, device=mask.device).tril(diagonal=tk - tq)
            if bool(shared.all()):
                kind, bias = "full", None
            else:
                kind = "causal" if bool((shared == causal).all()) else "custom"
                bias = torch.zeros(shared.shape, dtype=torch.float32, device=mask.device)
                bias.masked_fill_(~shared, float("nan"))
            self._masks[key] = (mask, bias, kind)
        allowed, bias, kind = self._masks[key]
        return allowed, bias, kind


_ACTIVE: _Session | None = None
_REGISTERED = False


def _capture_mask(*args: Any, **kwargs: Any) -> torch.Tensor:
    # Always materialize the boolean mask (no "is_causal" shortcut returning None): the
    # attention function needs the exact pattern — causal, sliding window or bidirectional.
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    kwargs["allow_is_bidirectional_skip"] = False
    return sdpa_mask(*args, **kwargs)


def _capture_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention function registered as :data:`CAPTURE_IMPLEMENTATION` (see module doc)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    session = _ACTIVE
    if session is None:
        raise RuntimeError(
            f"capture: model called with attn_implementation={CAPTURE_IMPLEMENTATION!r} outside "
            "an extraction; use causalpos.capture.extract_scores or `with capturing(...)`"
        )
    layer = int(module.layer_idx)
    b, h, tq, d = query.shape
    kv, tk = key.shape[1], key.shape[2]
    if scaling is None:
        scaling = d**-0.5
    session.scaling[layer] = float(scaling)
    session.softcap[layer] = softcap
    session.calls.append(layer)

    scores = session.buffer((b, h, tq, tk), query.device)
    q = query.to(torch.float32)
    k = key.to(torch.float32)
    # Query heads h = kv * G + g share key head kv (transformers' repeat_kv order): fold the G
    # query heads of one key head into the row dimension instead of repeating the keys.
    g = h // kv
    torch.matmul(q.reshape(b, kv, g * tq, d), k.transpose(-1, -2), out=scores.view(b, kv, g * tq, tk))
    allowed, nan_bias, kind = session.mask_info(attention_mask, tq, tk)
    if nan_bias is None:
        scores.mul_(scaling)
    else:
        # scores * scaling + (0 | NaN): scaling and masking in one pass, in place.
        torch.add(nan_bias, scores, alpha=scaling, out=scores)
    if softcap is not None:
        # tanh keeps NaN: capping after masking equals eager's cap-then-mask.
        scores.div_(softcap).tanh_().mul_(softcap)
    for reducer in session.reducers:
        reducer.update(layer, scores, session.seq_ids)

    if softcap is not None:
        # sdpa has no soft-capping: finish from the captured (capped) scores, eagerly.
        probs = torch.softmax(scores.nan_to_num(nan=float("-inf")), dim=-1).to(value.dtype)
        out = torch.matmul(probs.view(b, kv, g * tq, tk), value).view(b, h, tq, -1)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(
        module,
        query,
        key,
        value,
        None if kind in ("causal", "full") else allowed,
        dropout=dropout,
        scaling=scaling,
        is_causal=kind == "causal",
    )


def register_capture() -> None:
    """Register the capture attention and mask functions (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CAPTURE_IMPLEMENTATION, _capture_attention)
    AttentionMaskInterface.register(CAPTURE_IMPLEMENTATION, _capture_mask)
    _REGISTERED = True


_MISSING = object()


@contextmanager
def capturing(model: torch.nn.Module, reducers: Sequence[Reducer], *, variant: str | Variant = "causal") -> Iterator[_Session]:
    """Run ``model`` with score capture (and the variant's mask/RoPE changes) inside the block.

    Restores the attention implementation, ``config.is_causal`` and the rotary embedding on
    exit. Set the batch's global sequence ids with ``session.begin_batch(seq_ids)`` before each
    forward call. Input-side changes (scrambled position ids, BOS replacement) are made by
    :func:`variant_inputs`.
    """
    global _ACTIVE
    v = parse_variant(variant) if isinstance(variant, str) else variant
    if _ACTIVE is not None:
        raise RuntimeError("capture: nested capture sessions are not supported")
    register_capture()
    config = model.config
    prev_impl = config._attn_implementation
    prev_causal = getattr(config, "is_causal", _MISSING)
    handles = []
    session = _Session(reducers)
    try:
        model.set_attn_implementation(CAPTURE_IMPLEMENTATION)
        if not v.causal:
            config.is_causal = False
        if v.rope == "identity":
            handles = disable_rope(model)
        _ACTIVE = session
        yield session
    finally:
        _ACTIVE = None
        for handle in handles:
            handle.remove()
        if prev_causal is _MISSING:
            if hasattr(config, "is_causal"):
                delattr(config, "is_causal")
        else:
            config.is_causal = prev_causal
        model.set_attn_implementation(prev_impl)


def variant_inputs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    seq_ids: np.ndarray,
    variant: Variant,
    *,
    seed: int,
    replace_token_id: int | None = None,
) -> dict[str, torch.Tensor]:
    """Keyword arguments of the forward call for ``variant`` (``input_ids (batch, position)``)."""
    b, t = input_ids.shape
    # An explicit all-ones 2-D mask: with position ids given and no mask, transformers would
    # take non-consecutive ids for packed sequences and block attention between the "packs".
    kwargs: dict[str, torch.Tensor] = {
        "attention_mask": torch.ones((b, t), dtype=torch.long, device=input_ids.device)
    }
    if variant.rope == "scrambled":
        pos = scrambled_position_ids(seq_ids, t, seed)
        kwargs["position_ids"] = torch.from_numpy(pos).to(input_ids.device)
    if variant.bos_replace is not None:
        kwargs["inputs_embeds"] = bos_replaced_embeddings(
            model, input_ids, seq_ids, variant.bos_replace,
            per_prompt=variant.per_prompt, seed=seed, token_id=replace_token_id,
        )
    else:
        kwargs["input_ids"] = input_ids
    return kwargs


def extract_scores(
    model: torch.nn.Module,
    tokens: np.ndarray,
    *,
    variant: str,
    batch_size: int,
    reducers: list[Reducer],
    seed: int,
    progress: bool = True,
    seq_ids: np.ndarray | None = None,
    attrs: dict[str, Any] | None = None,
    replace_token_id: int | None = None,
) -> xr.Dataset:
    """Run ``tokens (sequence, position)`` through ``model`` under ``variant``; reduce the scores.

    Returns the reducers' :meth:`~Reducer.result` datasets merged into one, each variable's
    ``attrs["reducer"]`` naming its reducer class (for :func:`causalpos.store.merge_shards`),
    with attrs: model, model_spec, model_revision, architecture, dtype, device, seq_len,
    n_sequences, variant, seed, scaling, softcap, bos, n_layers, n_heads, n_kv_heads, versions.
    ``seq_ids``: global sequence indices of the rows (default ``0..n-1``; pass them for shards).
    ``attrs``: extra attributes (e.g. dataset name, bos, code fingerprint) — they take
    precedence. ``bos`` defaults to "every sequence starts with ``config.bos_token_id``".
    A progress bar goes to stderr (the job log).
    """
    from tqdm import tqdm

    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[0] == 0 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"extract_scores: tokens must be a non-empty (sequence, position) integer array, got {tokens.shape} {tokens.dtype}")
    n, t = tokens.shape
    seq_ids = np.arange(n, dtype=np.int64) if seq_ids is None else np.asarray(seq_ids, dtype=np.int64)
    if seq_ids.shape != (n,):
        raise ValueError(f"extract_scores: seq_ids shape {seq_ids.shape} != ({n},)")
    if batch_size < 1:
        raise ValueError(f"extract_scores: batch_size must be >= 1, got {batch_size}")
    if not reducers:
        raise ValueError("extract_scores: give at least one reducer")
    names = [r.name for r in reducers]
    if len(set(names)) != len(names):
        raise ValueError(f"extract_scores: reducer names must be unique, got {names}")
    v = parse_variant(variant)
    config = model.config
    n_layers = config.num_hidden_layers
    device = next(model.parameters()).device
    bar = tqdm(total=n, desc=f"extract {v.name}", unit="seq", file=sys.stderr, disable=not progress)
    with torch.inference_mode(), capturing(model, reducers, variant=v) as session:
        for start in range(0, n, batch_size):
            ids = torch.from_numpy(tokens[start : start + batch_size].astype(np.int64)).to(device)
            sids = seq_ids[start : start + batch_size]
            session.begin_batch(sids)
            # logits_to_keep=1: the vocabulary projection of every position is not needed.
            model(**variant_inputs(model, ids, sids, v, seed=seed, replace_token_id=replace_token_id), use_cache=False, logits_to_keep=1)
            if sorted(session.calls) != list(range(n_layers)):
                raise RuntimeError(
                    f"capture: {n_layers} layers but the capture saw layer calls {session.calls}; "
                    "some attention layers bypass transformers' AttentionInterface"
                )
            bar.update(len(sids))
    bar.close()

    parts = []
    for reducer in reducers:
        part = reducer.result()
        for var in part.data_vars.values():
            var.attrs["reducer"] = reducer_path(reducer)
        parts.append(part)
    ds = xr.merge(parts, compat="no_conflicts", join="exact", combine_attrs="override")
    source = getattr(model, "causalpos_source", {}) or {}
    scalings = [session.scaling[i] for i in sorted(session.scaling)]
    softcaps = [session.softcap[i] for i in sorted(session.softcap)]
    bos_id = getattr(config, "bos_token_id", None)
    revision = source.get("revision") or source.get("file_sha256") or source.get("sha256")
    ds.attrs = {
        "model": source.get("name", getattr(config, "name_or_path", "")),
        "model_spec": json.dumps(source.get("spec", {}), sort_keys=True),
        "model_revision": json.dumps(revision, sort_keys=True) if isinstance(revision, dict) else (revision or ""),
        "architecture": config.model_type,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "device": str(device),
        "seq_len": int(t),
        "n_sequences": int(n),
        "variant": v.name,
        "seed": int(seed),
        "scaling": scalings[0] if len(set(scalings)) == 1 else scalings,
        "softcap": "none" if all(s is None for s in softcaps) else [s if s is not None else "none" for s in softcaps],
        "bos": bool(bos_id is not None and np.all(tokens[:, 0] == bos_id)),
        "n_layers": int(n_layers),
        "n_heads": int(config.num_attention_heads),
        "n_kv_heads": int(getattr(config, "num_key_value_heads", config.num_attention_heads)),
        "score_dtype": "float32",
        "sequence_first": int(seq_ids.min()),
        "sequence_last": int(seq_ids.max()),
        "causalpos_version": __version__,
        "transformers_version": _version("transformers"),
        "torch_version": torch.__version__,
        **(attrs or {}),
    }
    return ds


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)
