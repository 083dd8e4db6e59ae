"""Pre-softmax attention scores, captured inside the model's own forward pass.

A custom function is registered in transformers' ``AttentionInterface`` *and* a mask function in
``AttentionMaskInterface`` under one name (:data:`CAPTURE_IMPLEMENTATION`): without the mask
registration transformers decides the implementation needs no mask and the model silently runs
unmasked (design.md, offline facts). The attention function takes post-RoPE ``query (batch, head,
query, dim)`` and ``key (batch, kv_head, key, dim)`` (GQA's query heads sharing a key head folded
into the rows of one matmul: the keys are never copied), computes ``scores = (q · kᵀ) · scaling``
in float32 whatever the model dtype (then tanh soft-capping where the layer passes ``softcap``),
NaN where the layer's mask hides a cell (never ±inf or dtype-min values), hands ``scores (batch,
head, query, key)`` to every reducer and computes the layer's output with ``sdpa``: the captured
model's logits equal the unhooked model's. ``ring`` (:mod:`causalpos.capture.ring`), a
soft-capped layer and ``plant_query`` (b_i of :func:`causalpos.models.variants.plant_term` added
to row i after scaling and capping) compute the output from the captured scores, eagerly: the
model attends with what it is read with (a query term cancels in the softmax). Memory: one batch
× one layer of scores (one reusable float32 buffer) plus the reducers' state (float64).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import torch
import xarray as xr

from causalpos.capture.attrs import run_attrs
from causalpos.capture.reducers import Reducer, reducer_path
from causalpos.capture.ring import RingRotation, ring_scores
from causalpos.capture.session import CAPTURE_IMPLEMENTATION, CaptureSession
from causalpos.capture.settings import CaptureRun
from causalpos.capture.stream import StreamPlant, planted_stream, resolve_stream
from causalpos.models.forward import model_side, variant_inputs
from causalpos.models.layer_kinds import config_kinds
from causalpos.models.variants import PLANT_PROFILE, Variant, parse_variant, plant_layer, plant_term

_ACTIVE: CaptureSession | None = None


def _capture_mask(*args: Any, **kwargs: Any) -> torch.Tensor:
    # Always materialize the boolean mask (no "is_causal" shortcut returning None): the
    # attention function needs the exact pattern — causal, sliding window or bidirectional.
    from transformers.masking_utils import sdpa_mask

    kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
    return sdpa_mask(*args, **kwargs)


def _capture_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention function registered as :data:`CAPTURE_IMPLEMENTATION` (see module doc); the
    layer passes ``dropout``, ``scaling`` and ``softcap`` (where it caps) among ``kwargs``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    session = _ACTIVE
    if session is None:
        raise RuntimeError(
            f"capture: model called with attn_implementation={CAPTURE_IMPLEMENTATION!r} outside "
            "an extraction; use causalpos.capture.hook.capture_scores or `with capturing(...)`"
        )
    dropout, scaling = kwargs.get("dropout", 0.0), kwargs.get("scaling")
    softcap = kwargs.get("softcap")
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
    if session.ring is not None:
        if kind != "full":
            raise RuntimeError(
                f"variant ring: layer {layer}'s mask still hides pairs ({kind}); this "
                "architecture builds its masks without config.is_causal / sliding_window, so "
                "the ring ablation cannot remove them"
            )
        pos = kwargs.get("position_ids")
        pos = session.positions(tq, query.device) if pos is None else pos.reshape(-1, tq)
        ring_scores(scores, q, k, session.ring, module, pos)
    if session.no_window and kind == "custom":
        raise RuntimeError(
            f"variant no_window: layer {layer}'s mask is neither causal nor full (a window still "
            "hides pairs); this architecture builds its sliding masks without "
            "config.sliding_window, so the window cannot be removed"
        )
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

    if softcap is not None or planted is not None or session.ring is not None:
        # sdpa has no soft-capping, no planted term and no ring: finish from the captured
        # scores, eagerly.
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


@functools.cache
def register_capture() -> None:
    """Register the capture attention and mask functions (once)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CAPTURE_IMPLEMENTATION, _capture_attention)
    AttentionMaskInterface.register(CAPTURE_IMPLEMENTATION, _capture_mask)


def resolve_plant(
    variant: Variant, plant: Mapping[str, Any] | None, n_layers: int, seq_len: int
) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
    """The planted term of ``variant`` (layer -> b) and the store attrs that record it.

    ``plant``: ``{"layer": int (negative counts from the last), "scale": a}`` (config
    ``leakage.plant``), required by a planted variant and refused by any other.
    """
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
) -> Iterator[CaptureSession]:
    """Run ``model`` with score capture (and the variant's model-side changes, undone on exit)
    inside the block; call ``session.begin_batch(seq_ids)`` before each forward call. Input-side
    changes are :func:`variant_inputs`'. ``plant``: layer -> the term b (T,) added to that
    layer's query rows (:func:`resolve_plant`).
    """
    global _ACTIVE
    v = parse_variant(variant) if isinstance(variant, str) else variant
    if _ACTIVE is not None:
        raise RuntimeError("capture: nested capture sessions are not supported")
    register_capture()
    prev_impl = model.config._attn_implementation
    session = CaptureSession(reducers)
    session.unmasked = v.unmasked_scores
    session.ring = RingRotation(model) if v.ring else None
    session.no_window = not v.window
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
    run: CaptureRun,
    *,
    reducers: list[Reducer],
    seq_ids: np.ndarray | None = None,
    attrs: dict[str, Any] | None = None,
) -> xr.Dataset:
    """Run ``tokens (sequence, position)`` through ``model`` under ``run.variant``; reduce the
    scores.

    Returns the reducers' :meth:`~Reducer.result` datasets merged, each variable's
    ``attrs["reducer"]`` naming its reducer class (for :func:`causalpos.io.shards.merge_shards`),
    with the attrs of :func:`causalpos.capture.attrs.run_attrs`, a planted variant's ``plant_*``
    (:func:`resolve_plant`) or ``plant_stream_*`` (:func:`causalpos.capture.stream.resolve_stream`)
    and ``attrs`` (extra ones, e.g. dataset name or code fingerprint; they take precedence).
    ``seq_ids``: global sequence indices of the rows (default ``0..n-1``; pass them for shards).
    """
    tokens, seq_ids = _checked_inputs(tokens, run, reducers, seq_ids)
    v = parse_variant(run.variant)
    n_layers = model.config.num_hidden_layers
    # Reducers of hidden states (reads_scores False: position 0) hook the blocks instead; a
    # variant with only those runs the model's own attention, no score capture.
    on_scores = [r for r in reducers if getattr(r, "reads_scores", True)]
    on_states = [r for r in reducers if not getattr(r, "reads_scores", True)]
    planted, plant_attrs = resolve_plant(v, run.plant, n_layers, tokens.shape[1])
    if (planted or v.ring) and not on_scores:
        raise ValueError(
            f"capture_scores: variant {v.name!r} changes the attention scores (a planted term "
            "or the ring's offsets), but no reducer reads scores (the score capture applies it)"
        )
    kinds = config_kinds(model.config)
    for reducer in reducers:
        if hasattr(reducer, "set_layer_kinds"):
            reducer.set_layer_kinds(kinds)
    shape = (tokens.shape[1], int(model.config.hidden_size))
    stream, stream_attrs = resolve_stream(
        v, run.stream, n_layers=n_layers, shape=shape, seed=run.seed
    )
    session = _forward_batches(
        model, tokens, seq_ids, v, run, (on_scores, on_states), (planted, stream)
    )
    parts = [reducer.result() for reducer in reducers]
    for reducer, part in zip(reducers, parts, strict=True):
        for var in part.data_vars.values():
            var.attrs["reducer"] = reducer_path(reducer)
    ds = xr.merge(parts, compat="no_conflicts", join="exact", combine_attrs="override")
    if "layer" in ds.dims:
        ds = ds.assign_coords(layer_kind=("layer", np.asarray(kinds, dtype=str)))
    ds.attrs = {
        **run_attrs(model, tokens, seq_ids, v, run.seed, session),
        **plant_attrs,
        **stream_attrs,
        **(attrs or {}),
    }
    return ds


def _checked_inputs(
    tokens: np.ndarray, run: CaptureRun, reducers: list[Reducer], seq_ids: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, seq_ids) of :func:`capture_scores` as arrays, refused where they or the reducers
    cannot run (the message says what was wrong)."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[0] == 0 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(
            f"capture_scores: tokens must be a non-empty (sequence, position) integer array, got {tokens.shape} {tokens.dtype}"
        )
    n = tokens.shape[0]
    seq_ids = np.asarray(np.arange(n) if seq_ids is None else seq_ids, dtype=np.int64)
    if seq_ids.shape != (n,):
        raise ValueError(f"capture_scores: seq_ids shape {seq_ids.shape} != ({n},)")
    if run.batch_size < 1:
        raise ValueError(f"capture_scores: batch_size must be >= 1, got {run.batch_size}")
    if not reducers:
        raise ValueError("capture_scores: give at least one reducer")
    names = [r.name for r in reducers]
    if len(set(names)) != len(names):
        raise ValueError(f"capture_scores: reducer names must be unique, got {names}")
    return tokens, seq_ids


def _forward_batches(
    model: torch.nn.Module,
    tokens: np.ndarray,
    seq_ids: np.ndarray,
    v: Variant,
    run: CaptureRun,
    reducers: tuple[list[Reducer], list[Reducer]],
    plants: tuple[dict[int, np.ndarray], StreamPlant | None],
) -> CaptureSession | None:
    """Every batch of ``tokens`` through ``model`` under variant ``v``, the score reducers
    (``reducers[0]``) fed by the capture and the hidden-state ones (``reducers[1]``) by their
    hooks, with the variant's planted terms (``plants``: the query term per layer, the stream
    plant); the capture session (None without score reducers)."""
    from causalpos.io.progress import progress_bar

    on_scores, on_states = reducers
    planted, stream = plants
    n, batch_size = tokens.shape[0], run.batch_size
    n_layers = model.config.num_hidden_layers
    device = next(model.parameters()).device
    bar = progress_bar(
        total=n, desc=f"extract {v.name}", unit="seq", file=sys.stderr, disable=not run.progress
    )
    with ExitStack() as stack:
        stack.enter_context(torch.inference_mode())
        stack.enter_context(planted_stream(model, stream))
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
            inputs = variant_inputs(model, ids, sids, v, seed=run.seed)
            if session is not None:
                session.begin_batch(sids)
                session.position_ids = inputs.get("position_ids")
            for r in on_states:
                r.begin_batch(sids)
            # logits_to_keep=1: the vocabulary projection of every position is not needed.
            try:
                model(**inputs, use_cache=False, logits_to_keep=1)
            except Exception:
                if session is not None:
                    session.check_nan()  # a reducer failing on NaN scores: name their source
                raise
            if session is not None:
                if sorted(session.calls) != list(range(n_layers)):
                    raise RuntimeError(
                        f"capture: {n_layers} layers but the capture saw layer calls "
                        f"{session.calls}; some attention layers bypass transformers' "
                        "AttentionInterface"
                    )
                session.check_nan()
            for r in on_states:
                r.end_batch()
            bar.update(len(sids))
    bar.close()
    return session
