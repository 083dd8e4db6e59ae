"""A tokenizer directory loaded as ``transformers.AutoTokenizer`` loads it, torch-free where it can.

``AutoTokenizer.from_pretrained(dir)`` always reads the directory's ``config.json`` into its model
config class first, to pick the tokenizer class; for a Llama config that import pulls in torch,
``torch._dynamo`` and ``torch.distributed`` (about 2.5 CPU-s), though the choice it makes for a
directory whose ``tokenizer_config.json`` names ``TokenizersBackend`` is that class itself.
:func:`tokenizer_from_dir` makes that choice from the two JSON files where it is known to be
AutoTokenizer's (:data:`DIRECT_MODEL_TYPES`; ``tests/test_models.py`` checks the class and the
encodings against AutoTokenizer's) and hands every other directory to AutoTokenizer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: The class a ``tokenizer_config.json`` must name for the direct load.
DIRECT_CLASS = "TokenizersBackend"

#: ``model_type`` values of ``config.json`` for which AutoTokenizer keeps the class the tokenizer
#: config names (transformers' ``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS`` and Mistral's own
#: backend are the exceptions it makes); ``None``: a tokenizer directory without ``config.json``
#: (the tokenizer trained here).
DIRECT_MODEL_TYPES = frozenset({None, "llama"})


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def direct_load_applies(path: str | os.PathLike) -> bool:
    """Whether :func:`tokenizer_from_dir` loads ``path`` without AutoTokenizer: a ``tokenizer.json``,
    a ``tokenizer_config.json`` naming :data:`DIRECT_CLASS` with no ``auto_map`` (remote code),
    and no ``config.json`` or one whose ``model_type`` is in :data:`DIRECT_MODEL_TYPES`."""
    path = Path(path)
    if not path.is_dir() or not (path / "tokenizer.json").is_file():
        return False
    tok_cfg = _json(path / "tokenizer_config.json")
    if not tok_cfg or tok_cfg.get("tokenizer_class") != DIRECT_CLASS or "auto_map" in tok_cfg:
        return False
    if not (path / "config.json").exists():
        return True
    model_cfg = _json(path / "config.json")
    return model_cfg is not None and model_cfg.get("model_type") in DIRECT_MODEL_TYPES - {None}


def tokenizer_from_dir(path: str | os.PathLike) -> Any:
    """``AutoTokenizer.from_pretrained(path)``'s tokenizer (a local directory); directly as
    :data:`DIRECT_CLASS` where :func:`direct_load_applies`, without importing torch."""
    if direct_load_applies(path):
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        return TokenizersBackend.from_pretrained(path, trust_remote_code=False)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
