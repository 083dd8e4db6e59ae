"""Forward-pass variants (the ``{variant}`` wildcard): names, parsing and seeded draws.

Torch-free, so config resolution can validate variant names without importing a model stack.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
