"""Store integrity: a manifest of every file a store was written with, checked when it is read.

zarr reads a missing chunk as its fill value (NaN for float maps) and Snakemake judges a
``directory()`` output by its existence alone, so a deleted or truncated chunk would otherwise
flow silently downstream. The manifest (each file's size and CRC-32, the counts the store was
built from) is the attributes of an empty child group, ``<store>/causalpos_manifest/zarr.json``:
a plain JSON file would make zarr v3 warn on every open, and a group can checksum the root
``zarr.json`` too. The root records :data:`STORE_FORMAT_ATTR` = :data:`STORE_FORMAT`, so a store
whose manifest folder is gone is damaged, not taken for an older one. Formats: 0, no manifest;
1, a manifest but no marker; 2, both. CRC-32 guards against accidents, not tampering: ~4 GB/s
here against SHA-256's ~1.5, cheaper than reading stores of tens of GB from disk.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import zlib
from collections.abc import Mapping
from pathlib import Path

from causalpos.io.runconfig import CONFIGFILES_ENV as CONFIGFILES_ENV  # re-exported
from causalpos.io.runconfig import (
    config_args,
    config_options,
    configfiles,
    display_path,
)
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

#: Files Snakemake adds to a finished store (it marks each ``directory()`` output with one).
NOT_RECORDED = (".snakemake_timestamp",)
#: Files a file browser leaves in any folder it shows: never recorded, never damage.
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
    """The provenance record beside ``table``; None where it has none, ``{"unreadable": why}``
    where its sidecar does not parse."""
    try:
        record = json.loads(sidecar(table).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return {"unreadable": f"{type(e).__name__}: {e}"}
    return record if isinstance(record, dict) else {"unreadable": "not a JSON object"}


def recorded_record(path: str | os.PathLike) -> dict | None:
    """The provenance record of the store (root metadata), table (sidecar) or model directory
    (``causalpos_source.json``) ``path``; None where it records none or cannot be read."""
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
    """``(config files, --config arguments)`` a rebuild of ``path`` names: the running
    pipeline's, else those ``path`` (or, for a shard or pair directory, its first store) records."""
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
    """The Snakemake command (run from the pipeline directory) that rebuilds the output ``path``
    with ``flag`` (e.g. ``--rerun-incomplete``) and the config options :func:`_options_of` finds.

    A store in a shard directory (``.../shard-NNNN/<variant>.zarr``) or a merged score store
    (``results/scores/<model>/<dataset>/<variant>.zarr``) is rebuilt by the job writing its
    directory."""
    p = Path(path)
    files, args = _options_of(p) or ([], [])
    if re.fullmatch(r"shard-\d{4}", p.parent.name) or (
        p.suffix == ".zarr" and p.parts[-5:-3] == ("results", "scores")
    ):
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
    1 with a manifest folder, 0 without."""
    value = (root_attributes(store) or {}).get(STORE_FORMAT_ATTR)
    if isinstance(value, int):
        return value
    return 1 if (Path(store) / MANIFEST_GROUP).exists() else 0


class StoreFormatError(KeyError):
    """A store written by older code lacks what this causalpos reads; a :class:`KeyError` (what a
    caller catching a missing key expects) naming the store, its format and its rebuild."""

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
    """A store on disk is damaged or incomplete (an :class:`OSError`, like
    :class:`gzip.BadGzipFile`: the fault is on disk). ``problems``: one sentence each; the
    message adds the command that rebuilds it."""

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
    """(size in bytes, CRC-32) of the file at ``path``."""
    crc, size = 0, 0
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            crc = zlib.crc32(block, crc)
            size += len(block)
    return size, crc


def _files(store: Path) -> list[str]:
    """Every file of ``store`` (sorted posix paths relative to it, links followed) but the
    manifest, the root's :data:`NOT_RECORDED` and :data:`OS_LITTER`."""
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
    """Record every file of the finished (not yet renamed) store ``store``; call it last.
    ``counts`` (e.g. ``n_sequences``) and ``sizes`` (dimension sizes) are checked against the
    dataset when it is opened. Returns the manifest."""
    store = Path(store)
    manifest = {
        "version": MANIFEST_VERSION,
        "file_fields": ["bytes", "crc32"],
        "files": {rel: list(_crc32(store / rel)) for rel in _files(store)},
        "counts": {k: int(v) for k, v in (counts or {}).items()},
        "sizes": {str(k): int(v) for k, v in (sizes or {}).items()},
    }
    group = store / MANIFEST_GROUP
    group.mkdir()
    meta = {"zarr_format": 3, "node_type": "group", "attributes": {MANIFEST_KEY: manifest}}
    (group / "zarr.json").write_text(json.dumps(meta, separators=(",", ":")))
    return manifest


def read_manifest(store: str | os.PathLike) -> dict | None:
    """The manifest of ``store``, None for a store written before manifests existed;
    :class:`StoreError` where it should be there and is not, or is unreadable."""
    store = Path(store)
    path = store / MANIFEST_GROUP / "zarr.json"
    marker = (root_attributes(store) or {}).get(STORE_FORMAT_ATTR)
    if not path.is_file():
        if (store / MANIFEST_GROUP).exists():
            raise StoreError(store, f"its manifest {MANIFEST_GROUP}/zarr.json is missing")
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
    if isinstance(marker, int) and marker > STORE_FORMAT:
        raise StoreError(
            store,
            f"it has store format {marker}, this causalpos reads formats up to {STORE_FORMAT} "
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
    """Check the files of ``store`` against its manifest (each one's size and, with
    ``checksums``, CRC-32; none added); return the manifest, None for a store without one
    (whose metadata files must still parse). :class:`StoreError` lists every problem found."""
    store = Path(store)
    if not (store / "zarr.json").is_file():
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
    problems = [
        f"attribute {k} is {attrs.get(k)!r}, the store was written with {v}"
        for k, v in manifest.get("counts", {}).items()
        if attrs.get(k) != v
    ] + [
        f"dimension {d!r} has size {sizes.get(d)!r}, the store was written with {v}"
        for d, v in manifest.get("sizes", {}).items()
        if sizes.get(d) != v
    ]
    if problems:
        raise StoreError(store, problems)


#: The provenance record of a model directory (prepared, trained or an init twin): its weights
#: files' sha256 (``sha256``) and ``[size, mtime_ns]`` (``weights_stat``).
MODEL_RECORD = "causalpos_source.json"
