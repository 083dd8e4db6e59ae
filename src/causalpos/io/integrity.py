"""Store integrity: a manifest of every file a store was written with, checked when it is read.

zarr reads a missing chunk file as its fill value (NaN for float maps), and Snakemake judges a
``directory()`` output by its existence alone, so a deleted or truncated chunk would otherwise
flow silently into every downstream result. :func:`write_manifest` records, for every file of a
freshly written store, its path, size and CRC-32, plus the counts the store was built from;
:func:`verify_files` checks them and raises :class:`StoreError`, which names the store, what is
wrong with it (array and chunk), and the command that rebuilds it.

Where the manifest lives. zarr v3 warns about any object in a hierarchy that is not a zarr node
(``ZarrUserWarning: Object at ... is not recognized``), so a plain JSON file in the store would
warn on every open. The manifest is therefore the attributes of an empty child group,
``<store>/causalpos_manifest/zarr.json``: zarr and xarray open the store without a warning, the
dataset's own attributes stay free of it, and it can checksum the root ``zarr.json`` too (a
garbled root metadata file is then a checksum mismatch, not a JSON traceback).

The marker. A store's root metadata (the dataset attributes in ``zarr.json``) records
:data:`STORE_FORMAT_ATTR` = :data:`STORE_FORMAT`, which says it was written with a manifest. A
store whose root says so but whose manifest folder is gone is damaged (a ``cp -r`` or rsync cut
short, a deleted folder), never taken for a store of an older version. Formats: 0, no manifest
(written before manifests existed); 1, a manifest but no marker; 2, both.

Why CRC-32. The manifest guards against accidental damage (deleted, truncated, overwritten or
half-copied files), not tampering, and stores reach tens of GB at paper scale: zlib's CRC-32
runs at ~4 GB/s here (SHA-256 at ~1.5 GB/s with SHA instructions, several times slower
without), so verifying costs less than reading the files from disk. Sizes are compared first
(a truncated or deleted file is caught without reading it); CRC-32 catches same-size damage.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import zlib
from collections.abc import Mapping
from pathlib import Path

from causalpos.io.runconfig import CONFIG_ENV as CONFIG_ENV  # re-exported
from causalpos.io.runconfig import CONFIGFILES_ENV as CONFIGFILES_ENV  # re-exported
from causalpos.io.runconfig import (
    config_args,
    config_options,
    configfiles,
    display_path,
)
from causalpos.io.runconfig import config_values as config_values  # re-exported
from causalpos.io.runconfig import run_configfiles as run_configfiles  # re-exported

#: The child group whose ``zarr.json`` attributes hold the manifest.
MANIFEST_GROUP = "causalpos_manifest"
#: Key of the manifest inside that group's attributes.
MANIFEST_KEY = "causalpos_manifest"
MANIFEST_VERSION = 1
#: Root attribute holding the store format (the marker that a manifest was written).
STORE_FORMAT_ATTR = "causalpos_store_format"
#: The store format this causalpos writes (see the module doc for 0 and 1).
STORE_FORMAT = 2
#: Dataset attributes recorded in the manifest as the counts a store was built from.
COUNT_ATTRS = ("n_sequences", "n_shards", "n_samples")

#: Files others add to a finished store: Snakemake marks each ``directory()`` output with one.
NOT_RECORDED = (".snakemake_timestamp",)
#: Files an operating system's file browser leaves in any folder it shows (macOS Finder,
#: Windows Explorer): never part of a store, never recorded, never "added later" damage.
OS_LITTER = (".DS_Store", "Thumbs.db", "desktop.ini")

_BLOCK = 1 << 24  # bytes read at a time while checksumming
_SHOWN = 8  # problems spelled out in one message


#: Root attribute of a store holding its provenance record (:mod:`causalpos.io.provenance`).
PROVENANCE_ATTR = "causalpos_provenance"
#: A table's provenance record lives beside it, in ``<table>`` + this suffix (JSON).
SIDECAR_SUFFIX = ".provenance.json"


def sidecar(table: str | os.PathLike) -> Path:
    """The file holding the provenance record of the table (CSV, Markdown) at ``table``."""
    return Path(f"{os.fspath(table)}{SIDECAR_SUFFIX}")


def table_record(table: str | os.PathLike) -> dict | None:
    """The provenance record beside the table at ``table``; None where it has none (written by
    an older causalpos, or outside the pipeline); ``{"unreadable": "<why>"}`` where its sidecar
    does not parse."""
    try:
        record = json.loads(sidecar(table).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return {"unreadable": f"{type(e).__name__}: {e}"}
    return record if isinstance(record, dict) else {"unreadable": "not a JSON object"}


def recorded_record(path: str | os.PathLike) -> dict | None:
    """The provenance record of the store, table or model directory ``path`` (a store's root
    metadata, a table's sidecar, a model directory's ``causalpos_source.json``); None where it
    records none or cannot be read."""
    p = Path(path)
    if (p / "zarr.json").is_file():
        record = (root_attributes(p) or {}).get(PROVENANCE_ATTR)
    elif p.is_file():
        record = table_record(p)
    else:
        try:
            record = json.loads((p / MODEL_RECORD).read_text())
        except (OSError, ValueError):
            record = None
    return record if isinstance(record, dict) else None


def _options_of(path: Path) -> tuple[list[str], list[str]] | None:
    """``(config files, --config arguments)`` a rebuild of ``path`` names: the running pipeline's
    (:func:`configfiles`, :func:`config_args`), else the ones ``path`` records it was built with
    (or, for a store inside a shard or pair directory, its directory's first store)."""
    known = configfiles()
    if known is not None:
        return known, config_args()
    candidates = [path]
    if path.is_dir() and not (path / "zarr.json").exists():
        candidates += sorted(path.glob("*.zarr"))
    for p in candidates:
        record = recorded_record(p) or {}
        if isinstance(record.get("configfiles"), list):
            return [str(f) for f in record["configfiles"]], [
                str(a) for a in record.get("config_args") or []
            ]
    return None


def rebuild_command(path: str | os.PathLike, *, flag: str = "--force") -> str:
    """The Snakemake command that rebuilds the pipeline output ``path`` (run from the pipeline
    directory): ``--force`` reruns the one job producing it, replacing what is there (``flag``:
    another option naming the target, e.g. ``--rerun-incomplete``). A variant's
    store inside a shard directory (``.../shard-NNNN/<variant>.zarr``) is rebuilt by the job
    that writes the whole directory, and so is a merged score store
    (``results/scores/<model>/<dataset>/<variant>.zarr``: one merge job writes every variant of
    the pair). Names the ``--configfile`` and ``--config`` of the running pipeline
    (:func:`configfiles`, :func:`config_args`), else the ones the output records it was built
    with (``causalpos verify`` outside the pipeline)."""
    p = Path(path)
    files, args = _options_of(p) or ([], [])
    if re.fullmatch(r"shard-\d{4}", p.parent.name):
        p = p.parent
    elif p.suffix == ".zarr" and p.parts[-5:-3] == ("results", "scores"):
        p = p.parent
    return f"snakemake {flag} {shlex.quote(display_path(p))}{config_options(files, args)} --cores 1"


def rebuild_hint(path: str | os.PathLike) -> str:
    known = _options_of(Path(path)) is not None
    return (
        f"Rebuild it from the pipeline directory: `{rebuild_command(path)}`"
        + ("" if known else " (add the --configfile you ran with, if not the default)")
        + "; the next `snakemake` run then redoes what was built from it. "
        "`causalpos verify results` lists every damaged store."
    )


def root_attributes(store: str | os.PathLike) -> dict | None:
    """The dataset attributes in the root ``zarr.json`` of ``store``; None if it does not parse."""
    try:
        attrs = json.loads((Path(store) / "zarr.json").read_bytes()).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return None
    return attrs if isinstance(attrs, dict) else None


def store_format(store: str | os.PathLike) -> int:
    """The format ``store`` was written in: :data:`STORE_FORMAT_ATTR` of its root metadata, else
    1 with a manifest folder, 0 without (see the module doc)."""
    value = (root_attributes(store) or {}).get(STORE_FORMAT_ATTR)
    if isinstance(value, int):
        return value
    return 1 if (Path(store) / MANIFEST_GROUP).exists() else 0


class StoreFormatError(KeyError):
    """A store lacks what this causalpos reads (a variable, attribute or dimension): written by
    older code. A :class:`KeyError` (what a caller catching a missing key expects), whose message
    names the store, its format and the command that rebuilds it."""

    def __init__(self, path: str | os.PathLike, missing: list[str], fmt: int):
        self.path, self.missing, self.format = Path(path), list(missing), fmt
        super().__init__(
            f"store {display_path(path)} (store format {fmt}; this causalpos writes format "
            f"{STORE_FORMAT}) has no {', '.join(missing)}: it was written by older code. "
            + rebuild_hint(path)
        )

    def __str__(self) -> str:  # KeyError's str() is the repr of its argument
        return str(self.args[0])

    def __reduce__(self):
        return (type(self), (self.path, self.missing, self.format))


class StoreError(OSError):
    """A store on disk is damaged or incomplete: a file is missing, truncated or altered, its
    metadata unreadable, or its contents contradict themselves.

    An :class:`OSError`, like :class:`gzip.BadGzipFile` for a corrupt file: the fault is in
    what is on disk, not in the caller's arguments. ``path`` is the store, ``problems`` what
    is wrong with it, one sentence each; the message adds the command that rebuilds it.
    """

    def __init__(self, path: str | os.PathLike, problems: str | list[str]):
        self.path = Path(path)
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        shown = "; ".join(self.problems[:_SHOWN])
        more = len(self.problems) - _SHOWN
        if more > 0:
            shown += f"; and {more} more"
        super().__init__(f"damaged store {display_path(path)}: {shown}.\n{rebuild_hint(path)}")

    def __reduce__(self):
        return (type(self), (self.path, self.problems))


def describe(rel: str) -> str:
    """A store-relative file path in words: which array, which chunk."""
    parts = rel.split("/")
    if rel == "zarr.json":
        return "the root metadata zarr.json"
    if len(parts) == 2 and parts[1] == "zarr.json":
        return f"the metadata of array {parts[0]!r} ({rel})"
    if len(parts) == 2 and parts[1] == "c":
        return f"the only chunk of array {parts[0]!r} ({rel})"
    if len(parts) > 2 and parts[1] == "c":
        return f"chunk ({', '.join(parts[2:])}) of array {parts[0]!r} ({rel})"
    return f"file {rel}"


def _crc32(path: Path) -> tuple[int, int]:
    """(size in bytes, CRC-32) of the file at ``path``, read in blocks."""
    crc, size = 0, 0
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            crc = zlib.crc32(block, crc)
            size += len(block)
    return size, crc


def _files(store: Path) -> list[str]:
    """Every file of ``store`` (posix paths relative to it, symbolic links followed) except the
    manifest, the root files in :data:`NOT_RECORDED` and :data:`OS_LITTER`, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(store, followlinks=True):
        here = Path(dirpath)
        if here == store:
            if MANIFEST_GROUP in dirnames:
                dirnames.remove(MANIFEST_GROUP)
            filenames = [f for f in filenames if f not in NOT_RECORDED]
        filenames = [f for f in filenames if f not in OS_LITTER]
        out.extend((here / f).relative_to(store).as_posix() for f in filenames)
    return sorted(out)


def write_manifest(
    store: str | os.PathLike,
    *,
    counts: Mapping[str, int] | None = None,
    sizes: Mapping[str, int] | None = None,
) -> dict:
    """Record every file of the finished (not yet renamed) store directory ``store``.

    Call it last, after everything else is written. ``counts``: what the store was built from
    (e.g. ``n_sequences``); ``sizes``: its dimension sizes; both are checked against the
    dataset when it is opened. Returns the manifest.
    """
    store = Path(store)
    files = {}
    for rel in _files(store):
        size, crc = _crc32(store / rel)
        files[rel] = [size, crc]
    manifest = {
        "version": MANIFEST_VERSION,
        "file_fields": ["bytes", "crc32"],
        "files": files,
        "counts": {k: int(v) for k, v in (counts or {}).items()},
        "sizes": {str(k): int(v) for k, v in (sizes or {}).items()},
    }
    group = store / MANIFEST_GROUP
    group.mkdir()
    meta = {"zarr_format": 3, "node_type": "group", "attributes": {MANIFEST_KEY: manifest}}
    (group / "zarr.json").write_text(json.dumps(meta, separators=(",", ":")))
    return manifest


def read_manifest(store: str | os.PathLike) -> dict | None:
    """The manifest of ``store``, or None for a store written before manifests existed.

    Raises :class:`StoreError` if the manifest is there but unreadable.
    """
    store = Path(store)
    path = store / MANIFEST_GROUP / "zarr.json"
    if not path.is_file():
        if (store / MANIFEST_GROUP).exists():
            raise StoreError(store, f"its manifest {MANIFEST_GROUP}/zarr.json is missing")
        marker = (root_attributes(store) or {}).get(STORE_FORMAT_ATTR)
        if marker is not None:
            raise StoreError(
                store,
                f"its root metadata records store format {marker!r} ({STORE_FORMAT_ATTR}), "
                f"written with a manifest, but the manifest folder {MANIFEST_GROUP}/ is missing "
                "(a copy cut short, or the folder deleted): nothing in it can be verified",
            )
        return None
    try:
        manifest = json.loads(path.read_bytes())["attributes"][MANIFEST_KEY]
        version, files = manifest["version"], manifest["files"]
        if not isinstance(files, dict) or not all(
            isinstance(v, list) and len(v) == 2 for v in files.values()
        ):
            raise TypeError("'files' is not a mapping of path -> [bytes, crc32]")
    except (ValueError, KeyError, TypeError) as e:
        raise StoreError(
            store,
            f"its manifest {MANIFEST_GROUP}/zarr.json is unreadable ({type(e).__name__}: {e})",
        ) from e
    fmt = (root_attributes(store) or {}).get(STORE_FORMAT_ATTR, STORE_FORMAT)
    if isinstance(fmt, int) and fmt > STORE_FORMAT:
        raise StoreError(
            store,
            f"it has store format {fmt}, this causalpos reads formats up to {STORE_FORMAT} "
            "(written by a newer causalpos)",
        )
    if version != MANIFEST_VERSION:
        raise StoreError(
            store,
            f"its manifest has version {version!r}, this causalpos reads version "
            f"{MANIFEST_VERSION} (written by another causalpos version)",
        )
    return manifest


def verify_files(store: str | os.PathLike, *, checksums: bool = True) -> dict | None:
    """Check the files of ``store`` against its manifest; return the manifest.

    Every recorded file must exist with its recorded size and (``checksums``, the default)
    CRC-32, and no file may have been added. ``checksums=False`` compares sizes only: it still
    catches deleted and truncated files, not same-size corruption. Returns None (nothing
    verified) for a store without a manifest (written before manifests existed); its metadata
    files (``zarr.json``) must still parse. A store whose root metadata records a store format
    (:data:`STORE_FORMAT_ATTR`) was written with a manifest: without one it is damaged. Raises
    :class:`StoreError` listing every problem found.
    """
    store = Path(store)
    root = store / "zarr.json"
    if not root.is_file():
        raise StoreError(
            store,
            "it has no root zarr.json (every finished store has one: the write was interrupted "
            "or the file deleted)",
        )
    manifest = read_manifest(store)
    if manifest is None:  # nothing to compare with: at least every metadata file must parse
        _check_json(store, "zarr.json")
        for meta in sorted(store.glob("*/zarr.json")):
            _check_json(store, meta.relative_to(store).as_posix())
        return None
    recorded = manifest["files"]
    problems = []
    for rel, (size, crc) in recorded.items():
        path = store / rel
        try:
            on_disk = path.stat().st_size
        except FileNotFoundError:
            problems.append(f"{describe(rel)} is missing")
            continue
        if on_disk != size:
            problems.append(
                f"{describe(rel)} has {on_disk} bytes, {size} were written (truncated or overwritten)"
            )
        elif checksums and _crc32(path)[1] != crc:
            problems.append(f"{describe(rel)} does not match its CRC-32 (corrupted)")
    problems += [
        f"{describe(rel)} was not written with the store (added later)"
        for rel in _files(store)
        if rel not in recorded
    ]
    if problems:
        raise StoreError(store, problems)
    _check_json(store, "zarr.json")  # a same-size edit, with checksums off
    return manifest


def _check_json(store: Path, rel: str) -> None:
    try:
        json.loads((store / rel).read_bytes())
    except (ValueError, OSError) as e:
        raise StoreError(store, f"{describe(rel)} is not valid JSON ({e})") from e


def check_counts(store: str | os.PathLike, manifest: dict, attrs: Mapping, sizes: Mapping) -> None:
    """The counts and dimension sizes recorded in ``manifest`` against the opened dataset's."""
    problems = []
    for key, value in manifest.get("counts", {}).items():
        if attrs.get(key) != value:
            problems.append(
                f"attribute {key} is {attrs.get(key)!r}, the store was written with {value}"
            )
    for dim, value in manifest.get("sizes", {}).items():
        if sizes.get(dim) != value:
            problems.append(
                f"dimension {dim!r} has size {sizes.get(dim)!r}, the store was written with {value}"
            )
    if problems:
        raise StoreError(store, problems)


#: The provenance record of a model directory (prepared, trained or an init twin): its weights
#: files' sha256 (``sha256``) and ``[size, mtime_ns]`` (``weights_stat``).
MODEL_RECORD = "causalpos_source.json"
