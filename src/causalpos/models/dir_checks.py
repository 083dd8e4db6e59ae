"""What a model directory must hold for the pipeline to prepare and load it, checked without
loading it (by :mod:`causalpos.config.strict` before any job, and by ``prepare_model``): a
``config.json``, ``*.safetensors`` weights (never a pickle, which can run code when loaded), a
tokenizer, and no ``auto_map`` (code from the model's repository: every load passes
``trust_remote_code=False``, where transformers would ask at a terminal or fail deep in a job).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Files any one of which makes a tokenizer (with ``*.tiktoken``; causalpos.models.load).
TOKENIZER_CORE = ("tokenizer.json", "tokenizer.model", "vocab.json")


def json_object(path: Path) -> dict | None:
    """The JSON object in file ``path``, or None (unreadable, not JSON, or not an object)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def local_dir_problem(path: Path) -> str | None:
    """Why the HF-format directory ``path`` cannot be prepared, or None (the first problem)."""
    if not path.is_dir():
        return f"{path} is not a directory"
    if not (path / "config.json").is_file():
        return f"{path} has no config.json (not an HF-format model directory)"
    if json_object(path / "config.json") is None:
        return f"{path}/config.json is not a JSON object"
    if problem := safetensors_problem(path):
        return problem
    if not any((path / f).is_file() for f in TOKENIZER_CORE) and not any(path.glob("*.tiktoken")):
        return f"{path} holds no tokenizer (none of {list(TOKENIZER_CORE)} or *.tiktoken)"
    return remote_code_problem(path)


def safetensors_problem(path: Path) -> str | None:
    """Why directory ``path`` has no weights the pipeline loads (no ``*.safetensors``), or None."""
    path = Path(path)
    if any(path.glob("*.safetensors")):
        return None
    found = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth"))
    return (
        f"{path} holds no *.safetensors weights"
        + (f" (found {', '.join(found)})" if found else "")
        + ": the pipeline loads safetensors only (a pickle can run code when loaded). Fix: save "
        "the model as safetensors (model.save_pretrained(DIR, safe_serialization=True), run "
        "where you trust the pickle), or use the hub repository's *.safetensors files"
    )


def remote_code_problem(path: Path) -> str | None:
    """Why the model or tokenizer in directory ``path`` needs remote code (``auto_map`` in its
    ``config.json`` or ``tokenizer_config.json``), or None."""
    for name in ("config.json", "tokenizer_config.json"):
        cfg = json_object(Path(path) / name)
        if cfg and cfg.get("auto_map"):
            return (
                f"{Path(path) / name} has `auto_map` ({json.dumps(cfg['auto_map'])[:120]}): its "
                "classes are code from the model's repository, and the pipeline runs no such code "
                "(trust_remote_code=False). Fix: use a model whose classes transformers ships, or "
                "a tokenizer.json / config.json without auto_map for one that transformers can "
                "load itself"
            )
    return None
