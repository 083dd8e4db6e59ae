"""Architectures a model spec can name: transformers configs of a random-init model (tiny
presets, full sizes, published architecture files), and the error every spec problem raises."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: Architectures ``random_init`` can build: name -> transformers ``model_type`` (the name itself
#: but for gemma3's).
ARCHITECTURES: dict[str, str] = {
    **{name: name for name in ("llama", "qwen2", "qwen3", "phi3", "mistral")},
    "gemma3": "gemma3_text",
}


class ModelSpecError(ValueError):
    """A model spec that cannot be resolved; the message names spec, source and reason."""


def tiny_config_kwargs(architecture: str) -> dict[str, Any]:
    """Config kwargs of a tiny (2-layer, 4-head, 2-KV-head GQA) model of ``architecture``: a
    forward pass in milliseconds on a CPU, with every feature the capture has to handle where
    the architecture has it (GQA; q/k norms in qwen3 and gemma3; sliding windows in gemma3)."""
    if architecture not in ARCHITECTURES:
        raise ModelSpecError(
            f"random_init: unknown architecture {architecture!r}; allowed: {sorted(ARCHITECTURES)}"
        )
    kw: dict[str, Any] = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        # Special ids default to values beyond a tiny vocabulary in some configs (phi3: 32000).
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    if architecture in ("qwen3", "gemma3"):
        kw["head_dim"] = 16
    if architecture == "gemma3":
        kw.update(
            query_pre_attn_scalar=16,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
        )
    return kw


def architecture_config(architecture: str, size: str = "tiny", overrides: dict | None = None):
    """A transformers config of ``architecture`` ("tiny", or "full": transformers' defaults),
    ``overrides`` (any config key) applied last."""
    from transformers import AutoConfig

    if architecture not in ARCHITECTURES:
        raise ModelSpecError(
            f"random_init: unknown architecture {architecture!r}; allowed: {sorted(ARCHITECTURES)}"
        )
    if size not in ("tiny", "full"):
        raise ModelSpecError(f"random_init: size must be 'tiny' or 'full', got {size!r}")
    check_config_overrides(ARCHITECTURES[architecture], overrides or {})
    kw = tiny_config_kwargs(architecture) if size == "tiny" else {}
    kw.update(overrides or {})
    if "layer_types" in kw and "layer_types" not in (overrides or {}):
        # Keep the tiny alternation (sliding, full, ...) at any overridden depth.
        n = kw["num_hidden_layers"]
        kw["layer_types"] = [kw["layer_types"][i % len(kw["layer_types"])] for i in range(n)]
    return AutoConfig.for_model(ARCHITECTURES[architecture], **kw)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; ValueError for a key given twice (json keeps the last)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} appears twice in one object")
        seen[key] = value
    return seen


def read_architecture_file(path: str | os.PathLike) -> dict[str, Any]:
    """The config kwargs in an architecture file (``random_init``'s ``config_file``).

    A JSON object of a published ``config.json``'s architecture fields, ``model_type`` among
    :data:`ARCHITECTURES`' types; keys starting with ``_`` (comments) are dropped.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(), object_pairs_hook=_unique_keys)
    except (OSError, ValueError) as exc:
        raise ModelSpecError(
            f"random_init: `config_file` {str(path)!r} is not a readable JSON file "
            f"({type(exc).__name__}: {exc}); give a path relative to the workflow directory, "
            "e.g. configs/architectures/llama-3.1-8b.json"
        ) from exc
    if not isinstance(data, dict) or data.get("model_type") not in ARCHITECTURES.values():
        found = data.get("model_type") if isinstance(data, dict) else type(data).__name__
        raise ModelSpecError(
            f"random_init: `config_file` {str(path)!r} must be a JSON object with `model_type` "
            f"one of {sorted(ARCHITECTURES.values())}, got {found!r}"
        )
    return {k: v for k, v in data.items() if not k.startswith("_")}


def file_config(path: str | os.PathLike, overrides: dict | None = None):
    """A transformers config from an architecture file (:func:`read_architecture_file`) on top
    of transformers' defaults for its ``model_type``, ``overrides`` applied last."""
    from transformers import AutoConfig

    kw = read_architecture_file(path)
    check_config_overrides(kw["model_type"], {**kw, **(overrides or {})})
    kw.update(overrides or {})
    return AutoConfig.for_model(kw.pop("model_type"), **kw)


def check_config_overrides(model_type: str, overrides: dict) -> None:
    """:class:`ModelSpecError` naming every key of ``overrides`` that a ``model_type`` config does
    not take (:func:`causalpos.models.config_keys.unknown_config_keys`): transformers would keep
    it as a plain attribute and build the model without it."""
    from causalpos.models.config_keys import unknown_config_keys

    if problems := unknown_config_keys(model_type, set(overrides) - {"model_type"}):
        raise ModelSpecError(
            f"random_init: `config`: {'; '.join(problems)}; transformers would keep such a key "
            "as a plain attribute and build the model without it. Use the config class's own "
            "key names"
        )


def spec_error(name: str, spec: dict, tried: str, reason: str, todo: str = "") -> ModelSpecError:
    msg = f"model {name!r} (spec {spec!r}): source {spec.get('source')!r} tried {tried}: {reason}"
    return ModelSpecError(msg + (f". {todo}" if todo else ""))
