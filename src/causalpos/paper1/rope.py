"""Rotary position embedding's tables in the HF "rotate-half" convention.

Convention (transformers' ``modeling_llama.py``): dimension k is paired with k + d/2 (not 2k with
2k + 1), inverse frequencies θ^(−2k/d) for k = 0 … d/2 − 1, the angle table is duplicated over the
two halves, and

    RoPE(x, p) = x · cos(p ω) + rotate_half(x) · sin(p ω),   rotate_half([x₁, x₂]) = [−x₂, x₁].

This multiplies the pair (x_k, x_{k+d/2}) as a complex number by e^{i p ω_k}, so
⟨RoPE(q, p), RoPE(k, s)⟩ depends on p − s only. Angles are computed in float64 (transformers uses
float32; at p ≤ 1024 the two differ by ≲ 1e-4 rad).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def inv_freq(dim: int, theta: float = 10000.0) -> np.ndarray:
    """Inverse frequencies θ^(−2k/d), k = 0 … d/2 − 1, float64, shape (dim // 2,)."""
    dim = int(dim)
    if dim <= 0 or dim % 2:
        raise ValueError(f"RoPE needs an even, positive head dimension; got dim={dim}")
    if theta <= 0:
        raise ValueError(f"RoPE base theta must be positive; got {theta}")
    return float(theta) ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def angles(positions: npt.ArrayLike, dim: int, theta: float = 10000.0) -> np.ndarray:
    """Rotation angles p·ω, float64, shape (T, dim) (the d/2 angles duplicated over both halves).

    ``positions``: shape (T,), the tokens' positions (0-indexed in this project).
    """
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim != 1:
        raise ValueError(f"positions must be 1-D (T,); got shape {pos.shape}")
    half = pos[:, None] * inv_freq(dim, theta)[None, :]
    return np.concatenate([half, half], axis=-1)


def cos_sin(
    positions: npt.ArrayLike, dim: int, theta: float = 10000.0
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables, float64, each shape (T, dim)."""
    a = angles(positions, dim, theta)
    return np.cos(a), np.sin(a)
