"""Shards of a store: an extraction split into shards of consecutive sequences
(:meth:`causalpos.config.Resolved.shard_bounds`), each one store (a job), so a rerun after an
interruption keeps every finished shard. :func:`merge_shards` combines them exactly, through
each reducer's ``merge``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from causalpos.io.integrity import StoreError
from causalpos.io.store import _open, count_problems

#: Attributes that legitimately differ between the shards of one extraction.
SHARD_ATTRS = ("n_sequences", "sequence_first", "sequence_last", "device", "shard")


def merge_shards(
    parts: Sequence[str | os.PathLike | xr.Dataset],
    *,
    reducers: Mapping[str, type | Callable],
    map_dtype: str | None = "float32",
) -> xr.Dataset:
    """Merge shard datasets (or store paths) exactly, variable by variable, via their reducers.

    Every data variable carries ``attrs["reducer"] = "module:Class"``, a key of ``reducers``
    (nothing is imported from a store's attributes), whose ``merge`` combines that reducer's
    variables across shards (means and M2 by Chan's formula in float64, per-sequence arrays by
    concatenation...). Shard attributes must agree except :data:`SHARD_ATTRS`; the result's
    ``n_sequences`` is the total, ``n_shards`` the count. ``map_dtype``: float maps' dtype in the
    result (float32 for the final store, design.md); ``None`` keeps float64.
    """
    if not parts:
        raise ValueError("merge_shards: no shards given")
    # Opened lazily without caching: memory is the merged result plus one shard.
    datasets = [p if isinstance(p, xr.Dataset) else _open_uncached(p) for p in parts]
    _check_shard_counts(parts, datasets)
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
        merge = reducers.get(path)
        if merge is None:
            raise ValueError(
                f"merge_shards: variables {names} name reducer {path!r}, which is not one of "
                f"{sorted(reducers)}; was the shard written by another version of causalpos?"
            )
        # a reducer class (its ``merge`` classmethod) or the merge function itself
        part = getattr(merge, "merge", merge)([ds[names] for ds in datasets])
        for name in part.data_vars:
            part[name].attrs["reducer"] = path
        merged.append(part)
    out = xr.merge(merged, compat="no_conflicts", join="outer", combine_attrs="override")
    # Coordinates of the shards beside their dimensions' (each layer's kind, layer_kind) that a
    # reducer's merge rebuilt without: the shards of one store share them.
    for name, coord in first.coords.items():
        if name not in out.coords and name not in first.dims and set(coord.dims) <= set(out.dims):
            out = out.assign_coords({name: coord.variable})
    if map_dtype is not None:
        for name, var in out.data_vars.items():
            if "query" in var.dims and "key" in var.dims and np.issubdtype(var.dtype, np.floating):
                out[name] = var.astype(map_dtype)
                out[name].attrs = var.attrs
    attrs = {k: v for k, v in first.attrs.items() if k not in SHARD_ATTRS}
    if "n_sequences" in first.attrs:  # all shards or none (_check_shard_counts)
        attrs["n_sequences"] = int(sum(int(ds.attrs["n_sequences"]) for ds in datasets))
    attrs["n_shards"] = len(datasets)
    devices = sorted({str(ds.attrs["device"]) for ds in datasets if "device" in ds.attrs})
    if devices:
        attrs["device"] = devices[0] if len(devices) == 1 else devices
    if all("sequence_first" in ds.attrs for ds in datasets):
        attrs["sequence_first"] = min(int(ds.attrs["sequence_first"]) for ds in datasets)
        attrs["sequence_last"] = max(int(ds.attrs["sequence_last"]) for ds in datasets)
    out.attrs = attrs
    problems = count_problems(out)
    if problems:
        raise ValueError(
            f"merge_shards: the merged counts of {len(datasets)} shards do not add up: "
            + "; ".join(problems)
        )
    return out


def _open_uncached(path: str | os.PathLike) -> xr.Dataset:
    """A shard opened lazily without caching, verified like :func:`open_dataset`."""
    if not Path(path).exists():
        raise FileNotFoundError(
            f"merge_shards: no finished store at {path} (shard not extracted yet?)"
        )
    return _open(path, checksums=True, cache=False)[0]


def _check_shard_counts(
    parts: Sequence[str | os.PathLike | xr.Dataset], datasets: Sequence[xr.Dataset]
) -> None:
    """Each shard's counts agree with themselves, all or none record ``n_sequences``, and no
    two shards hold the same sequences (``sequence_first``..``sequence_last``)."""
    for i, (part, ds) in enumerate(zip(parts, datasets, strict=True)):
        problems = count_problems(ds)
        if problems:
            if isinstance(part, xr.Dataset):
                raise ValueError(f"merge_shards: shard {i}: " + "; ".join(problems))
            raise StoreError(part, problems)
    recorded = ["n_sequences" in ds.attrs for ds in datasets]
    if any(recorded) and not all(recorded):
        missing = [i for i, r in enumerate(recorded) if not r]
        raise ValueError(
            f"merge_shards: shards {missing} have no n_sequences attribute, the others do; "
            "shards of one store are all written by extract_scores"
        )
    ranges = sorted(
        (int(ds.attrs["sequence_first"]), int(ds.attrs["sequence_last"]), i)
        for i, ds in enumerate(datasets)
        if "sequence_first" in ds.attrs and "sequence_last" in ds.attrs
    )
    for (a0, a1, i), (b0, b1, j) in zip(ranges, ranges[1:]):
        if b0 <= a1:
            raise ValueError(
                f"merge_shards: shards {i} (sequences {a0}..{a1}) and {j} ({b0}..{b1}) overlap; "
                "each sequence must be in exactly one shard (the same shard listed twice?)"
            )
