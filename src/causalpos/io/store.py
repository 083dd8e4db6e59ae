"""Stores: xarray datasets in zarr v3, written atomically; shards and their merge.

A store is written under a temporary sibling name and renamed into place only when complete,
so an interrupted job never leaves a directory that looks finished (Snakemake would otherwise
take a half-written ``directory()`` output for a finished one).

Resumability is shard-level. An extraction is split into shards of consecutive sequences
(:func:`shard_bounds`); each shard is one store. Because a store exists only once complete,
rerunning after an interruption keeps every finished shard and redoes the unfinished one:
Snakemake does this by itself (each shard is a job whose output is missing), and
:func:`write_shards` does it for library and CLI use. :func:`merge_shards` then combines the
shards exactly, through each reducer's ``merge``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from causalpos.io.atomic import atomic_dir

ZARR_FORMAT = 3


#: Trailing 2-D slices smaller than this many elements are not chunked one per file.
MIN_MAP_ELEMENTS = 4096


def _encoding(ds: xr.Dataset) -> dict:
    """Chunk float maps by leading dims so one (layer[, head]) map is one chunk.

    Only where the trailing two dims form a map of at least :data:`MIN_MAP_ELEMENTS` values: a
    per-sequence array with small trailing dims (e.g. the leakage reducer's (sequence, layer, head,
    window, fit, target)) chunked that way becomes ~10⁵ files of a few bytes each (measured: 1.6 GB
    on disk and 100 s to write a 16-sequence shard); it keeps zarr's default chunks instead.
    """
    enc = {}
    for name, var in ds.data_vars.items():
        if (
            var.ndim >= 3
            and np.issubdtype(var.dtype, np.floating)
            and var.shape[-1] * var.shape[-2] >= MIN_MAP_ELEMENTS
        ):
            chunks = tuple(1 if i < var.ndim - 2 else s for i, s in enumerate(var.shape))
            enc[name] = {"chunks": chunks}
    return enc


def write_dataset(ds: xr.Dataset, path: str | os.PathLike, *, encoding: dict | None = None) -> Path:
    """Write ``ds`` to the zarr store ``path`` atomically (temporary name, then rename).

    An existing store at ``path`` is replaced. Attributes must be JSON-serialisable scalars,
    strings or lists; numpy scalars are converted.
    """
    path = Path(path)
    ds = ds.copy()
    ds.attrs = {k: _jsonable(v) for k, v in ds.attrs.items()}
    for name, var in list(ds.variables.items()):
        var.attrs = {k: _jsonable(v) for k, v in var.attrs.items()}
        # Fixed-width unicode has no zarr v3 specification (zarr warns it may become
        # unreadable); variable-length strings do.
        if var.dtype.kind == "U":
            ds[name] = var.astype(object)
    enc = _encoding(ds)
    if encoding:
        enc.update(encoding)
    with atomic_dir(path) as tmp:
        ds.to_zarr(tmp, mode="w", zarr_format=ZARR_FORMAT, consolidated=False, encoding=enc)
    return path


def open_dataset(path: str | os.PathLike) -> xr.Dataset:
    """Open a store written by :func:`write_dataset` (lazily, via dask-free zarr backend)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no zarr store at {path}")
    return xr.open_zarr(path, consolidated=False, chunks=None)


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, bool) or v is None or isinstance(v, (int, float, str)):
        return v
    return str(v)


#: Attributes that legitimately differ between the shards of one extraction.
SHARD_ATTRS = ("n_sequences", "sequence_first", "sequence_last", "device", "shard")


def is_complete(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a finished store (written by :func:`write_dataset`, so atomic)."""
    return (Path(path) / "zarr.json").is_file()


def shard_bounds(n_sequences: int, shard_size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n_sequences)`` in blocks of ``shard_size``.

    Adding sequences appends shards and leaves the existing ones unchanged.
    """
    if n_sequences < 1 or shard_size < 1:
        raise ValueError(
            f"shard_bounds: need n_sequences >= 1 and shard_size >= 1, got {n_sequences}, {shard_size}"
        )
    return [(a, min(a + shard_size, n_sequences)) for a in range(0, n_sequences, shard_size)]


def write_shards(
    paths: Sequence[str | os.PathLike],
    compute: Callable[[int], xr.Dataset],
) -> list[Path]:
    """Write shard ``k`` = ``compute(k)`` to ``paths[k]``, skipping shards already complete.

    This is the resume: after an interruption, call it again with the same arguments; finished
    shards are kept (not recomputed) and the rest are computed. Temporary leftovers of a killed
    writer (``.{name}.tmp-*`` siblings) are removed first (assumes one writer per shard).
    """
    out = []
    for k, path in enumerate(paths):
        path = Path(path)
        if not is_complete(path):
            for stale in path.parent.glob(f".{path.name}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
            ds = compute(k)
            ds.attrs["shard"] = k
            write_dataset(ds, path)
        out.append(path)
    return out


def merge_shards(
    parts: Sequence[str | os.PathLike | xr.Dataset],
    *,
    reducers: Mapping[str, type],
    map_dtype: str | None = "float32",
) -> xr.Dataset:
    """Merge shard datasets (or store paths) exactly, variable by variable, via their reducers.

    Every data variable must carry ``attrs["reducer"] = "module:Class"`` (set by
    ``extract_scores``), a key of ``reducers`` (name -> class: only those classes can be named by a
    store; nothing is imported from a store's attributes); the class's ``merge`` combines that reducer's variables across shards
    (means and M2 by Chan's formula in float64, per-sequence arrays by concatenation...).
    Shard attributes must agree except :data:`SHARD_ATTRS`; the result's ``n_sequences`` is the
    total and ``n_shards`` the count. ``map_dtype``: cast float maps (variables with both
    ``query`` and ``key`` dims) to this dtype in the result — "float32" for the final store,
    as design.md specifies; ``None`` keeps float64 (e.g. to merge merged stores again).
    """
    if not parts:
        raise ValueError("merge_shards: no shards given")
    # Opened lazily without caching: reducers read one shard's arrays at a time, so memory is
    # the merged result plus one shard, whatever the number of shards.
    datasets = [p if isinstance(p, xr.Dataset) else _open_uncached(p) for p in parts]
    first = datasets[0]
    for i, ds in enumerate(datasets[1:], 1):
        if set(ds.data_vars) != set(first.data_vars):
            raise ValueError(
                f"merge_shards: shard {i} has variables {sorted(ds.data_vars)}, shard 0 has "
                f"{sorted(first.data_vars)}; were they extracted with the same reducers?"
            )
        for key in set(first.attrs) | set(ds.attrs):
            if key in SHARD_ATTRS:
                continue
            if first.attrs.get(key) != ds.attrs.get(key):
                raise ValueError(
                    f"merge_shards: attribute {key!r} differs between shard 0 "
                    f"({first.attrs.get(key)!r}) and shard {i} ({ds.attrs.get(key)!r}); "
                    "shards of one store must share model, dataset, variant and settings"
                )
    by_reducer: dict[str, list[str]] = {}
    for name, var in first.data_vars.items():
        path = var.attrs.get("reducer")
        if not path:
            raise ValueError(
                f"merge_shards: variable {name!r} has no 'reducer' attribute; shards must be "
                "written from extract_scores results (which record each variable's reducer)"
            )
        by_reducer.setdefault(path, []).append(name)
    merged = []
    for path, names in by_reducer.items():
        cls = reducers.get(path)
        if cls is None:
            raise ValueError(
                f"merge_shards: variables {names} name reducer {path!r}, which is not one of "
                f"{sorted(reducers)}; was the shard written by another version of causalpos?"
            )
        part = cls.merge([ds[names] for ds in datasets])
        for name in part.data_vars:
            part[name].attrs["reducer"] = path
        merged.append(part)
    out = xr.merge(merged, compat="no_conflicts", join="outer", combine_attrs="override")
    if map_dtype is not None:
        for name, var in out.data_vars.items():
            if "query" in var.dims and "key" in var.dims and np.issubdtype(var.dtype, np.floating):
                out[name] = var.astype(map_dtype)
                out[name].attrs = var.attrs
    attrs = {k: v for k, v in first.attrs.items() if k not in SHARD_ATTRS}
    attrs["n_sequences"] = int(sum(int(ds.attrs.get("n_sequences", 0)) for ds in datasets))
    attrs["n_shards"] = len(datasets)
    devices = sorted({str(ds.attrs["device"]) for ds in datasets if "device" in ds.attrs})
    if devices:
        attrs["device"] = devices[0] if len(devices) == 1 else devices
    if all("sequence_first" in ds.attrs for ds in datasets):
        attrs["sequence_first"] = min(int(ds.attrs["sequence_first"]) for ds in datasets)
        attrs["sequence_last"] = max(int(ds.attrs["sequence_last"]) for ds in datasets)
    out.attrs = attrs
    return out


def _open_uncached(path: str | os.PathLike) -> xr.Dataset:
    if not is_complete(path):
        raise FileNotFoundError(
            f"merge_shards: no finished store at {path} (shard not extracted yet?)"
        )
    return xr.open_dataset(path, engine="zarr", consolidated=False, chunks=None, cache=False)
