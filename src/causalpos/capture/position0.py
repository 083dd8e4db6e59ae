"""Position 0's residual stream, read inside a model's forward pass (paper 2 §4).

Under causal attention position 0 attends only to itself, so its residual stream evolves as a
closed system from the embedding of token 0 (:mod:`causalpos.paper2.position0` analyses it).
Extraction runs :class:`Position0States` next to a variant's score reducers, so the position-0
conditions cost no forward pass of their own. Left padding would break the premise (position 0
becomes a pad): extraction's prompts are sequences of equal length without padding.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
import xarray as xr

from causalpos.capture import merging

#: What ``p0_layer`` counts.
LAYER_NOTE = "0 = the first block's input (embedding output), l = after block l (pre-final-norm)"


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
    """Extraction reducer reading position 0's residual stream instead of scores: forward hooks
    copy row 0 of every decoder block's input and of the last block's output (before the final
    norm), and with ``values`` the value vectors at key 0 of every block,
    v_proj(input_layernorm(h_ℓ[0])) (the sink probe's features: extraction asks for them under
    :data:`causalpos.models.variants.POSITION0_PROBE_CONDITION` only).

    ``reads_scores = False``: the capture hands it no scores; it is attached to the model
    (:meth:`attached`) and :meth:`begin_batch` / :meth:`end_batch` run around each forward pass.

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

        def before(i: int, _mod, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            self._rows[i] = h[:, 0].to(torch.float32, copy=True)

        def after(_mod, _args, out):
            h = out[0] if isinstance(out, tuple) else out
            self._rows[n] = h[:, 0].to(torch.float32, copy=True)

        handles = [
            layer.register_forward_pre_hook(functools.partial(before, i), with_kwargs=True)
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

    merge = staticmethod(merging.merge_position0)
