"""Stores: xarray datasets in zarr v3, written atomically (their shards: :mod:`causalpos.io.shards`).

A store is written under a temporary sibling name and renamed into place only when complete, so
Snakemake never takes a half-written ``directory()`` output for a finished one. Its manifest
(:mod:`causalpos.io.integrity`), written last, is checked by :func:`open_dataset`: a chunk lost
later raises :class:`StoreError` instead of reading as NaN. Stages check what they computed
before writing it (:func:`map_problems`, :func:`count_problems`).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from causalpos.io.atomic import atomic_dir, disk_full_named
from causalpos.io.integrity import (
    COUNT_ATTRS,
    MANIFEST_GROUP,
    STORE_FORMAT,
    STORE_FORMAT_ATTR,
    StoreError,
    StoreFormatError,
    check_counts,
    describe,
    rebuild_hint,
    store_format,
    verify_files,
    write_manifest,
)
from causalpos.io.provenance import check_opened, stamp

log = logging.getLogger("causalpos.io.store")

#: Trailing 2-D slices smaller than this many elements are not chunked one per file.
MIN_MAP_ELEMENTS = 4096


#: The numeric arrays' compressor, lossless: Blosc's byte shuffle (floats' exponent bytes then
#: compress as runs) before zstd at level 3; measured on the default run's score stores: 7–9 %
#: smaller than zarr's default (zstd 3 without shuffle), as fast to write, faster to read.
COMPRESSOR = {"cname": "zstd", "clevel": 3, "shuffle": "shuffle"}


def _encoding(ds: xr.Dataset) -> dict:
    """Every numeric array's compressor (:data:`COMPRESSOR`); float maps chunked by leading dims
    so one (layer[, head]) map is one chunk, where the trailing two dims hold at least
    :data:`MIN_MAP_ELEMENTS` values: a per-sequence array with small trailing dims chunked that
    way becomes ~10⁵ tiny files (measured: 1.6 GB and 100 s for a 16-sequence shard).
    """
    enc = {}
    compressors = None
    for name, var in ds.data_vars.items():
        if var.dtype.kind not in "biuf":
            continue
        if compressors is None:
            from zarr.codecs import BloscCodec  # imported where a store is written

            compressors = (BloscCodec(**COMPRESSOR),)
        enc[name] = {"compressors": compressors}
        if (
            var.ndim >= 3
            and np.issubdtype(var.dtype, np.floating)
            and var.shape[-1] * var.shape[-2] >= MIN_MAP_ELEMENTS
        ):
            enc[name]["chunks"] = tuple(
                1 if i < var.ndim - 2 else s for i, s in enumerate(var.shape)
            )
    return enc


def write_dataset(ds: xr.Dataset, path: str | os.PathLike, *, encoding: dict | None = None) -> Path:
    """Write ``ds`` to the zarr store ``path`` atomically, replacing what is there.

    Attributes must be JSON-serialisable (numpy values are converted). The manifest (with the
    counts in :data:`~causalpos.io.integrity.COUNT_ATTRS` and the dimension sizes) is written
    last, inside the temporary directory, so a renamed store always has one.
    """
    path = Path(path)
    ds = ds.copy()
    ds.attrs = {k: _jsonable(v) for k, v in ds.attrs.items()}
    ds.attrs[STORE_FORMAT_ATTR] = STORE_FORMAT
    stamp(ds.attrs, path)  # what the running config expects of this path (io.provenance)
    for name, var in list(ds.variables.items()):
        var.attrs = {k: _jsonable(v) for k, v in var.attrs.items()}
        # Fixed-width unicode has no zarr v3 specification (zarr warns it may become
        # unreadable); variable-length strings do.
        if var.dtype.kind == "U":
            ds[name] = var.astype(object)
    enc = _encoding(ds)
    for name, var_enc in (encoding or {}).items():
        enc.setdefault(name, {}).update(var_enc)
    counts = {k: ds.attrs[k] for k in COUNT_ATTRS if isinstance(ds.attrs.get(k), int)}
    with disk_full_named(path, "store"), atomic_dir(path) as tmp:
        with warnings.catch_warnings():
            # Consolidated metadata lets `xr.open_zarr(path)` open a store without listing it (no
            # warning about Snakemake's .snakemake_timestamp); not yet in the v3 specification.
            warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
            try:
                ds.to_zarr(tmp, mode="w", zarr_format=3, consolidated=True, encoding=enc)
            except BaseException:
                # zarr's IO thread may still write chunks: let it finish, or its files would
                # reappear in the temporary directory after atomic_dir removed it.
                wait_for_zarr_writes()
                raise
        write_manifest(tmp, counts=counts, sizes=dict(ds.sizes))
    return path


def wait_for_zarr_writes(timeout: float = 120.0) -> bool:
    """Wait (``timeout`` seconds at most) until zarr's IO thread has no write in flight; True if
    none is left.

    zarr writes on an event loop in its own thread; an exception in the main thread (Ctrl-C, a
    SIGTERM turned into one by :func:`causalpos.io.runlog.logged`) stops the wait, not the write,
    which goes on creating files after a clean-up. Called before removing a temporary store.
    """
    import asyncio

    from zarr.core import sync as zarr_sync

    loop = zarr_sync.loop[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return True

    async def drain() -> bool:
        me = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=timeout)
            return not still
        return True

    try:
        return asyncio.run_coroutine_threadsafe(drain(), loop).result(timeout + 5)
    except Exception:  # the loop stopped meanwhile: nothing left to wait for, or no way to
        return False


def open_dataset(
    path: str | os.PathLike,
    *,
    checksums: bool = True,
    variables: Sequence[str] = (),
    attrs: Sequence[str] = (),
) -> xr.Dataset:
    """Open a store written by :func:`write_dataset` lazily (no dask), checked against its
    manifest: :class:`StoreError` where a file is missing, resized or (``checksums``) altered,
    metadata unreadable or counts contradictory; a store without a manifest opens with one
    logged warning. ``variables`` (data variables or coordinates) and ``attrs`` the caller
    reads: one missing raises :class:`StoreFormatError` naming it."""
    ds = _open(path, checksums=checksums, cache=True)[0]
    missing = [f"variable {v!r}" for v in variables if v not in ds.variables]
    missing += [f"attribute {a!r}" for a in attrs if a not in ds.attrs]
    if missing:
        raise StoreFormatError(path, missing, store_format(path))
    return ds


def require_format(
    ds: xr.Dataset, path: str | os.PathLike, attr: str, version: int, what: str
) -> xr.Dataset:
    """``ds`` (opened from ``path``, a ``what``) if its attr ``attr`` is ``version`` (absent: 1);
    else :class:`StoreFormatError` naming the format it has and the one this causalpos reads."""
    found = ds.attrs.get(attr, 1)
    if found != version:
        raise StoreFormatError(
            path,
            [f"{what} format {version} (attribute {attr!r}; it has {found!r})"],
            store_format(path),
        )
    return ds


def verify_store(path: str | os.PathLike, *, checksums: bool = True) -> bool:
    """Check the store ``path`` as :func:`open_dataset` does, without its warning or provenance
    check; True if a manifest was verified, False if there is none. :class:`StoreError` if
    damaged."""
    return _open(path, checksums=checksums, cache=False, reader=False)[1] is not None


#: Stores without a manifest already warned about in this process.
_UNVERIFIED: set[Path] = set()
#: Stores of an older format (:func:`~causalpos.io.integrity.store_format`) opened in this
#: process: a ``KeyError`` in a job that read one is named by :func:`older_store_error`.
_OLDER: dict[Path, int] = {}


def older_store_error(error: KeyError) -> StoreFormatError | None:
    """``error`` (a ``KeyError`` raised while reading) as a :class:`StoreFormatError` naming the
    oldest store of an older format opened in this process; None if none was opened."""
    if isinstance(error, StoreFormatError) or not _OLDER:
        return None
    path, fmt = min(_OLDER.items(), key=lambda item: item[1])
    key = error.args[0] if error.args else "?"
    return StoreFormatError(path, [f"{key!r} (read as {type(error).__name__})"], fmt)


def _open(
    path: str | os.PathLike, *, checksums: bool, cache: bool, reader: bool = True
) -> tuple[xr.Dataset, dict | None]:
    """``(dataset, manifest)`` of the checked store ``path``; ``reader`` False (verify): without
    the warning for a missing manifest and the provenance check."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no zarr store at {path}")
    manifest = verify_files(path, checksums=checksums)
    fmt = store_format(path)
    if fmt < STORE_FORMAT:
        _OLDER[path] = fmt
    if manifest is None and reader and path.resolve() not in _UNVERIFIED:
        _UNVERIFIED.add(path.resolve())
        log.warning(
            "%s has no integrity manifest (written by an older causalpos): opened without "
            "verification. %s",
            path,
            rebuild_hint(path),
        )
    try:
        consolidated = "consolidated_metadata" in json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        consolidated = False  # the open that follows reports what is wrong
    try:
        ds = xr.open_dataset(
            path, engine="zarr", consolidated=consolidated, chunks=None, cache=cache
        )
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise StoreError(path, f"zarr cannot open it ({type(e).__name__}: {e})") from e
    # zarr skips (with a warning) a member whose metadata it cannot read: an array would vanish.
    unread = sorted(
        d.name
        for d in path.iterdir()
        if d.name != MANIFEST_GROUP and (d / "zarr.json").is_file() and d.name not in ds.variables
    )
    if unread:
        raise StoreError(
            path,
            [f"zarr cannot read {describe(f'{a}/zarr.json')}: array {a!r} is lost" for a in unread],
        )
    if manifest is not None:
        check_counts(path, manifest, ds.attrs, ds.sizes)
    # The marker describes the file on disk, not the data: readers (and merges) never see it.
    ds.attrs.pop(STORE_FORMAT_ATTR, None)
    if reader:  # its path and the running config against its record (verify checks apart)
        check_opened(path, ds.attrs)
    return ds, manifest


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v if v is None or isinstance(v, (int, float, str)) else str(v)  # bool is an int


def count_problems(ds: xr.Dataset) -> list[str]:
    """One sentence per count of a score dataset that contradicts the ``n_sequences`` attribute
    (else variable): that variable, the sum of ``group_n_sequences``, ``leak_map_count``, the
    ``sequence`` dimension, the span ``sequence_first``..``sequence_last``."""
    if "n_sequences" in ds.attrs:
        n, source = int(ds.attrs["n_sequences"]), "the n_sequences attribute"
    elif "n_sequences" in ds.data_vars and ds["n_sequences"].ndim == 0:
        n, source = int(ds["n_sequences"]), "the n_sequences variable"
    else:
        return []
    found = {}
    if "n_sequences" in ds.data_vars and ds["n_sequences"].ndim == 0:
        found["the n_sequences variable"] = int(ds["n_sequences"])
    if "group_n_sequences" in ds.data_vars:
        found["the sum of group_n_sequences"] = int(ds["group_n_sequences"].values.sum())
    if "leak_map_count" in ds.data_vars and ds["leak_map_count"].ndim == 0:
        found["leak_map_count"] = int(ds["leak_map_count"])
    if "sequence" in ds.dims:
        found["the sequence dimension"] = int(ds.sizes["sequence"])
    if "sequence_first" in ds.attrs and "sequence_last" in ds.attrs:
        first, last = int(ds.attrs["sequence_first"]), int(ds.attrs["sequence_last"])
        found[f"the span sequence_first..sequence_last ({first}..{last})"] = last - first + 1
    return [f"{what} counts {value}, {source} {n}" for what, value in found.items() if value != n]


#: Maps are checked this many at a time, so memory stays bounded for large stores.
_MAPS_PER_BLOCK = 64


#: Why a map of a store without a manifest (or of a result just computed) holds no data.
LOST_OR_NOT_COMPUTED = "the data was lost (zarr reads a missing chunk as NaN) or never computed"
#: Why a map holds no data when its store's files are intact or it was just computed.
NAN_FROM_MODEL = (
    "the files are intact, so these NaN were computed, not lost: the model produced NaN "
    "(non-finite weights or activations; a rebuild reproduces them). Retrain a diverged model "
    "with a lower train.lr, or run a float16 model with `dtype: bfloat16` or `dtype: float32` "
    "in the config, then rebuild"
)


def map_problems(ds: xr.Dataset, *, cause: str = LOST_OR_NOT_COMPUTED) -> list[str]:
    """One sentence per float variable with (query, key) maps holding no data: NaN or ±inf on
    a diagonal (every attention mask lets a query see its own key; non-square maps need one
    finite value), or ±inf anywhere (masked cells are NaN). ``cause``: why, in words
    (:data:`LOST_OR_NOT_COMPUTED`, :data:`NAN_FROM_MODEL`)."""
    problems = []
    for name, var in ds.data_vars.items():
        if (
            "query" not in var.dims
            or "key" not in var.dims
            or not np.issubdtype(var.dtype, np.floating)
        ):
            continue
        var = var.transpose(..., "query", "key")
        lead = var.shape[:-2]
        arr = np.asarray(var.values)
        flat = arr.reshape(-1, *arr.shape[-2:])
        square = arr.shape[-1] == arr.shape[-2]
        empty: list[int] = []
        has_inf = False
        for a in range(0, flat.shape[0], _MAPS_PER_BLOCK):
            block = flat[a : a + _MAPS_PER_BLOCK]
            if square:
                bad = ~np.isfinite(np.diagonal(block, axis1=1, axis2=2)).all(axis=1)
            else:
                bad = ~np.isfinite(block).any(axis=(1, 2))
            empty.extend((np.flatnonzero(bad) + a).tolist())
            has_inf = has_inf or bool(np.isinf(block).any())
        if empty:
            where = [
                ", ".join(f"{d}={i}" for d, i in zip(var.dims[:-2], np.unravel_index(k, lead)))
                or "the map"
                for k in empty[:3]
            ]
            kind = "NaN or ±inf on its diagonal" if square else "no finite value"
            problems.append(
                f"{name}: {len(empty)} of {flat.shape[0]} maps hold {kind} (e.g. "
                f"{'; '.join(where)}), where every attention mask leaves a value: {cause}"
            )
        if has_inf:
            problems.append(f"{name} holds ±inf (masked cells must be NaN)")
    return problems
