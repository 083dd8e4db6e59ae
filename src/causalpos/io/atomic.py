"""Atomic directory writes: a temporary sibling, renamed into place only when complete.

Snakemake takes any existing ``directory()`` output for a finished one, so every store, model
directory and checkpoint is written under a hidden temporary name and renamed in one step. A
killed job's temporary is removed by the next write of its path
(:func:`remove_stale_temporaries`); ``causalpos verify`` lists those that remain.
"""

from __future__ import annotations

import errno
import glob
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

log = logging.getLogger("causalpos.io.atomic")

#: Temporary siblings are named ``.<name>.tmp-<8 hex digits>``.
TMP_INFIX = ".tmp-"

_TEMPORARY = re.compile(r"^\.(?P<final>.+)" + re.escape(TMP_INFIX) + r"[^/]+$")


def is_temporary(path: str | os.PathLike) -> bool:
    """Whether ``path`` is named like a temporary sibling (``.<name>.tmp-*``) of some final path."""
    return _TEMPORARY.match(Path(path).name) is not None


def final_of(temporary: str | os.PathLike) -> Path:
    """The final path a temporary sibling (:func:`is_temporary`) was to be renamed to."""
    temporary = Path(temporary)
    m = _TEMPORARY.match(temporary.name)
    if m is None:
        raise ValueError(f"{temporary} is not a temporary sibling (.<name>{TMP_INFIX}*)")
    return temporary.with_name(m.group("final"))


#: Where Snakemake marks the outputs of the jobs it started and that have not finished: one file
#: per output, named by its path in URL-safe base64 (split into ``@``-prefixed directories where
#: longer than a file name may be).
INCOMPLETE_DIR = ".snakemake/incomplete"


def incomplete_outputs(pipeline: str | os.PathLike = ".") -> list[str]:
    """The outputs Snakemake marks incomplete in the pipeline directory ``pipeline`` (killed,
    failed before Snakemake could clean up, or running now), relative to it, sorted."""
    from base64 import urlsafe_b64decode

    base = Path(pipeline) / INCOMPLETE_DIR
    out = []
    for dirpath, _dirs, files in os.walk(base):
        parts = Path(dirpath).relative_to(base).parts
        if any(not d.startswith("@") for d in parts):
            continue  # not one of Snakemake's split names
        for name in files:
            if name == "migration_underway":
                continue
            encoded = "".join(d.removeprefix("@") for d in parts) + name
            try:
                out.append(urlsafe_b64decode(encoded.encode()).decode())
            except (ValueError, UnicodeDecodeError):
                continue  # a file Snakemake did not write
    return sorted(out)


def remove_stale_temporaries(final: str | os.PathLike) -> list[Path]:
    """Remove the temporary siblings (``.<name>.tmp-*``) of ``final`` that a killed writer left;
    return them. Safe only while no other process writes ``final``: in the pipeline Snakemake
    runs one job per output and locks its working directory.
    """
    final = Path(final)
    if not final.parent.is_dir():
        return []
    removed = []
    pattern = f".{glob.escape(final.name)}{glob.escape(TMP_INFIX)}*"
    for stale in sorted(final.parent.glob(pattern)):
        log.info("removing %s, a temporary left by an interrupted write of %s", stale, final)
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        else:
            stale.unlink()
        removed.append(stale)
    return removed


#: What the final name of a path written through :func:`atomic_dir` must start with.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9]")


def check_final_name(final: str | os.PathLike) -> Path:
    """``final`` if :func:`atomic_dir` may replace it (removing what is there): its name starts
    with a letter or digit (a config's ``..`` would delete the directory above) and it resolves
    inside its parent; else ``ValueError``.
    """
    # The name as given: pathlib drops a trailing "." or "/", so "resources/tokenizers/" would
    # name the directory above.
    name = os.path.basename(os.fspath(final))
    final = Path(final)
    if not _SAFE_NAME.match(name):
        raise ValueError(
            f"refusing to write {str(final)!r}: its final name {name!r} must start with a letter "
            "or digit (names from the config become paths: rename the entry, e.g. 'my-model')"
        )
    parent = final.parent.resolve()
    if final.resolve().parent != parent:
        raise ValueError(
            f"refusing to write {str(final)!r}: it resolves to {final.resolve()}, outside its "
            f"directory {parent} (a symbolic link?); remove the link or choose another name"
        )
    return final


@contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``final``; on success it replaces ``final``, on an
    exception it is removed and ``final`` left as it was. Stale temporaries are removed first;
    ``final`` must pass :func:`check_final_name`.
    """
    final = check_final_name(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final)
    tmp = final.with_name(f".{final.name}{TMP_INFIX}{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def replace_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a new file renamed into place (mode 0644), so a
    concurrent reader never sees half of one; the new file is removed where that fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def replace_json(path: str | os.PathLike, obj) -> bool:
    """Write ``obj`` as JSON to ``path`` by :func:`replace_text`; False, nothing left behind,
    where it cannot be written (a read-only checkout)."""
    try:
        replace_text(path, json.dumps(obj))
    except OSError:
        return False
    return True


def free_bytes(path: Path) -> int | None:
    """Free bytes of the filesystem holding ``path`` (its nearest existing ancestor)."""
    for p in (path, *path.parents):
        with suppress(OSError):
            return shutil.disk_usage(p).free
    return None


def _is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from is an ``ENOSPC`` (or quota) error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class DiskFullError(OSError):
    """A write that failed because the disk (or quota) is full: one sentence naming what was
    written, the free space and what to do, instead of zarr's traceback ~40 frames deep."""

    #: :func:`causalpos.io.runlog.logged` ends a job on it with the message alone.
    explained = True

    def __init__(self, path: str | os.PathLike, what: str, cause: str, free: int | None):
        self.path, self.what, self.cause, self.free = Path(path), what, cause, free
        shown = "an unknown amount" if free is None else f"{free / 2**20:,.1f} MiB"
        super().__init__(
            errno.ENOSPC,
            f"the disk is full: writing {what} {path} failed ({cause}); the filesystem holding "
            f"it has {shown} free. Nothing was left half-written (the {what} is written whole "
            "or not at all). Free space on that disk, or point the directory at a larger disk "
            "(a directory of the tree may be a symbolic link to a larger disk), and rerun",
        )

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self):
        return (type(self), (self.path, self.what, self.cause, self.free))


@contextmanager
def disk_full_named(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Within the block, an error caused by a full disk becomes a :class:`DiskFullError` naming
    ``what`` (e.g. "store") at ``path`` and the free space of its filesystem."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as exc:
        if not _is_disk_full(exc):
            raise
        cause = f"{type(exc).__name__}: {exc}"
        raise DiskFullError(path, what, cause, free_bytes(Path(path))) from None
