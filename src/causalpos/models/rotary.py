"""Rotary position embeddings switched off at load: a model whose ``config.json`` says
``causalpos_rope: "none"`` (:data:`ROPE_CONFIG_KEY`) runs with every rotation the identity
(:func:`disable_rope`), how paper 1 loads its NoPE checkpoint and how the ``identity_rope``
variants run."""

from __future__ import annotations

import torch

from causalpos.models.architectures import ModelSpecError

ROPE_CONFIG_KEY = "causalpos_rope"


def disable_rope(model: torch.nn.Module) -> list[torch.utils.hooks.RemovableHandle]:
    """Make every rotary embedding of ``model`` the identity; returns the hook handles.

    The rotary modules' output ``(cos, sin)`` becomes ``(s, 0)``, ``s`` the rope type's attention
    scaling (1 for default/llama3 RoPE; the YaRN/longrope m-scale otherwise): every position is
    rotated like position 0, and ``q·cos + rotate_half(q)·sin`` is exactly ``s·q`` (the identity,
    bit for bit, when ``s == 1``).
    """
    modules = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    if not modules:
        raise ModelSpecError(
            f"cannot disable RoPE in {type(model).__name__}: no *RotaryEmbedding module found "
            "(the model may not use RoPE at all); drop `rope: none` / the identity_rope variant"
        )

    def hook(module, args, kwargs, output):
        cos, sin = output
        layer_type = kwargs.get("layer_type", args[2] if len(args) > 2 else None)
        scale = getattr(module, "attention_scaling", None)
        if layer_type is not None and hasattr(module, f"{layer_type}_attention_scaling"):
            scale = getattr(module, f"{layer_type}_attention_scaling")
        scale = 1.0 if scale is None else float(scale)
        return torch.full_like(cos, scale), torch.zeros_like(sin)

    return [m.register_forward_hook(hook, with_kwargs=True) for m in modules]


def apply_rope_setting(model: torch.nn.Module, *, where: str = "config") -> torch.nn.Module:
    """Honour ``config.causalpos_rope``: ``"none"`` makes every rotation the identity (the hooks
    are kept on ``model.causalpos_rope_hooks``); ``"rope"`` (or absent) leaves the model as is."""
    rope = getattr(model.config, ROPE_CONFIG_KEY, "rope")
    if rope == "none":
        model.causalpos_rope_hooks = disable_rope(model)
    elif rope != "rope":
        raise ValueError(f"{where} has {ROPE_CONFIG_KEY}={rope!r}; allowed 'rope' | 'none'")
    return model
