"""Position 0's residual stream, read inside a model's forward pass (paper 2 §4).

Under causal attention position 0 attends only to itself, so its residual stream evolves as a
closed system from the embedding of token 0 (:mod:`causalpos.paper2.position0` analyses it).
This module reads it:

- :class:`Position0States` is an extraction reducer that reads no scores: forward hooks copy
  row 0 of every decoder block's input and of the last block's output (before the final norm),
  and, where asked, the value vectors at key 0 of every block, v_proj(input_layernorm(h_ℓ[0])).
  Extraction runs it next to the score reducers of a variant, so the position-0 conditions
  cost no forward pass of their own (one model load, one pass over the prompts, per job).
- :func:`position0_states` / :func:`condition_states` run it on their own (a library call,
  e.g. the GPU tests); :func:`position0_values` gives the value vectors of stored states.

Left padding breaks the premise (position 0 becomes a pad), so padded inputs are refused
(:func:`check_unpadded`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
import xarray as xr

from causalpos.capture import merging
from causalpos.models.variants import VARIANTS

#: Forward-pass conditions whose position-0 states can be read (capture's variant names;
#: scrambled RoPE changes position ids, which position 0 never sees through a causal mask).
POSITION0_CONDITIONS = tuple(v for v in VARIANTS if v != "scrambled_rope")

#: What ``p0_layer`` counts.
LAYER_NOTE = "0 = the first block's input (embedding output), l = after block l (pre-final-norm)"


def check_unpadded(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    pad_token_id: int | None = None,
    bos_token_id: int | None = None,
) -> None:
    """Refuse inputs whose position 0 may not be the prompt's first token.

    Raises ``ValueError`` if ``attention_mask`` has any zero (padding) or if a row starts with the
    pad token (left padding). Right padding would be harmless for position 0 under a causal mask,
    but a mask with zeros is refused all the same: the trajectory needs N prompts of equal length.
    """
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be (prompt, T), got shape {tuple(input_ids.shape)}")
    if attention_mask is not None and bool((attention_mask == 0).any()):
        rows = torch.nonzero((attention_mask == 0).any(dim=1)).flatten()[:5].tolist()
        raise ValueError(
            f"attention_mask has zeros (padding) in prompts {rows}: the position-0 trajectory needs "
            "prompts of equal length without padding (left padding moves a pad token to position 0). "
            "Cut every prompt to the same number of tokens and pass no attention mask."
        )
    if pad_token_id is not None and pad_token_id != bos_token_id:
        left = input_ids[:, 0] == pad_token_id
        if bool(left.any()):
            rows = torch.nonzero(left).flatten()[:5].tolist()
            raise ValueError(
                f"prompts {rows} start with the pad token id {pad_token_id} (left padding): position 0 "
                "must be the prompt's first token. Use unpadded prompts of equal length."
            )


def decoder_layers(model) -> torch.nn.ModuleList | None:
    """The decoder blocks (``model.model.layers`` for Llama-family models), None if not found."""
    base = getattr(model, "base_model", None) or getattr(model, "model", None)
    layers = getattr(base, "layers", None) if base is not None else None
    return layers if isinstance(layers, torch.nn.ModuleList) else None


def _values(model, states: torch.Tensor) -> torch.Tensor:
    """``(b, L, kv_head, head_dim)`` value vectors at key 0 from ``(b, L+1, d)`` states, in the
    model's dtype (``states`` hold the model's numbers, so the cast back is exact)."""
    layers = decoder_layers(model)
    if (
        layers is None
        or not hasattr(layers[0], "input_layernorm")
        or not hasattr(layers[0].self_attn, "v_proj")
    ):
        raise ValueError(
            "position-0 value vectors need a Llama-family layout (model.model.layers[i]"
            f".input_layernorm, .self_attn.v_proj); {type(model).__name__} has none"
        )
    cfg = model.config
    n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    p = next(model.parameters())
    out = []
    for l, layer in enumerate(layers):
        h = states[:, l].to(dtype=p.dtype, device=p.device)
        out.append(layer.self_attn.v_proj(layer.input_layernorm(h)).reshape(-1, n_kv, head_dim))
    return torch.stack(out, dim=1)


class Position0States:
    """Extraction reducer reading position 0's residual stream instead of scores.

    ``reads_scores = False``: the capture hands it no scores; :func:`causalpos.capture.hook.
    extract_scores` attaches it to the model (:meth:`attached`) and calls :meth:`begin_batch` /
    :meth:`end_batch` around each forward pass. ``values``: also keep the value vectors at key 0
    (the sink probe's features; :data:`causalpos.models.variants.POSITION0_PROBE_CONDITION`
    only, by the extraction stage).

    Result: ``p0_state (sequence, p0_layer, hidden)`` and ``p0_value (sequence, layer, kv_head,
    head_dim)``, float32 — the model's own numbers (float32, or bfloat16 widened exactly), so
    nothing is rounded. Memory is one shard's states: (L+1) × d × 4 bytes a sequence (SmolLM2:
    71 kB; an 8B model: 0.5 MB).
    """

    name = "position0"
    reads_scores = False

    def __init__(self, *, values: bool = False) -> None:
        self.values = bool(values)
        self._states: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._ids: list[np.ndarray] = []
        self._rows: dict[int, torch.Tensor] = {}
        self._batch_ids = np.zeros(0, dtype=np.int64)
        self._model = None
        self._n_layers = 0
        self.values_note = ""

    @contextmanager
    def attached(self, model) -> Iterator[Position0States]:
        """Hooks on ``model``'s decoder blocks inside the block; removed on exit."""
        layers = decoder_layers(model)
        if layers is None:
            raise ValueError(
                f"position-0 capture needs the decoder blocks (model.model.layers); "
                f"{type(model).__name__} has none"
            )
        n = len(layers)

        def before(i: int):
            def hook(_mod, args, kwargs):
                h = args[0] if args else kwargs["hidden_states"]
                self._rows[i] = h[:, 0].to(torch.float32, copy=True)

            return hook

        def after(_mod, _args, out):
            h = out[0] if isinstance(out, tuple) else out
            self._rows[n] = h[:, 0].to(torch.float32, copy=True)

        handles = [
            layer.register_forward_pre_hook(before(i), with_kwargs=True)
            for i, layer in enumerate(layers)
        ]
        handles.append(layers[-1].register_forward_hook(after))
        self._model, self._n_layers = model, n
        try:
            yield self
        finally:
            for h in handles:
                h.remove()
            self._model = None

    def begin_batch(self, seq_ids: np.ndarray) -> None:
        self._rows = {}
        self._batch_ids = np.asarray(seq_ids, dtype=np.int64)

    def end_batch(self) -> None:
        n = self._n_layers
        if sorted(self._rows) != list(range(n + 1)):
            raise RuntimeError(
                f"position-0 capture: {n} blocks but hooks saw {sorted(self._rows)}; the forward "
                "pass did not run every decoder block"
            )
        states = torch.stack([self._rows[i] for i in range(n + 1)], dim=1)  # (b, L+1, d)
        if self.values and not self.values_note:
            try:
                self._values.append(_values(self._model, states).float().cpu().numpy())
            except ValueError as exc:
                self.values_note = str(exc)
        self._states.append(states.cpu().numpy())
        self._ids.append(self._batch_ids)
        self._rows = {}

    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        raise RuntimeError("Position0States reads hidden states, not scores (reads_scores=False)")

    def result(self) -> xr.Dataset:
        if not self._states:
            raise ValueError("position-0 capture: no batch was read")
        states = np.concatenate(self._states)
        ds = xr.Dataset(
            {"p0_state": (("sequence", "p0_layer", "hidden"), states, {"layer_note": LAYER_NOTE})},
            coords={"sequence": np.concatenate(self._ids), "p0_layer": np.arange(states.shape[1])},
        )
        if self._values and not self.values_note:
            vals = np.concatenate(self._values)
            ds["p0_value"] = (("sequence", "layer", "kv_head", "head_dim"), vals)
            ds = ds.assign_coords(layer=np.arange(vals.shape[1]))
        elif self.values:
            ds["p0_state"].attrs["values_note"] = self.values_note
        return ds

    @classmethod
    def merge(cls, parts: Sequence[xr.Dataset]) -> xr.Dataset:
        return merging.merge_position0(parts)


@torch.no_grad()
def position0_states(
    model,
    input_ids: torch.Tensor | None = None,
    *,
    inputs_embeds: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    batch_size: int | None = None,
) -> np.ndarray:
    """Residual stream at position 0: the first block's input and every block's output.

    Args:
        model: a Hugging Face causal LM (decoder blocks at ``model.model.layers``).
        input_ids: ``(prompt, T)`` token ids, no padding (see :func:`check_unpadded`).
        inputs_embeds: ``(prompt, T, d)`` instead of ``input_ids`` (BOS replacement).
        attention_mask: refused if it has zeros; otherwise not passed on.
        batch_size: prompts per forward pass; None = all at once. Bitwise-equal position-0 states
            across prompts are guaranteed by the maths only up to the kernels: batches of different
            sizes may take different BLAS paths, so keep the default for exactness checks.

    Returns:
        ``(prompt, layer, dim)`` float64, layer 0 = embedding output, layer ℓ = after block ℓ
        (the last one before the final norm), read by :class:`Position0States`.
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids and inputs_embeds")
    cfg = model.config
    if input_ids is not None:
        check_unpadded(
            input_ids,
            attention_mask,
            getattr(cfg, "pad_token_id", None),
            getattr(cfg, "bos_token_id", None),
        )
        n = input_ids.shape[0]
    else:
        if inputs_embeds.ndim != 3:
            raise ValueError(
                f"inputs_embeds must be (prompt, T, d), got shape {tuple(inputs_embeds.shape)}"
            )
        check_unpadded(torch.zeros(inputs_embeds.shape[:2], dtype=torch.long), attention_mask)
        n = inputs_embeds.shape[0]
    bs = n if batch_size is None else int(batch_size)
    reader = Position0States()
    with reader.attached(model):
        for start in range(0, n, bs):
            sl = slice(start, start + bs)
            kw = (
                {"input_ids": input_ids[sl]}
                if input_ids is not None
                else {"inputs_embeds": inputs_embeds[sl]}
            )
            reader.begin_batch(np.arange(start, min(n, start + bs)))
            # logits_to_keep=1: the vocabulary projection of every position is not needed
            model(**kw, use_cache=False, logits_to_keep=1)
            reader.end_batch()
    return reader.result()["p0_state"].values.astype(np.float64)


@torch.no_grad()
def position0_values(model, states: np.ndarray) -> np.ndarray:
    """Value vectors at key 0 of every block: v_proj(input_layernorm(h_ℓ[0])).

    Args:
        model: Llama-family causal LM (``model.model.layers[ℓ].input_layernorm`` / ``.self_attn.v_proj``).
        states: ``(prompt, L+1, d)`` from :func:`position0_states` (entry ℓ is block ℓ's input).

    Returns:
        ``(prompt, layer, kv_head, head_dim)`` float64 (values carry no rotary embedding).
    """
    return _values(model, torch.as_tensor(np.asarray(states))).to(torch.float64).cpu().numpy()


@torch.no_grad()
def condition_states(
    model,
    input_ids: torch.Tensor,
    condition: str,
    *,
    seq_ids: np.ndarray | None = None,
    seed: int = 0,
    batch_size: int | None = None,
) -> np.ndarray:
    """:func:`position0_states` under a forward-pass condition (one of :data:`POSITION0_CONDITIONS`).

    ``bidirectional`` sets ``config.is_causal = False`` for the call; ``identity_rope`` replaces the
    rotation by the identity; ``bos_replace_*`` feeds :func:`causalpos.models.forward.
    bos_replaced_embeddings` (the same replacement, seeded by ``(seed, sequence id)``, as the
    extraction of that variant). The model is restored afterwards.
    """
    from causalpos.models.forward import bos_replaced_embeddings, model_side
    from causalpos.models.variants import parse_variant

    if condition not in POSITION0_CONDITIONS:
        raise ValueError(
            f"position-0 condition {condition!r} not supported; allowed: {list(POSITION0_CONDITIONS)}"
        )
    v = parse_variant(condition)
    seq_ids = np.arange(input_ids.shape[0]) if seq_ids is None else np.asarray(seq_ids)
    with model_side(model, v):
        if v.bos_replace is not None:
            embeds = bos_replaced_embeddings(
                model, input_ids, seq_ids, v.bos_replace, per_prompt=v.per_prompt, seed=seed
            )
            return position0_states(model, inputs_embeds=embeds, batch_size=batch_size)
        return position0_states(model, input_ids, batch_size=batch_size)
