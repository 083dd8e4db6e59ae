"""Stage ``diagonal_normalize``: paper 1 §5's diagonal normalization of one score store.

Apart from extraction, so that editing the normalization reruns normalization and what follows,
never the extraction.
"""

from __future__ import annotations

import os

import numpy as np
import xarray as xr

from causalpos.io.store import (
    StoreError,
    count_problems,
    map_problems,
    open_dataset,
    write_dataset,
)
from causalpos.paper1.diagonal import normalize
from causalpos.stages.merge import input_fault


def normalize_scores(ds: xr.Dataset) -> xr.Dataset:
    """Diagonal normalization (paper 1 §5) of a score store's maps.

    ``score_normalized`` (layer, head, query, key) from ``score_mean``, its head average
    ``score_normalized_mean`` (layer, query, key) and the raw head average
    ``score_mean_head_avg`` (App. E's raw maps); float32, NaN where masked.
    """
    out = xr.Dataset(attrs=dict(ds.attrs))
    dims = ds["score_mean"].dims
    norm = normalize(np.asarray(ds["score_mean"].values, dtype=np.float64))
    head_axis = dims.index("head")
    reduced = tuple(d for d in dims if d != "head")
    out["score_normalized"] = (dims, norm.astype(np.float32))
    # Every head of a layer shares the mask, so a plain mean keeps NaN exactly where masked.
    out["score_normalized_mean"] = (reduced, norm.mean(axis=head_axis).astype(np.float32))
    out["score_mean_head_avg"] = (
        reduced,
        np.asarray(ds["score_mean"].values, dtype=np.float64)
        .mean(axis=head_axis)
        .astype(np.float32),
    )
    out.attrs["normalization"] = "diagonal (paper 1 §5): each offset band minus its mean"
    return out


def diagonal_normalize(src: str | os.PathLike, out: str | os.PathLike) -> xr.Dataset:
    """Rule ``diagonal_normalize``: :func:`normalize_scores` of the score store ``src``, into ``out``.

    The result is checked before it is written: every map holds data, the counts agree, and
    ``score_normalized`` is NaN exactly where ``score_mean`` is.
    """
    scores = open_dataset(src, variables=["score_mean"])
    ds = normalize_scores(scores)
    problems = map_problems(ds) + count_problems(ds) + _nan_pattern_problems(scores, ds)
    if problems:
        input_fault(src, out, "diagonal_normalize")
        at_fault = count_problems(scores)
        if at_fault:
            raise StoreError(src, at_fault)
        raise ValueError(f"diagonal_normalize: refusing to write {out}: " + "; ".join(problems))
    write_dataset(ds, out)
    return ds


def _nan_pattern_problems(scores: xr.Dataset, out: xr.Dataset) -> list[str]:
    a = scores["score_mean"]
    b = out["score_normalized"].transpose(*a.dims)
    layer = a.dims.index("layer")
    for i in range(a.shape[layer]):  # a layer at a time: bounded memory at paper scale
        sel = {"layer": i}
        if not np.array_equal(np.isnan(a[sel].values), np.isnan(b[sel].values)):
            return [
                f"score_normalized is NaN at other cells than score_mean (layer {i}): the "
                "normalization must keep NaN exactly where the mask hides a key"
            ]
    return []
