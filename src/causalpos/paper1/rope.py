"""Rotary position embedding in the HF "rotate-half" convention, plus identity and scrambled variants.

Convention (transformers' ``modeling_llama.py``): dimension k is paired with k + d/2 (not 2k with
2k + 1), inverse frequencies θ^(−2k/d) for k = 0 … d/2 − 1, the angle table is duplicated over the
two halves, and

    RoPE(x, p) = x · cos(p ω) + rotate_half(x) · sin(p ω),   rotate_half([x₁, x₂]) = [−x₂, x₁].

Reading the pair (x_k, x_{k+d/2}) as the complex number x_k + i·x_{k+d/2}, this multiplies it by
e^{i p ω_k}, so ⟨RoPE(q, p), RoPE(k, s)⟩ depends on p − s only (a relative encoding).

Angles are computed in float64 and the cos/sin tables cast to the input's dtype. (transformers
computes ``inv_freq`` and the angles in float32; at p ≤ 1024 the two differ by ≲ 1e-4 rad.)

Variants (``variant=``):

- ``"rope"``: the standard rotation by each token's own position;
- ``"identity"``: no rotation (NoPE), the same code path;
- ``"shuffled_positions"``: each token rotated by a seeded permutation of the positions — every
  angle still occurs once, but the offset structure is destroyed (a null for "relative");
- ``"shuffled_frequencies"``: the d/2 inverse frequencies permuted across pairs by a seeded
  permutation — still an exactly relative encoding, with a different frequency-to-pair assignment.
"""

from __future__ import annotations

from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt
import torch

Rotary = Literal["rope", "identity", "shuffled_positions", "shuffled_frequencies"]


VARIANTS: tuple[str, ...] = ("rope", "identity", "shuffled_positions", "shuffled_frequencies")


ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


def _check_dim(dim: int) -> int:
    dim = int(dim)
    if dim <= 0 or dim % 2:
        raise ValueError(f"RoPE needs an even, positive head dimension; got dim={dim}")
    return dim


def inv_freq(dim: int, theta: float = 10000.0) -> np.ndarray:
    """Inverse frequencies θ^(−2k/d), k = 0 … d/2 − 1, float64, shape (dim // 2,)."""
    dim = _check_dim(dim)
    if theta <= 0:
        raise ValueError(f"RoPE base theta must be positive; got {theta}")
    return float(theta) ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def scrambled_positions(n: int, seed: int) -> np.ndarray:
    """A seeded permutation of ``arange(n)``: the positions used by the ``shuffled_positions`` variant."""
    return np.random.default_rng([int(seed), 0x50]).permutation(n)


def scrambled_inv_freq(dim: int, theta: float = 10000.0, seed: int = 0) -> np.ndarray:
    """The inverse frequencies permuted across the d/2 rotation pairs, shape (dim // 2,)."""
    return inv_freq(dim, theta)[np.random.default_rng([int(seed), 0xF4]).permutation(dim // 2)]


def angles(
    positions: npt.ArrayLike,
    dim: int,
    theta: float = 10000.0,
    *,
    variant: Rotary = "rope",
    seed: int = 0,
) -> np.ndarray:
    """Rotation angles p·ω, float64, shape (T, dim) (the d/2 angles duplicated over both halves).

    ``positions``: shape (T,), the tokens' positions (0-indexed in this project).
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown RoPE variant {variant!r}; choose one of {VARIANTS}")
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim != 1:
        raise ValueError(f"positions must be 1-D (T,); got shape {pos.shape}")
    dim = _check_dim(dim)
    if variant == "identity":
        return np.zeros((pos.size, dim))
    if variant == "shuffled_positions":
        pos = pos[scrambled_positions(pos.size, seed)]
    freq = (
        scrambled_inv_freq(dim, theta, seed)
        if variant == "shuffled_frequencies"
        else inv_freq(dim, theta)
    )
    half = pos[:, None] * freq[None, :]
    return np.concatenate([half, half], axis=-1)


def cos_sin(
    positions: npt.ArrayLike,
    dim: int,
    theta: float = 10000.0,
    *,
    variant: Rotary = "rope",
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables, float64, each shape (T, dim)."""
    a = angles(positions, dim, theta, variant=variant, seed=seed)
    return np.cos(a), np.sin(a)


def rotate_half(x: ArrayT) -> ArrayT:
    """[x₁, x₂] → [−x₂, x₁] over the last dim (halves of size d/2); numpy array or torch tensor."""
    half = _check_dim(x.shape[-1]) // 2
    x1, x2 = x[..., :half], x[..., half:]
    if isinstance(x, torch.Tensor):
        return torch.cat((-x2, x1), dim=-1)
    return np.concatenate((-x2, x1), axis=-1)


def apply_rope(
    x: ArrayT,
    positions: npt.ArrayLike | None = None,
    theta: float = 10000.0,
    *,
    variant: Rotary = "rope",
    seed: int = 0,
) -> ArrayT:
    """Rotate ``x`` (..., T, d) by each token's position; returns the same type, dtype and shape.

    ``positions`` (T,) defaults to 0 … T − 1. Works on numpy arrays and torch tensors (the
    tables follow the tensor's dtype and device).
    """
    T, d = x.shape[-2], x.shape[-1]
    pos = np.arange(T) if positions is None else np.asarray(positions)
    if pos.shape != (T,):
        raise ValueError(
            f"positions must have shape (T,) = ({T},) to match x {tuple(x.shape)}; got {pos.shape}"
        )
    cos, sin = cos_sin(pos, d, theta, variant=variant, seed=seed)
    if isinstance(x, torch.Tensor):
        cos_t = torch.as_tensor(cos, dtype=x.dtype, device=x.device)
        sin_t = torch.as_tensor(sin, dtype=x.dtype, device=x.device)
        return x * cos_t + rotate_half(x) * sin_t
    x = np.asarray(x)
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
    return (x * cos.astype(dtype) + rotate_half(x) * sin.astype(dtype)).astype(dtype, copy=False)
