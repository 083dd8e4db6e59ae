"""The CUDA path: run where a GPU is present, skipped elsewhere (``-m gpu`` selects them).

- the capture reproduces eager attention on CUDA in float32, and in bfloat16 its scores stay
  float32 and agree with the CPU float32 capture of the same weights within bf16 rounding;
- with a fixed token 0, the position-0 residual stream is bitwise identical across prompts on CUDA;
- ``batch_size: auto`` chooses a batch whose extraction fits the memory budget it computed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_pair
from test_capture import _assert_softmax_matches, _capture, _eager, _ids

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CUDA = torch.device("cuda")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_capture_reproduces_eager_attention_on_cuda_float32(arch):
    model, ref = tiny_pair(arch)
    model, ref = model.to(CUDA), ref.to(CUDA)
    ids = _ids(model.config.vocab_size).to(CUDA)
    col, logits = _capture(model, ids)
    attentions, _ = _eager(ref, ids)
    _assert_softmax_matches(col, attentions)
    with torch.inference_mode():
        assert torch.equal(logits, model(input_ids=ids, use_cache=False).logits)


def test_bfloat16_capture_on_cuda_keeps_float32_scores():
    model32, _ = tiny_pair("llama")
    model16, _ = tiny_pair("llama", dtype=torch.bfloat16)
    ids = _ids(model32.config.vocab_size)
    cpu, _ = _capture(model32, ids)
    gpu, _ = _capture(model16.to(CUDA), ids.to(CUDA))
    for layer in cpu.maps:
        s16, s32 = gpu.scores(layer), cpu.scores(layer)
        assert s16.dtype == torch.float32 and not torch.isinf(s16).any()
        assert torch.equal(torch.isnan(s16.cpu()), torch.isnan(s32))
        # bf16 weights and activations: 8 mantissa bits, ~0.4 % per rounding, a few roundings
        torch.testing.assert_close(s16.cpu(), s32, rtol=5e-2, atol=5e-2, equal_nan=True)


def test_position0_stream_is_bitwise_identical_across_prompts_on_cuda():
    from causalpos.paper2.position0 import condition_states

    model, _ = tiny_pair("llama")
    model = model.to(CUDA)
    ids = _ids(model.config.vocab_size, n=6)
    ids[:, 0] = 1  # a fixed token 0 (a BOS)
    states = condition_states(model, ids.to(CUDA), "causal")  # one batch, as exactness needs
    # (prompt, layer, hidden): every prompt's position-0 state equal, bit for bit, at every layer
    assert np.array_equal(states, np.broadcast_to(states[:1], states.shape))
    varied = ids.clone()
    varied[:, 0] = torch.arange(6) + 3
    assert not np.array_equal(*condition_states(model, varied.to(CUDA), "causal")[:2])


def test_auto_batch_fits_the_budget_it_computed():
    from causalpos.capture.hook import extract_scores
    from causalpos.capture.reducers import ScoreMoments
    from causalpos.models.device import auto_batch_size

    model, _ = tiny_pair("llama", num_hidden_layers=2, hidden_size=256, intermediate_size=512)
    model = model.to(CUDA, torch.bfloat16)
    seq_len = 512
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    batch, estimate = auto_batch_size(model, seq_len, fraction=0.02, cap=4096)
    assert estimate["memory"].startswith("cuda") and batch >= 1
    ids = np.random.default_rng(0).integers(3, model.config.vocab_size, (batch, seq_len))
    torch.cuda.reset_peak_memory_stats()
    extract_scores(
        model,
        ids,
        variant="causal",
        batch_size=batch,
        reducers=[ScoreMoments()],
        seed=0,
        progress=False,
    )
    peak = torch.cuda.max_memory_allocated() - before
    assert peak <= estimate["budget_bytes"], (peak, estimate)
