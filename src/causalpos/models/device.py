"""Devices, dtypes and batch sizes of model work."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from causalpos.models.footprint import DTYPE_BYTES, sequence_bytes

#: The dtypes a config can name (``dtype:``) as torch's.
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_BYTES}


def resolve_device(device: str) -> str:
    """``cpu`` | ``cuda`` | ``auto`` -> a torch device string; a clear error if cuda is missing."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            "config `device: cuda` but torch sees no CUDA device (torch "
            f"{torch.__version__}); use `device: cpu` or `auto`, or install the CUDA build of torch"
        )
    return device


def bytes_per_sequence(config: Any, seq_len: int, dtype_bytes: int) -> int:
    """Estimated peak bytes one sequence adds to an extraction forward pass of the model of
    transformers ``config`` (:func:`causalpos.models.footprint.sequence_bytes`)."""
    hidden = int(config.hidden_size)
    inter = int(getattr(config, "intermediate_size", 4 * hidden) or 4 * hidden)
    return sequence_bytes(int(config.num_attention_heads), hidden, inter, seq_len, dtype_bytes)


def auto_batch_size(
    model: Any, seq_len: int, *, fraction: float = 0.8, cap: int = 256, reserved: int = 0
) -> tuple[int, dict]:
    """Batch size from the memory left beside the model (CUDA's free memory after loading, or the
    host's available memory) less ``reserved`` bytes (the reducers' state and working memory:
    ``causalpos.stages.extract.reducer_memory``): ``(batch, estimate)``, the estimate's numbers
    for the job log. :class:`BatchMemoryError` when not even one sequence fits.
    """
    import psutil

    param = next(model.parameters())
    dtype_bytes = param.element_size()
    per_seq = bytes_per_sequence(model.config, seq_len, dtype_bytes)
    if param.device.type == "cuda":
        free, total = torch.cuda.mem_get_info(param.device)
        where = f"cuda free {free / 2**30:.1f} / {total / 2**30:.1f} GiB"
    else:
        free = psutil.virtual_memory().available
        where = f"cpu available {free / 2**30:.1f} GiB"
    budget = int(free * fraction) - int(reserved)
    if budget < per_seq:
        raise BatchMemoryError(
            f"batch_size auto: not even one sequence of {seq_len} tokens fits: {where}, "
            f"fraction {fraction}, the reducers' state and working memory "
            f"{reserved / 2**30:.2f} GiB, {per_seq / 2**20:.1f} MiB per sequence "
            "(causalpos.models.device.bytes_per_sequence). Shorten the dataset's seq_len, "
            "extract fewer reducers (a stage's variants), lower `extract.n_groups`, or use a "
            "device with more memory"
        )
    batch = max(1, min(cap, budget // per_seq))
    estimate = {
        "memory": where,
        "budget_bytes": budget,
        "reserved_bytes": int(reserved),
        "bytes_per_sequence": per_seq,
        "batch_size": int(batch),
    }
    return int(batch), estimate


# --------------------------------------------------------------------------------------------
# Out-of-memory errors, turned into advice on the config key that sizes the batches.

#: Substrings of allocator failures torch raises as a plain RuntimeError.
_OOM_MARKERS = ("out of memory", "can't allocate memory", "defaultcpuallocator")


class BatchMemoryError(MemoryError):
    """A batch that does not fit in memory; the message names the config key to lower."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure: ``torch.OutOfMemoryError`` (CUDA), ``MemoryError``,
    or a RuntimeError from an allocator ("CUDA out of memory", "DefaultCPUAllocator: can't
    allocate memory")."""
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    if isinstance(exc, MemoryError) or (oom and isinstance(exc, oom)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in _OOM_MARKERS)


def available_memory(device: Any) -> int:
    """Bytes free on a CUDA device (``mem_get_info``) or available on the host (psutil)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def memory_advice(
    *, what: str, batch_size: int, per_sequence: int, key: str, auto: bool = False
) -> str:
    """The message of a :class:`BatchMemoryError`: batch, estimate, the key to lower."""
    if batch_size <= 1:  # no batch to lower: the sequence itself is too long
        todo = (
            "one sequence alone does not fit, whatever the batch size: shorten the dataset's "
            "`seq_len` (datasets.<name>.seq_len), or use a device with more memory"
        )
    else:
        todo = f"lower `{key}` (e.g. to {max(1, batch_size // 2)})"
        if auto:
            todo += f" or set `{key}: auto` (sized from the free memory after loading the model)"
    return (
        f"{what}: out of memory with a batch of {batch_size} sequences (estimated "
        f"{per_sequence / 2**20:.1f} MiB per sequence by causalpos.models.device."
        f"bytes_per_sequence, {batch_size * per_sequence / 2**30:.2f} GiB per batch): {todo}"
    )


@contextlib.contextmanager
def advise_on_oom(*, what: str, batch_size: int, per_sequence: int, key: str, auto: bool = False):
    """Re-raise an out-of-memory error inside the block as a :class:`BatchMemoryError` whose
    message says which config key to lower (:func:`memory_advice`); other errors pass."""
    try:
        yield
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        raise BatchMemoryError(
            memory_advice(
                what=what, batch_size=batch_size, per_sequence=per_sequence, key=key, auto=auto
            )
            + f" [{type(exc).__name__}: {str(exc)[:300]}]"
        ) from exc


def refuse_batch_that_cannot_fit(
    config: Any,
    *,
    seq_len: int,
    batch_size: int,
    available: int,
    what: str,
    key: str,
    auto: bool = False,
    reserved: int = 0,
) -> None:
    """Raise a :class:`BatchMemoryError` before the forward pass when the batch clearly cannot fit:
    its float32 (head, T, T) scores of one layer (the least the capture holds) plus the
    ``reserved`` bytes of the reducers exceed the ``available`` bytes (:func:`available_memory`)."""
    one = int(config.num_attention_heads) * seq_len * seq_len * 4
    least = one * batch_size + int(reserved)
    if one > available:  # not even one sequence, whatever else: no batch size helps
        raise BatchMemoryError(
            f"{what}: one sequence of {seq_len} tokens alone needs {one / 2**30:.2f} GiB for one "
            f"layer's float32 attention scores ({config.num_attention_heads} heads x {seq_len}"
            f" x {seq_len}); {available / 2**30:.2f} GiB available. No batch size fits (`{key}` "
            "is not the problem): shorten the dataset's `seq_len` (datasets.<name>.seq_len), or use a "
            "device with more memory"
        )
    if least > available:
        raise BatchMemoryError(
            memory_advice(
                what=what,
                batch_size=batch_size,
                per_sequence=bytes_per_sequence(config, seq_len, 4),
                key=key,
                auto=auto,
            )
            + " [refused before the forward pass: one layer's scores"
            + (f" and the reducers' {reserved / 2**30:.2f} GiB" if reserved else " alone")
            + f" need {least / 2**30:.2f} GiB, {available / 2**30:.2f} GiB available]"
        )
