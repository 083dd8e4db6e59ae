"""How long a sequence a model can take: its context and whether it can run past it.

Torch-free (a config dict in), so the config resolver checks ``seq_len`` before any job and the
stages check a loaded model with the same rule: past the table of *learned absolute positions*
(GPT-2, OPT, ...) is an error (the forward pass would fail, or silently wrap); past the context
of a RoPE or NoPE model (it extrapolates), or of any other, a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: transformers ``model_type`` values with a learned absolute position table.
ABSOLUTE_POSITION_TYPES = frozenset({"gpt2", "gpt_bigcode", "gpt_neo", "opt", "biogpt"})
#: ``model_type`` values known to use rotary position embeddings.
ROPE_TYPES = frozenset(
    {"llama", "qwen2", "qwen3", "phi3", "mistral", "gemma3", "gemma3_text", "gemma2", "olmo2"}
)


class ContextError(ValueError):
    """A sequence longer than a model with learned absolute positions can take."""


def position_limit(cfg: Mapping[str, Any]) -> tuple[int | None, str]:
    """``(context, kind)`` of a transformers config dict.

    ``context``: the length the model was trained for where known — ``causalpos_train_context``
    for the models trained here, else ``max_position_embeddings`` (``n_positions`` for GPT-2);
    ``None`` when the config gives none. ``kind``: ``"absolute"`` | ``"rope"`` | ``"none"`` (RoPE
    disabled: ``causalpos_rope: none``) | ``"unknown"``.
    """
    model_type = cfg.get("model_type")
    table = cfg.get("max_position_embeddings") or cfg.get("n_positions") or cfg.get("n_ctx")
    if model_type in ABSOLUTE_POSITION_TYPES:
        return (int(table) if table else None), "absolute"
    context = cfg.get("causalpos_train_context") or table
    context = int(context) if context else None
    if cfg.get("causalpos_rope") == "none":
        return context, "none"
    if model_type in ROPE_TYPES or any(
        k in cfg for k in ("rope_theta", "rope_parameters", "rope_scaling")
    ):
        return context, "rope"
    return context, "unknown"


def check_seq_len(context: int | None, kind: str, seq_len: int, what: str) -> str | None:
    """``None`` when ``seq_len`` fits ``context`` (or the context is unknown); a warning (str)
    when the model can run past its context; raises :class:`ContextError` when it cannot."""
    if context is None or seq_len <= context:
        return None
    if kind == "absolute":
        raise ContextError(
            f"{what}: seq_len={seq_len} exceeds the model's {context} learned absolute positions "
            f"(positions >= {context} do not exist); use seq_len <= {context}"
        )
    how = {
        "rope": "a RoPE model runs past it, extrapolating",
        "none": "a model without positional encoding runs past it, extrapolating",
    }.get(kind, "the model may or may not run past it")
    return (
        f"{what}: seq_len={seq_len} exceeds the model's context of {context} tokens ({how}; "
        "positions beyond the context are outside what it was trained on)"
    )


def check_model_context(config: Any, seq_len: int, what: str) -> str | None:
    """:func:`check_seq_len` of a loaded model's config (a transformers config or a dict)."""
    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return check_seq_len(*position_limit(cfg), seq_len, what)
