"""Exact merges of the extraction reducers' shard results, free of torch (so the merge job,
``merge_scores``, needs neither torch nor a model). Each reducer's ``merge`` is the function
here; :data:`MERGES` maps the reducer names a store records (``attrs["reducer"]``) to them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import xarray as xr


def merge_moments(parts: Sequence[xr.Dataset]) -> xr.Dataset:
    """Chan et al. (1979) combination of ``(n, mean, M2)`` triples, in float64.

    Parts are read one at a time (lazily opened stores are fine): memory is the two
    output maps plus one part.
    """
    if not parts:
        raise ValueError("moments: nothing to merge")
    n = int(parts[0]["n_sequences"])
    mean = np.array(parts[0]["score_mean"].values, dtype=np.float64)
    m2 = np.array(parts[0]["score_m2"].values, dtype=np.float64)
    for p in parts[1:]:
        nb = int(p["n_sequences"])
        delta = np.asarray(p["score_mean"].values, dtype=np.float64) - mean
        if delta.shape != mean.shape:
            raise ValueError(
                f"moments: shard maps {delta.shape} vs {mean.shape}; same model and seq_len?"
            )
        tot = n + nb
        m2 += p["score_m2"].values
        m2 += delta * delta * (n * nb / tot)
        delta *= nb / tot
        mean += delta
        n = tot
    dims = ("layer", "head", "query", "key")
    return xr.Dataset(
        {"score_mean": (dims, mean), "score_m2": (dims, m2), "n_sequences": ((), np.int64(n))},
        coords={d: parts[0][d].values for d in dims},
    )


def merge_group_means(parts: Sequence[xr.Dataset]) -> xr.Dataset:
    if not parts:
        raise ValueError("groups: nothing to merge")
    groups = np.unique(np.concatenate([p["group"].values for p in parts]))
    shape = parts[0]["score_group_mean"].shape[1:]
    total = np.zeros((len(groups), *shape))
    counts = np.zeros(len(groups), dtype=np.int64)
    for p in parts:
        idx = np.searchsorted(groups, p["group"].values)
        n = p["group_n_sequences"].values
        total[idx] += p["score_group_mean"].values * n[:, None, None, None]
        counts[idx] += n
    mean = total / counts[:, None, None, None]
    coords = {k: parts[0][k].values for k in ("layer", "query", "key")}
    return xr.Dataset(
        {
            "score_group_mean": (("group", "layer", "query", "key"), mean),
            "group_n_sequences": (("group",), counts),
        },
        coords={"group": groups, **coords},
    )


def merge_leakage(parts: Sequence[xr.Dataset]) -> xr.Dataset:
    """Exact merge of shard results: per-sequence arrays concatenated (sorted by id), the summed
    logits ``leak_map_sum``, log Z ``leak_logz_sum`` and their count added."""
    parts = list(parts)
    if not parts:
        raise ValueError("LeakageReducer.merge needs at least one shard result")
    ids = np.concatenate([p["sequence"].values for p in parts])
    if np.unique(ids).size != ids.size:
        raise ValueError(
            "LeakageReducer.merge: the shards share sequence ids; each sequence must "
            "be in exactly one shard"
        )
    first = parts[0]
    for p in parts[1:]:
        for k in ("leak_floor", "leak_n_pairs"):
            if not np.array_equal(p[k].values, first[k].values, equal_nan=True):
                raise ValueError(
                    f"LeakageReducer.merge: shards disagree on {k} (different T, mask, "
                    "windows or fits); rerun them with one configuration"
                )
    per_seq = [k for k in LEAKAGE_PER_SEQ if k in first]
    merged = xr.concat([p[per_seq] for p in parts], dim="sequence").sortby("sequence")
    out = merged.assign(leak_floor=first["leak_floor"], leak_n_pairs=first["leak_n_pairs"])
    if "leak_map_sum" in first:
        for k in ("leak_map_sum", "leak_logz_sum", "leak_map_count"):
            out[k] = sum((p[k] for p in parts[1:]), first[k])
    out.attrs = dict(first.attrs)
    return out


def concat_sequences(parts: Sequence[xr.Dataset], who: str) -> xr.Dataset:
    """Per-sequence results of the shards concatenated and sorted by sequence id; each id must
    be in exactly one shard (``who`` names the reducer in the error)."""
    parts = list(parts)
    if not parts:
        raise ValueError(f"{who}.merge: nothing to merge")
    ids = np.concatenate([p["sequence"].values for p in parts])
    if np.unique(ids).size != ids.size:
        raise ValueError(f"{who}.merge: shards share sequence ids")
    return xr.concat(parts, dim="sequence").sortby("sequence")


merge_sink = functools.partial(concat_sequences, who="SinkReducer")
merge_score_maps = functools.partial(concat_sequences, who="ScoreMaps")
merge_position0 = functools.partial(concat_sequences, who="Position0States")

#: The per-sequence sums of the expected-map estimator (:mod:`causalpos.paper2.estimator.expected`); a
#: reducer built with ``expected_stats=False`` omits them.
EXPECTED_STATS = ("leak_offsum", "leak_key0sum", "leak_rowsum")

#: Per-sequence variables of the leakage reducer (concatenated over shards).
LEAKAGE_PER_SEQ = (
    "leak_r2_base",
    "leak_r2_full",
    "leak_delta",
    "leak_null",
    "leak_sst",
    "leak_split",
    *EXPECTED_STATS,
)

#: Reducer class -> its merge and the module paths a store may record for it (the older paths keep
#: the shards of stores written before the library's moves mergeable).
_MERGE_OF = {
    "ScoreMoments": (merge_moments, "causalpos.capture.reducers", "causalpos.capture"),
    "GroupMeans": (merge_group_means, "causalpos.capture.reducers", "causalpos.capture"),
    "ScoreMaps": (merge_score_maps, "causalpos.capture.reducers"),
    "LeakageReducer": (
        merge_leakage,
        "causalpos.paper2.extraction.reducers",
        "causalpos.paper2.reducers",
        "causalpos.leakage",
    ),
    "SinkReducer": (
        merge_sink,
        "causalpos.paper2.extraction.reducers",
        "causalpos.paper2.reducers",
        "causalpos.position0",
    ),
    "Position0States": (merge_position0, "causalpos.capture.position0"),
}

#: Reducer name a store may record (``module:Class``) -> its merge. Only these merge: nothing is
#: imported from a store's attributes.
MERGES: dict[str, Callable[[Sequence[xr.Dataset]], xr.Dataset]] = {
    f"{module}:{cls}": merge for cls, (merge, *modules) in _MERGE_OF.items() for module in modules
}
