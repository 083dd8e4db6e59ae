"""A random-init tiny Llama, prompts and an extraction helper for position 0's tests."""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from causalpos.capture.settings import CaptureRun

CFG = LlamaConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
)


def tiny_llama(is_causal: bool = True, pad_token_id: int | None = None) -> LlamaForCausalLM:
    cfg = copy.deepcopy(CFG)  # models built from one config object share attention settings
    cfg.is_causal = is_causal
    cfg.pad_token_id = pad_token_id
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def prompts(n: int = 8, T: int = 12, fixed_bos: bool = True, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 64, (n, T), generator=g)
    if fixed_bos:
        ids[:, 0] = 1
    return ids


def _extract(model, ids, variant, reducers, batch_size, seq_ids=None):
    from causalpos.capture.hook import capture_scores

    return capture_scores(
        model,
        ids.numpy(),
        CaptureRun(variant, batch_size, seed=0, progress=False),
        reducers=reducers,
        seq_ids=seq_ids,
    )
