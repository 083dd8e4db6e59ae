"""Atomic directory writes: a temporary sibling, renamed into place only when complete.

Snakemake takes any existing ``directory()`` output for a finished one, so every store, model
directory and checkpoint is written under a hidden temporary name and renamed in one step.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Temporary siblings are named ``.<name>.tmp-<8 hex digits>``.
TMP_INFIX = ".tmp-"


def temporary_sibling(final: str | os.PathLike) -> Path:
    """A fresh hidden sibling name of ``final`` (``.<name>.tmp-<8 hex>``), not created."""
    final = Path(final)
    return final.with_name(f".{final.name}{TMP_INFIX}{uuid.uuid4().hex[:8]}")


@contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``final``; on success it replaces ``final``.

    On an exception the temporary directory is removed and ``final`` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(final)
    tmp.mkdir()
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
