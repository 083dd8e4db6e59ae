"""How each forward-pass variant is run: RoPE switched off, position 0 replaced, model inputs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from causalpos.models.rotary import disable_rope
from causalpos.models.variants import Variant, _rng, scrambled_position_ids


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
            tok = (
                token_id
                if token_id is not None
                else _draw_token(vocab, exclude, _rng(seed, None, 2))
            )
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
            model,
            input_ids,
            seq_ids,
            variant.bos_replace,
            per_prompt=variant.per_prompt,
            seed=seed,
            token_id=replace_token_id,
        )
    else:
        kwargs["input_ids"] = input_ids
    return kwargs


_MISSING = object()

#: The window a ``ring`` pass gives sliding layers: longer than any sequence, so it masks nothing.
NO_WINDOW = 2**31 - 1


@contextmanager
def model_side(model: torch.nn.Module, variant: Variant) -> Iterator[torch.nn.Module]:
    """Apply ``variant``'s model-side changes for the block: ``config.is_causal = False`` when it
    is bidirectional (and, for ``ring``, no sliding window), the rotation replaced by the identity
    for ``identity_rope``. All are undone
    on exit (an ``is_causal`` the config did not have is removed again). Input-side changes
    (scrambled position ids, BOS replacement) are :func:`variant_inputs`'."""
    config = model.config
    prev_causal = getattr(config, "is_causal", _MISSING)
    prev_window = getattr(config, "sliding_window", None)
    handles = []
    try:
        if not variant.causal:
            config.is_causal = False
        if variant.ring and prev_window is not None:
            # every mask removed: transformers builds its sliding masks from this value
            config.sliding_window = NO_WINDOW
        if variant.rope == "identity":
            handles = disable_rope(model)
        yield model
    finally:
        for handle in handles:
            handle.remove()
        if variant.ring and prev_window is not None:
            config.sliding_window = prev_window
        if prev_causal is _MISSING:
            if hasattr(config, "is_causal"):
                delattr(config, "is_causal")
        else:
            config.is_causal = prev_causal
