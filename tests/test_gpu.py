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

from causalpos.capture.settings import CaptureRun, ExtractSettings
from tests.conftest import tiny_pair
from tests.test_capture import _assert_softmax_matches, _capture, _eager, _ids

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
    from tests.position0_oracle import condition_states

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
    """Every reducer on: the extraction's peak (reducer state, chunked float64 temporaries,
    activations, scores) stays within the memory fraction ``batch_size: auto`` was given."""
    from causalpos.capture.hook import capture_scores
    from causalpos.models.device import auto_batch_size
    from causalpos.stages.extract import build_reducers, reducer_memory

    model, _ = tiny_pair("llama", num_hidden_layers=2, hidden_size=256, intermediate_size=512)
    model = model.to(CUDA, torch.bfloat16)
    seq_len, names, fraction = 512, ["moments", "groups", "leakage", "sink"], 0.3
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    free = torch.cuda.mem_get_info()[0]
    reserved = reducer_memory(model.config, seq_len, names, n_groups=4, device="cuda")
    batch, estimate = auto_batch_size(
        model, seq_len, fraction=fraction, cap=4096, reserved=reserved
    )
    assert estimate["memory"].startswith("cuda") and batch >= 1
    ids = np.random.default_rng(0).integers(3, model.config.vocab_size, (batch, seq_len))
    torch.cuda.reset_peak_memory_stats()
    capture_scores(
        model,
        ids,
        CaptureRun("causal", batch, seed=0, progress=False),
        reducers=build_reducers(names, n_sequences=batch, n_groups=4),
    )
    peak = torch.cuda.max_memory_allocated() - before
    assert peak <= free * fraction, (peak, batch, estimate)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_extraction_stage_on_cuda_matches_the_cpu_stores(tmp_path, dtype):
    """The rule's own stage (model loaded from disk in the config's device and dtype, every
    reducer, stores on disk) on CUDA against the same stage on CPU in float32: every stored
    variable float32/float64, NaN exactly where the CPU store has NaN, values within the
    dtype's rounding."""
    from causalpos.io.store import open_dataset
    from causalpos.stages.extract import extract_scores
    from tests.workflow.test_errors import _data_store, _tiny_model

    model_dir = _tiny_model(tmp_path)
    data = _data_store(tmp_path, 8, 12)
    variants = {
        "causal": {"reducers": ["moments", "groups", "leakage", "sink"]},
        "bidirectional": {"reducers": ["moments", "groups"]},
    }
    stores = {}
    for dev, dt in (("cpu", "float32"), ("cuda", dtype)):
        paths = extract_scores(
            model_dir,
            data,
            tmp_path / f"out-{dev}-{dt}",
            bounds=(0, 8),
            variants=variants,
            settings=ExtractSettings(batch_size=4, n_groups=2, dtype=dt, seed=0, device=dev),
        )
        stores[dev] = {v: open_dataset(p).load() for v, p in paths.items()}
    tol = 1e-4 if dtype == "float32" else 5e-2
    for variant in variants:
        cpu, gpu = stores["cpu"][variant], stores["cuda"][variant]
        assert set(cpu.data_vars) == set(gpu.data_vars)
        for name in cpu.data_vars:
            a, b = cpu[name].values, gpu[name].values
            if a.dtype.kind != "f":
                np.testing.assert_array_equal(a, b, err_msg=name)
                continue
            assert b.dtype in (np.float32, np.float64), (name, b.dtype)
            assert not np.isinf(b).any(), name
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
            scale = max(float(np.nanmax(np.abs(a))), 1.0)
            np.testing.assert_allclose(b, a, rtol=tol, atol=tol * scale, err_msg=name)
