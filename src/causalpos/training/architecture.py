"""The decoder of each positional variant, built from one initialisation.

=========  ===========================================================================================
variant    what differs (everything else — tokenizer, data order, initial weights, optimiser — is equal)
=========  ===========================================================================================
``rope``   standard rotary embedding (HF rotate-half convention, ``rope_theta``)
``nope``   no positional encoding: the rotary application is the identity (cos = 1, sin = 0). Same
           weights layout; ``causalpos_rope: "none"`` is written to ``config.json`` so that loaders
           (``causalpos.models.load.load_model``) rebuild the model without rotation
``ntk``    llama3-style frequency scaling of RoPE (``rope_parameters.rope_type = "llama3"``), with
           ``original_max_position_embeddings`` set to the training context so the scaling acts on
           the wavelengths the model actually sees (with Llama-3.1's 8192 it would touch almost
           nothing at a context of 128)
``swa``    sliding-window attention shorter than the training context: the Mistral architecture,
           which is Llama plus ``sliding_window`` (identical parameter names and shapes, so the
           initial weights are copied from the same Llama initialisation)
=========  ===========================================================================================

Every variant starts from bit-identical weights: those of a plain Llama model of the same size
built under ``torch.manual_seed(seed)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from causalpos.training.settings import VARIANTS, ModelShape


def apply_causalpos_attributes(model: nn.Module) -> nn.Module:
    """Honour ``causalpos_rope`` in ``model.config`` exactly as ``load_model`` does (``"none"``:
    the identity rotation, the package's one definition of NoPE), in place; returns ``model``."""
    from causalpos.models.rotary import apply_rope_setting

    return apply_rope_setting(model)


def build_config(
    variant: str,
    *,
    vocab_size: int,
    shape: ModelShape,
    context: int,
    window: int | None = None,
    ntk_factor: float = 8.0,
    ntk_original_context: int | None = None,
    special_ids: tuple[int, int, int] = (0, 1, 2),
):
    """The transformers config of ``variant`` (LlamaConfig, or MistralConfig for ``swa``).

    ``window`` (``swa`` only) defaults to ``context // 4``, ``ntk_original_context`` (``ntk``
    only) to ``context``; ``special_ids``: the BOS, EOS and padding ids. Every config carries
    ``causalpos_variant`` and ``causalpos_train_context``; NoPE's ``causalpos_rope = "none"``.
    """
    bos_id, eos_id, pad_id = special_ids
    from transformers import LlamaConfig, MistralConfig

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    if shape.hidden % shape.heads or shape.heads % shape.kv_heads:
        raise ValueError(
            f"hidden={shape.hidden} must be divisible by heads={shape.heads}, and heads by "
            f"kv_heads={shape.kv_heads}"
        )
    head_dim = shape.hidden // shape.heads
    if head_dim % 2:
        raise ValueError(
            f"head_dim = hidden/heads = {head_dim} must be even for the rotary embedding"
        )
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(shape.rope_theta)}
    extra: dict[str, Any] = {"causalpos_variant": variant, "causalpos_train_context": int(context)}
    max_positions = context
    if variant == "ntk":
        # llama3 scaling reads only original_max_position_embeddings; max_position_embeddings (the
        # nominal extended length, factor × original) only has to exceed it for transformers' check.
        max_positions = int(ntk_factor * (ntk_original_context or context))
        rope.update(
            rope_type="llama3",
            factor=float(ntk_factor),
            low_freq_factor=1.0,  # llama3 scaling's low and high frequency factors: Llama 3.1's
            high_freq_factor=4.0,
            original_max_position_embeddings=int(ntk_original_context or context),
        )
    if variant == "nope":
        from causalpos.models.rotary import ROPE_CONFIG_KEY

        extra[ROPE_CONFIG_KEY] = "none"
    common = dict(
        vocab_size=vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=head_dim,
        hidden_act="silu",
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=shape.tie_embeddings,
        attention_dropout=0.0,
        rope_parameters=rope,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        **extra,
    )
    if variant == "swa":
        window = context // 4 if window is None else int(window)
        if not 1 <= window < context:
            raise ValueError(
                f"swa window={window} must be in [1, context={context}) to mask anything in training"
            )
        return MistralConfig(sliding_window=window, **common)
    return LlamaConfig(**common)


def build_model(
    config, *, seed: int, base_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """A freshly initialised causal LM for ``config`` (identity rotation if NoPE).

    The initial weights are those of a plain Llama model of the same sizes built under
    ``torch.manual_seed(seed)``, whatever the class; ``base_state`` overrides them (resuming).
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if base_state is None:
        d = config.to_dict()
        keep = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "hidden_act",
            "rms_norm_eps",
            "initializer_range",
            "tie_word_embeddings",
            "bos_token_id",
            "eos_token_id",
            "pad_token_id",
        )
        base_cfg = LlamaConfig(
            **{k: d[k] for k in keep}, max_position_embeddings=config.max_position_embeddings
        )
        torch.manual_seed(seed)
        base_state = LlamaForCausalLM(base_cfg).state_dict()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        config, attn_implementation="sdpa", trust_remote_code=False
    )
    missing, unexpected = model.load_state_dict(dict(base_state), strict=False)
    # Tied lm_head may be absent from a state dict; anything else missing is a real mismatch.
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(
            f"initial weights do not fit {type(model).__name__}: missing {missing}, unexpected {unexpected}"
        )
    if config.tie_word_embeddings:
        model.tie_weights()
    return apply_causalpos_attributes(model)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
