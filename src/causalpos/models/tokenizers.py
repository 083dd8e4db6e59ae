"""A tokenizer directory loaded as ``transformers.AutoTokenizer`` loads it, torch-free where it can.

``AutoTokenizer`` always reads the directory's ``config.json`` into its model config class first,
to pick the tokenizer class; for a Llama config that pulls in torch (about 2.5 CPU-s), though for
a ``tokenizer_config.json`` naming ``TokenizersBackend`` (SmolLM2) or ``GemmaTokenizer``
(Gemma-3) it picks that class itself. :func:`tokenizer_from_dir` makes that choice from the two
JSON files where it is known to be AutoTokenizer's (:data:`DIRECT_CLASSES`; tests/test_models.py
checks it) and hands every other directory to AutoTokenizer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from causalpos.models.dir_checks import json_object

#: The classes loaded directly: the name a ``tokenizer_config.json`` gives -> the module that
#: defines it and the ``model_type`` values of ``config.json`` for which AutoTokenizer keeps that
#: class (``None``: no ``config.json``, the tokenizer trained here). The types left out are
#: AutoTokenizer's exceptions (``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS``, Mistral).
DIRECT_CLASSES: dict[str, tuple[str, frozenset]] = {
    "TokenizersBackend": ("transformers.tokenization_utils_tokenizers", frozenset({None, "llama"})),
    "GemmaTokenizer": ("transformers.models.gemma.tokenization_gemma", frozenset({"gemma3_text"})),
}


def direct_class(path: str | os.PathLike) -> str | None:
    """The class of :data:`DIRECT_CLASSES` that :func:`tokenizer_from_dir` loads ``path`` as without
    AutoTokenizer, or None: a ``tokenizer.json``, a ``tokenizer_config.json`` naming that class with
    no ``auto_map`` (remote code), and no ``config.json`` or one whose ``model_type`` is among the
    class's."""
    path = Path(path)
    if not path.is_dir() or not (path / "tokenizer.json").is_file():
        return None
    tok_cfg = json_object(path / "tokenizer_config.json")
    if not tok_cfg or "auto_map" in tok_cfg or tok_cfg.get("tokenizer_class") not in DIRECT_CLASSES:
        return None
    name = tok_cfg["tokenizer_class"]
    types = DIRECT_CLASSES[name][1]
    if not (path / "config.json").exists():
        return name if None in types else None
    model_type = (json_object(path / "config.json") or {}).get("model_type")
    return name if model_type is not None and model_type in types else None


def tokenizer_from_dir(path: str | os.PathLike) -> Any:
    """``AutoTokenizer.from_pretrained(path)``'s tokenizer (a local directory); directly as its
    class of :data:`DIRECT_CLASSES` where :func:`direct_class` names one, without importing torch."""
    name = direct_class(path)
    if name is not None:
        import importlib

        cls = getattr(importlib.import_module(DIRECT_CLASSES[name][0]), name)
        return cls.from_pretrained(path, trust_remote_code=False)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
