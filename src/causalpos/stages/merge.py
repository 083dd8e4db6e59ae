"""Stage ``merge_scores``: the shard stores of a (model, dataset) of several shards merged
exactly, one store per variant, in one job.

Apart from extraction, so that editing this module never re-extracts (extraction of a dataset of
one shard merges in memory through :func:`causalpos.io.shards.merge_shards`, which both import).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import xarray as xr

from causalpos.io.store import LOST_OR_NOT_COMPUTED as LOST
from causalpos.io.store import map_problems


def reducer_classes() -> dict:
    """The reducer names a shard store may record in a variable's ``reducer`` attribute, each
    with its exact merge (torch-free). Only these merge shards: nothing is imported from a store's
    attributes; the paths of stores written before the library moved into packages stay valid."""
    from causalpos.capture.merging import MERGES

    return dict(MERGES)


def input_fault(store: str | os.PathLike, out: str | os.PathLike, stage: str) -> None:
    """Raise if the input ``store`` holds maps without data (:func:`map_problems`): as
    ``FloatingPointError`` (NaN produced by the model) when its files verify against a manifest,
    as :class:`~causalpos.io.store.StoreError` (lost or damaged) when it has none to verify."""
    from causalpos.io.integrity import store_format
    from causalpos.io.store import NAN_FROM_MODEL, StoreError, open_dataset

    verified = store_format(store) >= 1
    opened = open_dataset(store)  # raises StoreError for damaged files
    at_fault = map_problems(opened, cause=NAN_FROM_MODEL if verified else LOST)
    if not at_fault:
        return
    if verified:
        raise FloatingPointError(
            f"{stage}: refusing to write {out}: its input {store} holds NaN maps: "
            + "; ".join(at_fault)
        )
    raise StoreError(store, at_fault)


def merge_scores(
    shard_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, variants: Sequence[str]
) -> None:
    """Rule ``merge_scores``: ``out_dir/{variant}.zarr`` for each of ``variants``, the exact merge
    of ``{variant}.zarr`` of every shard directory, one variant at a time (a dataset of one shard
    is extracted straight into its final stores through the same merge: ``extract.as_merged``)."""
    if not variants:
        raise ValueError(f"merge_scores: no variant to merge into {out_dir}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for variant in variants:
        merge_score_shards(
            [Path(d) / f"{variant}.zarr" for d in shard_dirs], out_dir / f"{variant}.zarr"
        )


def merge_score_shards(shards: Sequence[str | os.PathLike], out: str | os.PathLike) -> xr.Dataset:
    """One variant's shard stores merged exactly (each reducer's ``merge``) into ``out``.

    Each shard is verified as it is opened; the result is checked before it is written (its
    counts add up, every map holds data). A failed check names the shard at fault and writes
    nothing (:func:`input_fault`).
    """
    from causalpos.io.shards import merge_shards
    from causalpos.io.store import count_problems, write_dataset

    shards = list(shards)
    ds = merge_shards(shards, reducers=reducer_classes())
    problems = count_problems(ds) + map_problems(ds)
    if problems:
        # Find the shard at fault (only on failure: this reads every shard once more).
        for shard in shards:
            input_fault(shard, out, "merge_scores")
        raise ValueError(
            f"merge_scores: refusing to write {out}: " + "; ".join(problems) + f" (merged from "
            f"{len(shards)} shards, none of which shows the fault on its own)"
        )
    write_dataset(ds, out)
    return ds
