"""How each forward-pass variant is run: RoPE switched off, position 0 replaced, model inputs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import torch

from causalpos.models.rotary import disable_rope
from causalpos.models.variants import (
    GLOBAL_TYPE,
    SLIDING_TYPE,
    Variant,
    _rng,
    factor_refusal,
    scrambled_position_ids,
)


def _special_ids(config: Any) -> set[int]:
    keys = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")
    ids = [getattr(config, k, None) for k in keys]  # an id, a list of ids, or None
    return {
        int(x) for v in ids for x in (v if isinstance(v, (list, tuple)) else [v]) if x is not None
    }


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
) -> torch.Tensor:
    """``inputs_embeds (batch, position, hidden)`` with only row 0 replaced.

    Embeddings come from the model's own input-embedding module (so models that scale
    embeddings inside it, like Gemma, stay correct). ``kind``: "mean" (over the vocabulary),
    "zeros", "token" (a non-special token drawn with the seed), "gaussian" (standard normal,
    rescaled to the norm of the original row 0). ``per_prompt``: one draw per sequence, seeded by
    ``(seed, sequence id)``; otherwise one draw for all.
    """
    emb = model.get_input_embeddings()
    embeds = emb(input_ids)
    b, _, hidden = embeds.shape
    original = embeds[:, 0].float()
    # a draw per prompt, or one for all (a generator seeded alike draws alike)
    keys = list(seq_ids) if per_prompt else [None] * b
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
        toks = [_draw_token(vocab, exclude, _rng(seed, s, 2)) for s in keys]
        repl = emb(torch.tensor(toks, device=input_ids.device)).float()
    elif kind == "gaussian":
        g = np.stack([_rng(seed, s, 3).standard_normal(hidden) for s in keys])
        g = torch.from_numpy(g).to(device=embeds.device, dtype=torch.float32)
        repl = g / g.norm(dim=-1, keepdim=True) * original.norm(dim=-1, keepdim=True)
    else:
        raise ValueError(f"bos replacement {kind!r} not in ('mean', 'zeros', 'token', 'gaussian')")
    embeds = embeds.clone()
    embeds[:, 0] = repl.to(embeds.dtype)
    return embeds


def variant_inputs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    seq_ids: np.ndarray,
    variant: Variant,
    *,
    seed: int,
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
            model, input_ids, seq_ids, variant.bos_replace, per_prompt=variant.per_prompt, seed=seed
        )
    else:
        kwargs["input_ids"] = input_ids
    return kwargs


_MISSING = object()

#: The window a ``ring`` or ``no_window`` pass gives sliding layers: longer than any sequence,
#: so it masks nothing.
NO_WINDOW = 2**31 - 1


def global_inv_freq(rotary: torch.nn.Module) -> torch.Tensor:
    """The inverse frequencies of the global layers' RoPE base at the sliding layers' rotary
    dimension: transformers' default RoPE, θ_k = base^(−2k/d), with the global layers' base
    (``rope_theta`` of ``full_attention``) — their base, not any scaling of theirs."""
    own = getattr(rotary, f"{SLIDING_TYPE}_inv_freq")
    inv, _ = rotary.compute_default_rope_parameters(rotary.config, own.device, GLOBAL_TYPE)
    if inv.shape != own.shape:
        raise ValueError(
            f"variant global_base: the global layers' rotary dimension ({2 * inv.shape[-1]}) "
            f"differs from the sliding layers' ({2 * own.shape[-1]}); their bases cannot be swapped"
        )
    return inv.to(device=own.device, dtype=own.dtype)


@contextmanager
def _global_base(model: torch.nn.Module) -> Iterator[None]:
    """The sliding layers' rotary buffers replaced by the global base's (restored on exit)."""
    mods = [m for m in model.modules() if hasattr(m, f"{SLIDING_TYPE}_inv_freq")]
    if len(mods) != 1 or getattr(mods[0], "rope_type", {}).get(SLIDING_TYPE) != "default":
        raise ValueError(
            f"variant global_base: expected one rotary module with default RoPE on its "
            f"{SLIDING_TYPE} layers in {type(model).__name__} (Gemma 3's), found {len(mods)}"
        )
    rotary = mods[0]
    names = (f"{SLIDING_TYPE}_inv_freq", f"{SLIDING_TYPE}_original_inv_freq")
    saved = {n: getattr(rotary, n) for n in names}
    new = global_inv_freq(rotary)
    try:
        for n in names:
            setattr(rotary, n, new.clone())
        yield
    finally:
        for n, value in saved.items():
            setattr(rotary, n, value)


@contextmanager
def model_side(model: torch.nn.Module, variant: Variant) -> Iterator[torch.nn.Module]:
    """Apply ``variant``'s model-side changes for the block, undone on exit: ``config.is_causal =
    False`` when bidirectional, no sliding window for ``ring`` and ``no_window``, the identity
    rotation for ``identity_rope``, the global base's inverse frequencies on the sliding layers
    for ``global_base`` (a factor atom the model cannot run,
    :func:`causalpos.models.variants.factor_refusal`, is a ValueError). Input-side changes:
    :func:`variant_inputs`."""
    config = model.config
    if variant.global_base or not variant.window:
        if why := factor_refusal(variant.name, config):
            raise ValueError(f"variant {variant.name!r} on {type(model).__name__}: {why}")
    unwindowed = variant.ring or not variant.window
    prev_causal = getattr(config, "is_causal", _MISSING)
    prev_window = getattr(config, "sliding_window", None)
    handles = []
    try:
        if not variant.causal:
            config.is_causal = False
        if unwindowed and prev_window is not None:
            # every window removed: transformers builds its sliding masks from this value
            config.sliding_window = NO_WINDOW
        if variant.rope == "identity":
            handles = disable_rope(model)
        with _global_base(model) if variant.global_base else nullcontext():
            yield model
    finally:
        for handle in handles:
            handle.remove()
        if unwindowed and prev_window is not None:
            config.sliding_window = prev_window
        if prev_causal is _MISSING:
            if hasattr(config, "is_causal"):
                delattr(config, "is_causal")
        else:
            config.is_causal = prev_causal
