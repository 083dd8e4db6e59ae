"""Stage ``merge_scores``: the shard stores of one variant merged exactly into one store.

Apart from extraction, so that editing the merge never re-extracts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import xarray as xr


def reducer_classes() -> dict[str, type]:
    """The reducer classes a shard store may name in a variable's ``reducer`` attribute.

    Only these are used to merge shards: nothing is imported from a store's attributes. The
    paths of stores written before the library moved into packages (``causalpos.capture:...``,
    ``causalpos.leakage:...``, ``causalpos.position0:...``) stay valid, so those shards still merge.
    """
    from causalpos.capture.reducers import GroupMeans, ScoreMoments, reducer_path
    from causalpos.paper2.reducers import LeakageReducer, SinkReducer

    classes = (ScoreMoments, GroupMeans, LeakageReducer, SinkReducer)
    out = {reducer_path(c): c for c in classes}
    out.update(
        {
            "causalpos.capture:ScoreMoments": ScoreMoments,
            "causalpos.capture:GroupMeans": GroupMeans,
            "causalpos.leakage:LeakageReducer": LeakageReducer,
            "causalpos.position0:SinkReducer": SinkReducer,
        }
    )
    return out


def merge_scores(shards: Sequence[str | os.PathLike], out: str | os.PathLike) -> xr.Dataset:
    """Rule ``merge_scores``: shard stores merged exactly (each reducer's ``merge``) into ``out``."""
    from causalpos.io.store import merge_shards, write_dataset

    ds = merge_shards(list(shards), reducers=reducer_classes())
    write_dataset(ds, out)
    return ds
