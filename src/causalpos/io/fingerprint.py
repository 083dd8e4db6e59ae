"""Code fingerprints: a short hash of the library code a pipeline stage runs.

Each Snakemake rule carries ``params: code=code_fingerprint("<script>")``: the hash of its script
and of every ``causalpos`` module in that script's import closure (imports inside functions
included, and the ``__init__.py`` of every package on the way). Editing a module therefore reruns
exactly the rules whose scripts import it, directly or through other modules, and nothing else;
nothing is listed by hand, so a new import can neither be missed nor an unrelated module included.

Pure standard library (``ast``, ``hashlib``): the Snakefile imports this before any job runs.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE = "causalpos"
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def module_file(name: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """File of module ``name`` (``"causalpos.paper2.metric"``), or None if it is not a module
    of the package (a name imported from a module rather than a submodule, or another package)."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return package_dir / "__init__.py"
    rel = Path(*parts[1:])
    for candidate in (package_dir / rel.with_suffix(".py"), package_dir / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path, package_dir: Path) -> str:
    rel = path.relative_to(package_dir).with_suffix("")
    parts = [PACKAGE, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


#: Parsed import lists by (file, package, content): a Snakefile fingerprints ~30 scripts whose
#: closures share most modules, so each module is parsed once per content, not once per script.
_NAMES: dict[tuple[str, str, bytes], frozenset[str]] = {}


def _imported_names(path: Path, package_dir: Path) -> frozenset[str]:
    """Absolute module names a file imports (every ``import`` / ``from`` statement, nested too),
    with ``from X import y`` contributing both ``X`` and ``X.y`` (``y`` may be a submodule)."""
    source = path.read_bytes()
    key = (str(path), str(package_dir), source)
    if key not in _NAMES:
        _NAMES[key] = frozenset(_scan_imports(path, source, package_dir))
    return _NAMES[key]


def _scan_imports(path: Path, source: bytes, package_dir: Path) -> set[str]:
    tree = ast.parse(source, filename=str(path))
    here = None
    if path.is_relative_to(package_dir):
        here = _module_name(path, package_dir)
        is_pkg = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if here is None:
                    continue
                base = here.split(".")
                drop = node.level - 1 if is_pkg else node.level
                base = base[: len(base) - drop] if drop else base
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)
    return {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def import_closure(script: str | Path, package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Every package file ``script`` runs when imported: its ``causalpos`` imports, recursively,
    plus the ``__init__.py`` of each package on the way. Sorted paths."""
    return list(_closure(Path(script).resolve(), Path(package_dir).resolve()))


def _closure(script: Path, package_dir: Path) -> tuple[Path, ...]:
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        for name in _imported_names(path, package_dir):
            for mod in _with_parents(name):
                f = module_file(mod, package_dir)
                if f is not None and f not in seen:
                    seen.add(f)
                    todo.append(f)
    return tuple(sorted(seen))


def code_fingerprint(script: str | Path, package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 (first 16 hex digits) over ``script`` and its import closure (paths and contents)."""
    script = Path(script).resolve()
    package_dir = Path(package_dir).resolve()
    digest = hashlib.sha256()
    digest.update(b"script\0" + script.read_bytes() + b"\0")
    for f in _closure(script, package_dir):
        digest.update(f.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
