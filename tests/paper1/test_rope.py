"""RoPE in the HF rotate-half convention: complex-number reference, relativity, variants."""

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


def test_inv_freq_values():
    f = R.inv_freq(64, 10000.0)
    assert f.shape == (32,) and f[0] == 1.0
    np.testing.assert_allclose(f, 10000.0 ** (-2 * np.arange(32) / 64), rtol=1e-15)
    # transformers computes it in float32 from arange(0, dim, 2) / dim: same values to float32 rounding
    hf = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64))
    np.testing.assert_allclose(f, hf.numpy(), rtol=2e-6)


def test_rotate_half_numpy_and_torch():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert R.rotate_half(x).tolist() == [-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]
    assert R.rotate_half(torch.tensor(x)).tolist() == [-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]


def test_apply_rope_matches_complex_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 20, 16))
    pos = np.arange(20)
    expect = complex_rope(x, pos, R.inv_freq(16, 500.0))
    np.testing.assert_allclose(R.apply_rope(x, pos, 500.0), expect, rtol=0, atol=1e-13)
    got_t = R.apply_rope(torch.from_numpy(x), pos, 500.0)
    assert isinstance(got_t, torch.Tensor) and got_t.dtype == torch.float64
    np.testing.assert_allclose(got_t.numpy(), expect, rtol=0, atol=1e-13)


def test_dot_product_depends_only_on_offset():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 64))
    T = 40
    pos = np.arange(T)
    qr = R.apply_rope(np.tile(q, (T, 1)), pos)
    kr = R.apply_rope(np.tile(k, (T, 1)), pos)
    m = qr @ kr.T  # m[p, s] = <RoPE(q, p), RoPE(k, s)>
    np.testing.assert_allclose(m[1:, 1:], m[:-1, :-1], rtol=0, atol=1e-12)  # Toeplitz
    # and equals Re sum_k q_c conj(k_c) e^{i (p - s) w_k}
    h, f = 32, R.inv_freq(64)
    qc, kc = q[:h] + 1j * q[h:], k[:h] + 1j * k[h:]
    off = pos[:, None] - pos[None, :]
    expect = np.real((qc * np.conj(kc))[None, None, :] * np.exp(1j * off[..., None] * f)).sum(-1)
    np.testing.assert_allclose(m, expect, rtol=0, atol=1e-12)


def test_rope_preserves_norms_and_float32():
    x = torch.randn(4, 10, 32, generator=torch.Generator().manual_seed(0))
    y = R.apply_rope(x)
    assert y.dtype == torch.float32 and y.shape == x.shape
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-6, atol=0)


def test_matches_transformers_llama_rotation():
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    x = torch.randn(1, 2, 12, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ang = torch.from_numpy(R.angles(np.arange(12), 16, 10000.0))
    q, k = llama.apply_rotary_pos_emb(x, x, ang.cos()[None], ang.sin()[None])
    torch.testing.assert_close(R.apply_rope(x), q, rtol=0, atol=1e-14)
    torch.testing.assert_close(llama.rotate_half(x), R.rotate_half(x))


def test_identity_variant_is_exactly_the_input():
    x = np.random.default_rng(3).normal(size=(7, 8)).astype(np.float32)
    y = R.apply_rope(x, variant="identity")
    assert y.dtype == np.float32 and np.array_equal(y, x)


def test_shuffled_positions_is_a_seeded_permutation_and_not_relative():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(30, 16))
    perm = R.scrambled_positions(30, seed=5)
    assert sorted(perm.tolist()) == list(range(30)) and not np.array_equal(perm, np.arange(30))
    assert np.array_equal(perm, R.scrambled_positions(30, seed=5))
    got = R.apply_rope(x, variant="shuffled_positions", seed=5)
    np.testing.assert_allclose(got, complex_rope(x, perm.astype(float), R.inv_freq(16)), atol=1e-13)
    q = np.tile(rng.normal(size=16), (30, 1))
    m = (
        R.apply_rope(q, variant="shuffled_positions", seed=5)
        @ R.apply_rope(q, variant="shuffled_positions", seed=5).T
    )
    assert np.abs(m[1:, 1:] - m[:-1, :-1]).max() > 0.1  # the offset structure is gone


def test_shuffled_frequencies_is_still_relative_but_different():
    rng = np.random.default_rng(6)
    q = np.tile(rng.normal(size=32), (25, 1))
    qr = R.apply_rope(q, variant="shuffled_frequencies", seed=1)
    m = qr @ qr.T
    np.testing.assert_allclose(m[1:, 1:], m[:-1, :-1], atol=1e-12)
    f = R.scrambled_inv_freq(32, 10000.0, seed=1)
    np.testing.assert_allclose(np.sort(f), np.sort(R.inv_freq(32)), rtol=0, atol=0)
    assert not np.array_equal(f, R.inv_freq(32))
    assert np.abs(qr - R.apply_rope(q)).max() > 0.1


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="even"):
        R.inv_freq(7)
    with pytest.raises(ValueError, match="variant"):
        R.apply_rope(np.zeros((3, 4)), variant="bogus")
    with pytest.raises(ValueError, match="positions must have shape"):
        R.apply_rope(np.zeros((3, 4)), positions=np.arange(4))
