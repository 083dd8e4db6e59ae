"""The ring ablation's scores (variant ``ring``, :mod:`causalpos.models.variants`).

Why a ring: any unmasked pass over a finite sequence with RoPE creates absolute position of its
own (a query near either end sees offsets on one side only; measured on SmolLM2 and Gemma-3 270M:
docs/findings.md). On a ring every query sees the same offsets: query i and key j score at

    c(i, j) = ((i − j + ⌊T/2⌋) mod T) − ⌊T/2⌋  ∈ [−⌊T/2⌋, T − ⌊T/2⌋),

so the pass commutes with cyclic shifts of its input (no mask, no absolute position embedding):
for i.i.d. tokens the expected map is circulant and reads no position; only a fixed token 0
stays a landmark.

How: a post-RoPE key moved by ±T positions is R(±T) k, so the ring's score is q·k, q·R(T)k
(c = p_i − p_j − T) or q·R(−T)k (c = p_i − p_j + T). R is the model's own rotary module at
position T (per layer type, e.g. Gemma 3's local and global bases) divided by its attention
scaling; positions are the batch's position ids (scrambled RoPE permutes them per sequence).
"""

from __future__ import annotations

import inspect

import torch

#: Architectures whose rotation is transformers' ``rotate_half`` form on the first
#: ``cos.shape[-1]`` dimensions of each head (the ring's key rotation reproduces it).
RING_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3", "gemma3_text")


def cyclic_regions(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(forward, backward)`` bool masks ``(b or 1, 1, T, T)`` of the pairs whose cyclic offset
    is p_i − p_j − T (the key moved forward by T) and p_i − p_j + T (moved back by T), for
    position ids ``positions (b or 1, T)`` that are a permutation of 0..T−1."""
    T = positions.shape[-1]
    d = positions[:, :, None] - positions[:, None, :]
    half = T // 2
    return (d >= T - half)[:, None], (d < -half)[:, None]


class RingRotation:
    """R(±T) of a model's rotary embedding, per layer type, applied to post-RoPE keys."""

    def __init__(self, model: torch.nn.Module) -> None:
        arch = getattr(model.config, "model_type", "")
        if arch not in RING_ARCHITECTURES:
            raise ValueError(
                f"variant ring: architecture {arch!r} is not supported (its rotary form is not "
                f"checked against the capture); supported: {list(RING_ARCHITECTURES)}"
            )
        mods = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
        if len(mods) != 1:
            raise ValueError(
                f"variant ring: expected one rotary embedding module in {type(model).__name__}, "
                f"found {len(mods)}"
            )
        self.rotary = mods[0]
        self._typed = "layer_type" in inspect.signature(self.rotary.forward).parameters
        self._cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def _cos_sin(self, layer_type, shift: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (layer_type, shift, str(device))
        if key not in self._cache:
            x = torch.zeros(1, dtype=torch.float32, device=device)
            pos = torch.tensor([[shift]], device=device)
            args = (x, pos, layer_type) if self._typed else (x, pos)
            cos, sin = self.rotary(*args)
            scale = getattr(self.rotary, "attention_scaling", None)
            if layer_type is not None and hasattr(self.rotary, f"{layer_type}_attention_scaling"):
                scale = getattr(self.rotary, f"{layer_type}_attention_scaling")
            scale = 1.0 if scale is None else float(scale)
            self._cache[key] = tuple(t.reshape(-1).to(torch.float32) / scale for t in (cos, sin))
        return self._cache[key]

    def shifted(self, module: torch.nn.Module, key: torch.Tensor, shift: int) -> torch.Tensor:
        """``key (b, kv, T, d)`` (post-RoPE, float32) rotated ``shift`` positions further by
        ``module``'s layer type's rotation (the leading ``cos.shape[-1]`` dimensions)."""
        layer_type = getattr(module, "layer_type", None) if self._typed else None
        cos, sin = self._cos_sin(layer_type, shift, key.device)
        r = cos.shape[-1]
        k = key[..., :r]  # rotated in transformers' rotate_half form
        rot = k * cos + torch.cat((-k[..., r // 2 :], k[..., : r // 2]), dim=-1) * sin
        return rot if r == key.shape[-1] else torch.cat((rot, key[..., r:]), dim=-1)


def ring_scores(
    scores: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    rotation: RingRotation,
    module: torch.nn.Module,
    positions: torch.Tensor,
) -> None:
    """Replace, in place, ``scores (b, h, T, T)`` (= q·kᵀ, GQA folded, unscaled) by the ring's:
    the pairs of :func:`cyclic_regions` take the product with the key moved by ±T.

    ``query (b, h, T, d)`` and ``key (b, kv, T, d)`` float32 post-RoPE; ``positions (b or 1,
    T)`` the batch's position ids."""
    b, h, tq, d = query.shape
    kv, tk = key.shape[1], key.shape[2]
    if tq != tk:
        raise RuntimeError(f"variant ring: {tq} queries against {tk} keys (no cache allowed)")
    forward, backward = cyclic_regions(positions)
    g = h // kv
    q = query.reshape(b, kv, g * tq, d)
    for shift, region in ((tk, forward), (-tk, backward)):
        if not bool(region.any()):
            continue
        moved = torch.matmul(q, rotation.shifted(module, key, shift).transpose(-1, -2))
        moved = moved.view(b, h, tq, tk)
        scores.copy_(torch.where(region, moved, scores))
