"""The training objective: next-token NLL per position, and its mean on held-out windows.

The loss is the mean NLL over target positions ``1 .. context - 1`` (BOS is never a target).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def sequence_nll(
    model: nn.Module, tokens: torch.Tensor, *, autocast_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Per-token next-token NLL ``(batch, seq - 1)`` float32: entry t is −log p(token t+1 | tokens ≤ t).

    Logits are cast to float32 before the log-softmax (bf16 log-softmax errs by ~0.1 nats).
    """
    device = next(model.parameters()).device
    tokens = tokens.to(device)
    with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        logits = model(input_ids=tokens, use_cache=False).logits
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)


@torch.no_grad()
def evaluate(
    model: nn.Module, tokens: torch.Tensor, *, batch: int, autocast_dtype: torch.dtype | None = None
) -> float:
    """Mean next-token NLL (nats) over all targets of ``tokens`` ``(n, seq)``; summed in float64."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(tokens), batch):
        nll = sequence_nll(model, tokens[i : i + batch], autocast_dtype=autocast_dtype)
        total += float(nll.double().sum())
        count += nll.numel()
    model.train(was_training)
    return total / count
