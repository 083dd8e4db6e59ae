"""A model directory checked against its record (:data:`~causalpos.io.integrity.MODEL_RECORD`):
each weights file is the one whose sha256 it records, and the directory is the model it names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from causalpos.io.fingerprint import sha256_file
from causalpos.io.integrity import MODEL_RECORD, StoreError


def model_files_problems(path: str | os.PathLike, record: Mapping) -> list[tuple[str, str]]:
    """``(file, what is wrong)`` for each weights file of model directory ``path`` that is not
    the one ``record`` (its :data:`MODEL_RECORD`) names: missing, or of another sha256. A file
    whose size and mtime are still the recorded ones passes without being read (hashing 0.5 GB
    costs ~1 s per load); any other is hashed and compared."""
    path = Path(path)
    stats = record.get("weights_stat") or {}
    out = []
    for name, digest in sorted((record.get("sha256") or {}).items()):
        f = path / name
        if not f.is_file():
            out.append((name, "is missing"))
            continue
        st = f.stat()
        if stats.get(name) == [st.st_size, st.st_mtime_ns] or sha256_file(f) == digest:
            continue
        out.append((name, f"has changed since it was prepared (sha256 no longer {digest[:12]}...)"))
    return out


def verify_model_dir(path: str | os.PathLike) -> bool:
    """Check a model directory's weights against its :data:`MODEL_RECORD`: True if it records
    sha256s (all matching), False if it records none (an older record); :class:`StoreError`
    listing what differs (the message and rebuild command as for a damaged store), also where it
    records an empty set of weights files or another model's name."""
    try:
        record = json.loads((Path(path) / MODEL_RECORD).read_text())
    except (OSError, ValueError) as e:
        raise StoreError(path, f"its {MODEL_RECORD} is unreadable ({e})") from e
    problems = [f"weights file {name} {why}" for name, why in model_files_problems(path, record)]
    if record.get("sha256") == {}:  # recorded, and empty: prepared from a folder without weights
        problems.append(
            f"its {MODEL_RECORD} records no weights file (sha256: {{}}): the directory it was "
            "prepared from held no *.safetensors, so the model has no weights to load"
        )
    name = record.get("name")
    if isinstance(name, str) and name != Path(os.path.abspath(path)).name:
        problems.append(
            f"its {MODEL_RECORD} records model {name!r}: another model's directory copied or "
            "moved here"
        )
    if problems:
        raise StoreError(path, problems)
    return bool(record.get("sha256"))
