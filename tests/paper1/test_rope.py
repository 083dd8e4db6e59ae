"""RoPE's tables in the HF rotate-half convention: the complex-number reference, relativity,
transformers' rotation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from causalpos.paper1 import rope as R


def complex_rope(x: np.ndarray, positions: np.ndarray, freq: np.ndarray) -> np.ndarray:
    """Independent reference: pair (k, k + d/2) as x_k + i x_{k+d/2}, multiply by e^{i p w_k}."""
    h = x.shape[-1] // 2
    z = (x[..., :h] + 1j * x[..., h:]) * np.exp(1j * positions[:, None] * freq[None, :])
    return np.concatenate([z.real, z.imag], axis=-1)


def rotate_half(x):
    """[x1, x2] -> [-x2, x1] over the last dim, numpy or torch."""
    h = x.shape[-1] // 2
    if isinstance(x, torch.Tensor):
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return np.concatenate((-x[..., h:], x[..., :h]), axis=-1)


def apply_rope(x, positions=None, theta: float = 10000.0):
    """x (..., T, d) rotated with the library's tables (R.cos_sin), as the simulation does."""
    T, d = x.shape[-2], x.shape[-1]
    cos, sin = R.cos_sin(np.arange(T) if positions is None else positions, d, theta)
    if isinstance(x, torch.Tensor):
        cos, sin = (torch.as_tensor(t, dtype=x.dtype) for t in (cos, sin))
    return x * cos + rotate_half(x) * sin


def test_inv_freq_values():
    f = R.inv_freq(64, 10000.0)
    assert f.shape == (32,) and f[0] == 1.0
    np.testing.assert_allclose(f, 10000.0 ** (-2 * np.arange(32) / 64), rtol=1e-15)
    # transformers computes it in float32 from arange(0, dim, 2) / dim: same values to float32 rounding
    hf = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64))
    np.testing.assert_allclose(f, hf.numpy(), rtol=2e-6)


def test_tables_match_complex_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 20, 16))
    pos = np.arange(20)
    expect = complex_rope(x, pos, R.inv_freq(16, 500.0))
    np.testing.assert_allclose(apply_rope(x, pos, 500.0), expect, rtol=0, atol=1e-13)
    cos, sin = R.cos_sin(pos, 16, 500.0)
    assert cos.shape == sin.shape == (20, 16) and cos.dtype == np.float64
    np.testing.assert_array_equal(cos[:, :8], cos[:, 8:])  # duplicated over the two halves


def test_dot_product_depends_only_on_offset():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 64))
    T = 40
    pos = np.arange(T)
    qr = apply_rope(np.tile(q, (T, 1)), pos)
    kr = apply_rope(np.tile(k, (T, 1)), pos)
    m = qr @ kr.T  # m[p, s] = <RoPE(q, p), RoPE(k, s)>
    np.testing.assert_allclose(m[1:, 1:], m[:-1, :-1], rtol=0, atol=1e-12)  # Toeplitz
    # and equals Re sum_k q_c conj(k_c) e^{i (p - s) w_k}
    h, f = 32, R.inv_freq(64)
    qc, kc = q[:h] + 1j * q[h:], k[:h] + 1j * k[h:]
    off = pos[:, None] - pos[None, :]
    expect = np.real((qc * np.conj(kc))[None, None, :] * np.exp(1j * off[..., None] * f)).sum(-1)
    np.testing.assert_allclose(m, expect, rtol=0, atol=1e-12)


def test_rope_preserves_norms():
    x = np.random.default_rng(2).normal(size=(4, 10, 32))
    np.testing.assert_allclose(
        np.linalg.norm(apply_rope(x), axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-13
    )


def test_matches_transformers_llama_rotation():
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    x = torch.randn(1, 2, 12, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ang = torch.from_numpy(R.angles(np.arange(12), 16, 10000.0))
    q, k = llama.apply_rotary_pos_emb(x, x, ang.cos()[None], ang.sin()[None])
    torch.testing.assert_close(apply_rope(x), q, rtol=0, atol=1e-14)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="even"):
        R.inv_freq(7)
    with pytest.raises(ValueError, match="positive"):
        R.inv_freq(8, theta=0.0)
    with pytest.raises(ValueError, match="1-D"):
        R.angles(np.zeros((3, 4)), 8)
