"""Code fingerprints: a short hash of the library code a pipeline stage runs.

Each Snakemake rule carries ``params: code=code_fingerprint("<script>")``: the hash of its script
and of every ``causalpos`` module in its import closure (imports inside functions and the
``__init__.py`` of every package on the way included), so editing a module reruns exactly the
rules whose scripts import it. Standard library only: the Snakefile imports this before any job.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path

from causalpos.io.atomic import replace_json

PACKAGE = "causalpos"
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def module_file(name: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """File of module ``name`` (``"causalpos.paper2.extraction.metric"``), or None if it is not
    a module of the package (a name imported from a module, or another package)."""
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


#: Parsed import lists by (file, package, content): scripts' closures share most modules.
_NAMES: dict[tuple[str, str, bytes], frozenset[str]] = {}

#: The on-disk copy of those lists (:func:`use_cache`), keyed by file, package, content hash.
_CACHE: dict = {"path": None, "entries": {}, "dirty": False}


def use_cache(path: str | Path | None) -> None:
    """Keep the parsed import lists in ``path`` (JSON) across processes (every Snakemake start
    parses ~140 files, 0.5-1 s); an unreadable file starts empty, ``None`` turns it off."""
    _CACHE.update(path=None if path is None else Path(path), entries={}, dirty=False)
    if path is None:
        return
    with contextlib.suppress(OSError, ValueError):
        entries = json.loads(Path(path).read_text())
        if isinstance(entries, dict):
            _CACHE["entries"] = entries


def _save_cache() -> None:
    """Write the cache (renamed into place) if it gained entries."""
    path = _CACHE["path"]
    if path is None or not _CACHE["dirty"]:
        return
    if replace_json(path, _CACHE["entries"]):
        _CACHE["dirty"] = False  # else a read-only checkout: parse again next time


def _imported_names(path: Path, package_dir: Path) -> frozenset[str]:
    """Absolute module names a file imports (every ``import`` / ``from`` statement, nested too),
    with ``from X import y`` contributing both ``X`` and ``X.y`` (``y`` may be a submodule)."""
    source = path.read_bytes()
    key = (str(path), str(package_dir), source)
    if key not in _NAMES:
        prefix = f"{path}|{package_dir}|"
        disk_key = prefix + hashlib.sha256(source).hexdigest()
        cached = _CACHE["entries"].get(disk_key)
        if isinstance(cached, list):
            _NAMES[key] = frozenset(cached)
        else:
            _NAMES[key] = frozenset(_scan_imports(path, source, package_dir))
            if _CACHE["path"] is not None:
                entries = _CACHE["entries"]
                for stale in [k for k in entries if k.startswith(prefix)]:
                    del entries[stale]  # the file's earlier contents
                entries[disk_key] = sorted(_NAMES[key])
                _CACHE["dirty"] = True
    return _NAMES[key]


def _scan_imports(path: Path, source: bytes, package_dir: Path) -> set[str]:
    tree = ast.parse(source, filename=str(path))
    here = None  # the module's dotted parts, "__init__" kept: level N drops the last N
    if path.is_relative_to(package_dir):
        here = [PACKAGE, *path.relative_to(package_dir).with_suffix("").parts]
    names: set[str] = set()
    for node in _import_statements(tree.body):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if here is None:
                    continue
                base = here[: len(here) - node.level]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)
    return {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


#: The fields through which statements (imports among them) nest.
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _import_statements(stmts: list) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``stmts`` and the blocks nested in them: statements only, the
    same imports as ``ast.walk`` at a tenth of the nodes."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo = list(stmts)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        for field in _BLOCKS:
            block = getattr(node, field, None)
            if block:
                todo.extend(block)
    return found


def import_closure(script: str | Path, package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Every package file ``script`` runs when imported: its ``causalpos`` imports, recursively,
    plus the ``__init__.py`` of each package on the way. Sorted paths."""
    return list(_closure(Path(script).resolve(), Path(package_dir).resolve()))


#: :func:`module_file` once per process: a Snakefile resolves the same few hundred names ~6,000
#: times over its scripts' closures.
_module_file = functools.cache(module_file)


def _closure(script: Path, package_dir: Path) -> tuple[Path, ...]:
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        for name in _imported_names(path, package_dir):
            parts = name.split(".")
            for mod in (".".join(parts[: i + 1]) for i in range(len(parts))):
                f = _module_file(mod, package_dir)
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
    _save_cache()
    return digest.hexdigest()[:16]


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_identity(path: str | os.PathLike) -> list:
    """``[path, size, mtime_ns, ctime_ns, inode]`` of a file: what a cached answer about its
    content is keyed by. ``cp -p``, ``rsync -t`` or ``touch -d`` can give other content an old
    mtime, never an old ctime (the kernel sets it at every change) nor, for a new file, the old
    inode: a replaced file is read again whatever its mtime."""
    st = os.stat(path)
    return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def cached_sha256(cache: str | os.PathLike | None):
    """A function ``files -> {file: sha256}`` whose answers are kept in ``cache`` (JSON; None:
    none) keyed by :func:`file_identity`, so a Snakemake start hashes only files that changed
    (~1 s per 0.5 GB of weights). An unreadable file raises ``OSError`` naming it."""
    memo: dict[str, str] = {}

    def hashes(files) -> dict[str, str]:
        keys = {str(f): json.dumps(file_identity(f)) for f in files}
        if all(k in memo for k in keys.values()):  # one stat per file, no cache read
            return {f: memo[k] for f, k in keys.items()}
        entries: dict = {}
        if cache is not None:
            try:
                entries = json.loads(Path(cache).read_text())
            except (OSError, ValueError):
                entries = {}
            entries = entries if isinstance(entries, dict) else {}
        out, dirty = {}, False
        for f, key in keys.items():
            if key not in memo:
                cached = entries.get(key)
                if not (isinstance(cached, str) and len(cached) == 64):
                    resolved = key.split('"')[1]
                    for stale in [k for k in entries if k.split('"')[1] == resolved]:
                        del entries[stale]  # the file's earlier contents
                    entries[key] = cached = sha256_file(f)
                    dirty = True
                memo[key] = cached
            out[f] = memo[key]
        if dirty and cache is not None:
            replace_json(cache, entries)
        return out

    return hashes
