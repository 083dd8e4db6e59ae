"""Atomic directory writes: a temporary sibling, renamed into place only when complete.

Snakemake takes any existing ``directory()`` output for a finished one, so every store, model
directory and checkpoint is written under a hidden temporary name and renamed in one step.
A job killed mid-write leaves its temporary behind; the next write of the same path removes it
(:func:`remove_stale_temporaries`), and ``causalpos verify`` lists any that remain, and the
outputs Snakemake still marks incomplete (:func:`incomplete_outputs`).
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
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("causalpos.io.atomic")

#: Temporary siblings are named ``.<name>.tmp-<8 hex digits>``.
TMP_INFIX = ".tmp-"

_TEMPORARY = re.compile(r"^\.(?P<final>.+)" + re.escape(TMP_INFIX) + r"[^/]+$")


def temporary_sibling(final: str | os.PathLike) -> Path:
    """A fresh hidden sibling name of ``final`` (``.<name>.tmp-<8 hex>``), not created."""
    final = Path(final)
    return final.with_name(f".{final.name}{TMP_INFIX}{uuid.uuid4().hex[:8]}")


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


def stale_temporaries(final: str | os.PathLike) -> list[Path]:
    """Temporary siblings of ``final`` left on disk (``.<name>.tmp-*``), sorted."""
    final = Path(final)
    if not final.parent.is_dir():
        return []
    pattern = f".{glob.escape(final.name)}{glob.escape(TMP_INFIX)}*"
    return sorted(final.parent.glob(pattern))


#: Where Snakemake (its default file persistence) marks the outputs of the jobs it started and
#: that have not finished, relative to the pipeline directory: one file per output, named by the
#: output's path in URL-safe base64 (split into ``@``-prefixed directories where it is longer
#: than a file name may be).
INCOMPLETE_DIR = ".snakemake/incomplete"


def incomplete_outputs(pipeline: str | os.PathLike = ".") -> list[str]:
    """The outputs Snakemake marks incomplete in the pipeline directory ``pipeline`` (a job
    started and did not finish: killed, failed before Snakemake could clean up, or running now),
    as Snakemake names them (relative to ``pipeline``), sorted; [] where it marks none."""
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
    """Remove the temporary siblings of ``final`` that a killed writer left; return them.

    Only safe when no other process is writing ``final`` right now. In the pipeline that holds:
    Snakemake runs at most one job per output path, and its lock on the working directory keeps
    a second Snakemake from writing the same outputs at the same time. Library callers writing
    one path from two processes at once would clash at the final rename anyway.
    """
    removed = []
    for stale in stale_temporaries(final):
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
    """``final`` if it may be replaced by :func:`atomic_dir`; else ``ValueError``.

    Its final name must start with a letter or digit (not ``.``, ``..``, a hidden or empty name,
    a name starting with ``-``) and it must resolve inside its parent directory (no symbolic
    link out of it): replacing ``final`` removes what is there, so a name from a config such as
    ``..`` would otherwise delete the directory above.
    """
    # The name as given: pathlib drops a trailing "." or "/" ("a/." and "a/" are Path("a")), so
    # an empty name from a config ("resources/tokenizers/") would name the directory above.
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
    """Yield an empty temporary sibling of ``final``; on success it replaces ``final``.

    Stale temporaries of ``final`` (from a killed writer) are removed first. On an exception the
    temporary directory is removed and ``final`` is left as it was. ``final`` must pass
    :func:`check_final_name` (``ValueError`` otherwise, before anything is touched).
    """
    final = check_final_name(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    # One writer per final path (see remove_stale_temporaries), so any sibling is stale.
    remove_stale_temporaries(final)
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


def replace_json(path: str | os.PathLike, obj) -> bool:
    """Write ``obj`` as JSON to ``path`` through a new file renamed into place (mode 0644), so a
    concurrent reader sees the old file or the new one, never half of one. False, and nothing
    left behind, where it cannot be written (a read-only checkout): for caches that may be lost."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError:
        return False
    finally:
        if tmp is not None:  # any failure before the rename (a value JSON cannot hold too)
            Path(tmp).unlink(missing_ok=True)


def free_bytes(path: Path) -> int | None:
    """Free bytes of the filesystem holding ``path`` (its nearest existing ancestor)."""
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
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
    """A write that failed because the disk (or the user's quota) is full: one sentence naming
    what was written, the filesystem's free space and what to do, instead of the traceback of
    the library that was writing (zarr's ``OSError: [Errno 28]`` arrives ~40 frames deep)."""

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
