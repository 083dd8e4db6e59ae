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

A planted variant (``plant_query``) adds its term b_i (:func:`causalpos.models.variants.plant_term`)
to row i of the planted layer's scores after scaling and soft-capping (the pre-softmax logits),
and that layer's output is computed from those scores (softmax and value product, eagerly), so the
model attends with the plant it is read with. A query term cancels in the softmax: the layer's
attention, and every later layer, equal the unplanted run's within float rounding.

Memory is bounded by one batch × one layer of scores (one reusable float32 buffer) plus the
reducers' state; reducers stream statistics in float64.

Forward-pass variants (the ``{variant}`` wildcard): see :mod:`causalpos.models.variants`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import torch
import xarray as xr

from causalpos import __version__
from causalpos.capture.reducers import Reducer, reducer_path
from causalpos.models.forward import model_side, variant_inputs
from causalpos.models.variants import Variant, parse_variant

CAPTURE_IMPLEMENTATION = "causalpos_capture"
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


class _Session:
    def __init__(self, reducers: Sequence[Reducer]) -> None:
        self.reducers = list(reducers)
        self.seq_ids: np.ndarray = np.zeros(0, dtype=np.int64)
        self.scaling: dict[int, float] = {}
        self.softcap: dict[int, float | None] = {}
        self.calls: list[int] = []
        self._buffer: torch.Tensor | None = None
        self._masks: dict[int, tuple[torch.Tensor, torch.Tensor | None, str]] = {}
        self._masked: dict[tuple[int, int, int], int] = {}
        self._nan: list[tuple[int, torch.Tensor, int]] = []
        #: ``layer_bidirectional``: the maps are recorded without the mask (the forward pass
        #: keeps it); the all-allowed pattern of each mask, kept alive for the batch
        self.unmasked = False
        self._full: dict[int, torch.Tensor] = {}
        #: ``plant_query``: layer -> the planted term b (float64, (T,)) added to its query rows
        self.plant: dict[int, np.ndarray] = {}
        self._plant_t: dict[tuple[int, int, torch.device], torch.Tensor] = {}

    def plant_rows(self, layer: int, tq: int, device: torch.device) -> torch.Tensor | None:
        """The planted term of ``layer`` as a float32 (1, 1, tq, 1) column (None: no plant), for
        the last ``tq`` positions of the sequence."""
        if layer not in self.plant:
            return None
        key = (layer, tq, device)
        if key not in self._plant_t:
            b = self.plant[layer]
            if tq > len(b):
                raise RuntimeError(f"capture: planted term of length {len(b)} for {tq} queries")
            col = torch.as_tensor(b[len(b) - tq :], dtype=torch.float32, device=device)
            self._plant_t[key] = col.view(1, 1, tq, 1)
        return self._plant_t[key]

    def full_allowed(self, allowed: torch.Tensor) -> torch.Tensor:
        """An all-True mask shaped like ``allowed`` (one per mask object and batch)."""
        key = id(allowed)
        if key not in self._full:
            self._full[key] = torch.ones_like(allowed)
        return self._full[key]

    def begin_batch(self, seq_ids: np.ndarray) -> None:
        self.seq_ids = np.asarray(seq_ids, dtype=np.int64)
        self.calls = []
        self._masks = {}
        self._masked = {}
        self._nan = []
        self._full = {}

    def count_nan(
        self,
        layer: int,
        scores: torch.Tensor,
        mask: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        scaling: float,
    ) -> None:
        """Record how many of ``scores`` are NaN, and how many the mask hides (the expected
        count), for :meth:`check_nan`.

        On a GPU the count stays on the device, so the forward pass does not wait. On a CPU a
        bound comes first: with every query and key entry finite and max|q| · max|k| · d ·
        |scaling| below float32's largest value, no product or sum can overflow, so every
        allowed cell is finite and only the mask's cells are NaN; the count (a pass over the
        scores, as long as their matmul) is taken only when the bound fails.
        """
        if scores.device.type == "cpu":
            d = q.shape[-1]
            bound = float(q.abs().amax()) * float(k.abs().amax()) * d * abs(scaling)
            if math.isfinite(bound) and bound < _FLOAT32_MAX:
                return
        b, h = scores.shape[:2]
        key = (id(mask), b, h)
        if key not in self._masked:
            self._masked[key] = int((~mask).expand(b, h, *scores.shape[2:]).sum())
        self._nan.append((layer, torch.count_nonzero(torch.isnan(scores)), self._masked[key]))

    def check_nan(self) -> None:
        """Raise if a layer of the batch produced NaN scores where its mask allows a value."""
        if not self._nan:
            return
        counts = torch.stack([c for _, c, _ in self._nan]).tolist()  # one sync per batch
        for (layer, _, masked), n in zip(self._nan, counts, strict=True):
            if n > masked:
                raise FloatingPointError(
                    f"capture: the model produced NaN scores in layer {layer} ({n - masked} "
                    f"values where the attention mask allows one; sequences "
                    f"{int(self.seq_ids.min())}..{int(self.seq_ids.max())}): its weights or "
                    "activations are not finite. A trained model that diverged (NaN loss in "
                    "its training log) must be retrained with a lower train.lr; a model run in "
                    "float16 that overflows needs `dtype: bfloat16` or `dtype: float32` in the "
                    "config. Nothing was written for this shard."
                )

    def buffer(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        n = math.prod(shape)
        if self._buffer is None or self._buffer.numel() < n or self._buffer.device != device:
            self._buffer = torch.empty(n, dtype=torch.float32, device=device)
        return self._buffer[:n].view(shape)

    def mask_info(
        self, mask: torch.Tensor | None, tq: int, tk: int
    ) -> tuple[torch.Tensor, torch.Tensor | None, str]:
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
            causal = torch.ones((tq, tk), dtype=torch.bool, device=mask.device).tril(
                diagonal=tk - tq
            )
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
            "an extraction; use causalpos.capture.hook.capture_scores or `with capturing(...)`"
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
    torch.matmul(
        q.reshape(b, kv, g * tq, d), k.transpose(-1, -2), out=scores.view(b, kv, g * tq, tk)
    )
    allowed, nan_bias, kind = session.mask_info(attention_mask, tq, tk)
    recorded = allowed
    if session.unmasked:  # layer-local ablation: record every cell, attend with the mask
        recorded, nan_bias = session.full_allowed(allowed), None
    if nan_bias is None:
        scores.mul_(scaling)
    else:
        # scores * scaling + (0 | NaN): scaling and masking in one pass, in place.
        torch.add(nan_bias, scores, alpha=scaling, out=scores)
    if softcap is not None:
        # tanh keeps NaN: capping after masking equals eager's cap-then-mask.
        scores.div_(softcap).tanh_().mul_(softcap)
    planted = session.plant_rows(layer, tq, query.device)
    if planted is not None:
        scores.add_(planted)  # b_i on every cell of row i, every head (masked cells stay NaN)
    session.count_nan(layer, scores, recorded, q, k, scaling)
    for reducer in session.reducers:
        reducer.update(layer, scores, session.seq_ids)

    if softcap is not None or planted is not None:
        # sdpa has no soft-capping and no planted term: finish from the captured scores, eagerly.
        masked = scores.nan_to_num(nan=float("-inf"))
        if session.unmasked:
            masked = masked.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(masked, dim=-1).to(value.dtype)
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


def resolve_plant(
    variant: Variant, plant: Mapping[str, Any] | None, n_layers: int, seq_len: int
) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
    """The planted term of ``variant`` (layer -> b) and the store attrs that record it.

    ``plant``: ``{"layer": int (negative counts from the last), "scale": a}`` (config
    ``leakage.plant``), required by a planted variant and refused by any other.
    """
    from causalpos.models.variants import PLANT_PROFILE, plant_layer, plant_term

    if variant.plant is None:
        if plant:
            raise ValueError(
                f"capture: variant {variant.name!r} plants nothing but a plant {dict(plant)} "
                "was given; plant only a variant with a plant_* atom"
            )
        return {}, {}
    if not plant or set(plant) != {"layer", "scale"}:
        raise ValueError(
            f"capture: variant {variant.name!r} needs plant={{'layer': int, 'scale': float}} "
            f"(config leakage.plant), got {plant!r}"
        )
    layer = plant_layer(plant["layer"], n_layers)
    scale = float(plant["scale"])
    attrs = {
        "plant_term": variant.plant,
        "plant_layer": layer,
        "plant_scale": scale,
        "plant_profile": PLANT_PROFILE,
    }
    return {layer: plant_term(seq_len, scale)}, attrs


@contextmanager
def capturing(
    model: torch.nn.Module,
    reducers: Sequence[Reducer],
    *,
    variant: str | Variant = "causal",
    plant: Mapping[int, np.ndarray] | None = None,
) -> Iterator[_Session]:
    """Run ``model`` with score capture (and the variant's mask/RoPE changes) inside the block.

    Restores the attention implementation, ``config.is_causal`` and the rotary embedding on
    exit. Set the batch's global sequence ids with ``session.begin_batch(seq_ids)`` before each
    forward call. Input-side changes (scrambled position ids, BOS replacement) are made by
    :func:`variant_inputs`. ``plant``: layer -> the term b (T,) added to that layer's query rows
    (:func:`resolve_plant`).
    """
    global _ACTIVE
    v = parse_variant(variant) if isinstance(variant, str) else variant
    if _ACTIVE is not None:
        raise RuntimeError("capture: nested capture sessions are not supported")
    register_capture()
    prev_impl = model.config._attn_implementation
    session = _Session(reducers)
    session.unmasked = v.unmasked_scores
    session.plant = {int(k): np.asarray(b, dtype=np.float64) for k, b in (plant or {}).items()}
    try:
        model.set_attn_implementation(CAPTURE_IMPLEMENTATION)
        with model_side(model, v):
            _ACTIVE = session
            yield session
    finally:
        _ACTIVE = None
        model.set_attn_implementation(prev_impl)


def capture_scores(
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
    plant: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Run ``tokens (sequence, position)`` through ``model`` under ``variant``; reduce the scores.

    Returns the reducers' :meth:`~Reducer.result` datasets merged into one, each variable's
    ``attrs["reducer"]`` naming its reducer class (for :func:`causalpos.io.store.merge_shards`),
    with attrs: model, model_spec, model_revision, architecture, dtype, device, seq_len,
    n_sequences, variant, seed, scaling, softcap, bos, n_layers, n_heads, n_kv_heads, versions.
    ``seq_ids``: global sequence indices of the rows (default ``0..n-1``; pass them for shards).
    ``attrs``: extra attributes (e.g. dataset name, bos, code fingerprint) — they take
    precedence. ``bos`` defaults to "every sequence starts with ``config.bos_token_id``".
    ``plant``: ``{"layer", "scale"}`` of a planted variant (:func:`resolve_plant`); the store
    then records ``plant_term``, ``plant_layer`` (resolved, 0-based), ``plant_scale`` and
    ``plant_profile``. A progress bar goes to stderr (the job log).
    """
    from tqdm import tqdm

    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[0] == 0 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(
            f"capture_scores: tokens must be a non-empty (sequence, position) integer array, got {tokens.shape} {tokens.dtype}"
        )
    n, t = tokens.shape
    seq_ids = (
        np.arange(n, dtype=np.int64) if seq_ids is None else np.asarray(seq_ids, dtype=np.int64)
    )
    if seq_ids.shape != (n,):
        raise ValueError(f"capture_scores: seq_ids shape {seq_ids.shape} != ({n},)")
    if batch_size < 1:
        raise ValueError(f"capture_scores: batch_size must be >= 1, got {batch_size}")
    if not reducers:
        raise ValueError("capture_scores: give at least one reducer")
    names = [r.name for r in reducers]
    if len(set(names)) != len(names):
        raise ValueError(f"capture_scores: reducer names must be unique, got {names}")
    v = parse_variant(variant)
    config = model.config
    n_layers = config.num_hidden_layers
    device = next(model.parameters()).device
    # Reducers of hidden states (reads_scores False: position 0) hook the blocks instead; a
    # variant with only those runs the model's own attention, no score capture.
    on_scores = [r for r in reducers if getattr(r, "reads_scores", True)]
    on_states = [r for r in reducers if not getattr(r, "reads_scores", True)]
    planted, plant_attrs = resolve_plant(v, plant, n_layers, t)
    if planted and not on_scores:
        raise ValueError(
            f"capture_scores: variant {v.name!r} plants a term in the attention scores, but no "
            "reducer reads scores (the plant is applied by the score capture)"
        )
    bar = tqdm(total=n, desc=f"extract {v.name}", unit="seq", file=sys.stderr, disable=not progress)
    with ExitStack() as stack:
        stack.enter_context(torch.inference_mode())
        if on_scores:
            session = stack.enter_context(capturing(model, on_scores, variant=v, plant=planted))
        else:
            session = None
            stack.enter_context(model_side(model, v))
        for r in on_states:
            stack.enter_context(r.attached(model))
        for start in range(0, n, batch_size):
            ids = torch.from_numpy(tokens[start : start + batch_size].astype(np.int64)).to(device)
            sids = seq_ids[start : start + batch_size]
            if session is not None:
                session.begin_batch(sids)
            for r in on_states:
                r.begin_batch(sids)
            # logits_to_keep=1: the vocabulary projection of every position is not needed.
            try:
                model(
                    **variant_inputs(
                        model, ids, sids, v, seed=seed, replace_token_id=replace_token_id
                    ),
                    use_cache=False,
                    logits_to_keep=1,
                )
            except Exception:
                if session is not None:
                    session.check_nan()  # a reducer failing on NaN scores: name their source
                raise
            if session is not None and sorted(session.calls) != list(range(n_layers)):
                raise RuntimeError(
                    f"capture: {n_layers} layers but the capture saw layer calls {session.calls}; "
                    "some attention layers bypass transformers' AttentionInterface"
                )
            if session is not None:
                session.check_nan()
            for r in on_states:
                r.end_batch()
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
    scalings = [session.scaling[i] for i in sorted(session.scaling)] if session else []
    softcaps = [session.softcap[i] for i in sorted(session.softcap)] if session else []
    bos_id = getattr(config, "bos_token_id", None)
    revision = source.get("revision") or source.get("file_sha256") or source.get("sha256")
    ds.attrs = {
        "model": source.get("name", getattr(config, "name_or_path", "")),
        "model_spec": json.dumps(source.get("spec", {}), sort_keys=True),
        "model_revision": json.dumps(revision, sort_keys=True)
        if isinstance(revision, dict)
        else (revision or ""),
        "architecture": config.model_type,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "device": str(device),
        "seq_len": int(t),
        "n_sequences": int(n),
        "variant": v.name,
        "seed": int(seed),
        # "none": no scores were captured (a variant of hidden-state reducers only)
        "scaling": "none" if not scalings else scalings[0] if len(set(scalings)) == 1 else scalings,
        "softcap": "none"
        if all(s is None for s in softcaps)
        else [s if s is not None else "none" for s in softcaps],
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
        **plant_attrs,
        **(attrs or {}),
    }
    return ds


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)
