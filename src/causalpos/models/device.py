"""Devices, dtypes and batch sizes of model work."""

from __future__ import annotations

from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def resolve_device(device: str) -> str:
    """``cpu`` | ``cuda`` | ``auto`` -> a torch device string; a clear error if cuda is missing."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            "config `device: cuda` but torch sees no CUDA device (torch "
            f"{torch.__version__}); use `device: cpu` or `auto`, or install the CUDA build of torch"
        )
    return device


def bytes_per_sequence(config: Any, seq_len: int, dtype_bytes: int) -> int:
    """Estimated peak bytes one sequence adds to an extraction forward pass.

    The capture holds one float32 (head, T, T) score buffer per sequence and the attention
    kernel and reducers a few more of the same size (softmax, float64 accumulators work per
    sequence); activations are (T, hidden) and (T, intermediate) per layer in the model dtype.
    The factor 4 on the scores and 6 on the activations are deliberately generous.
    """
    heads = int(config.num_attention_heads)
    hidden = int(config.hidden_size)
    inter = int(getattr(config, "intermediate_size", 4 * hidden) or 4 * hidden)
    scores = 4 * heads * seq_len * seq_len * 4
    acts = 6 * seq_len * (hidden + inter) * dtype_bytes
    return scores + acts


def auto_batch_size(
    model: Any, seq_len: int, *, fraction: float = 0.8, cap: int = 256
) -> tuple[int, dict]:
    """Batch size from the memory left beside the model: ``(batch, estimate)``.

    On CUDA the free memory is ``torch.cuda.mem_get_info`` after the model is loaded; on CPU the
    available memory (psutil). ``estimate`` records the numbers for the job log.
    """
    import psutil
    import torch

    param = next(model.parameters())
    dtype_bytes = param.element_size()
    per_seq = bytes_per_sequence(model.config, seq_len, dtype_bytes)
    if param.device.type == "cuda":
        free, total = torch.cuda.mem_get_info(param.device)
        where = f"cuda free {free / 2**30:.1f} / {total / 2**30:.1f} GiB"
    else:
        free = psutil.virtual_memory().available
        where = f"cpu available {free / 2**30:.1f} GiB"
    budget = int(free * fraction)
    batch = max(1, min(cap, budget // per_seq))
    estimate = {
        "memory": where,
        "budget_bytes": budget,
        "bytes_per_sequence": per_seq,
        "batch_size": int(batch),
    }
    return int(batch), estimate
