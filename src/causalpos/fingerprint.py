"""Code fingerprints: a short hash of the library modules a pipeline stage calls.

Each Snakemake rule carries ``params: code=fingerprint(...)`` so that editing one module
reruns exactly the stages that use it (Snakemake's default rerun triggers include params).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def module_path(name: str) -> Path:
    """Path of library module ``name`` (``"diagonal"`` or ``"figures.paper1"``)."""
    rel = Path(*name.split("."))
    for candidate in (PACKAGE_DIR / rel.with_suffix(".py"), PACKAGE_DIR / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"fingerprint: no module {name!r} in {PACKAGE_DIR} "
        f"(tried {rel.with_suffix('.py')} and {rel / '__init__.py'})"
    )


def fingerprint(*modules: str) -> str:
    """SHA-256 (first 16 hex digits) over the sources of ``modules``, order-independent."""
    if not modules:
        raise ValueError("fingerprint needs at least one module name")
    digest = hashlib.sha256()
    for name in sorted(set(modules)):
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(module_path(name).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]
