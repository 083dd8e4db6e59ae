"""Stage ``diagonal_normalize``: paper 1 §5's diagonal normalization of one score store.

Apart from extraction, so that editing the normalization reruns normalization and what follows,
never the extraction.
"""

from __future__ import annotations

import os

import numpy as np
import xarray as xr

from causalpos.io.store import open_dataset, write_dataset
from causalpos.paper1.diagonal import normalize


def normalize_scores(ds: xr.Dataset) -> xr.Dataset:
    """Diagonal normalization (paper 1 §5) of a score store's maps.

    ``score_normalized`` (layer, head, query, key) from ``score_mean``; the head average
    ``score_normalized_mean`` (layer, query, key) — equal to normalizing the head-averaged map,
    since the operation is linear; ``score_mean_head_avg`` (layer, query, key), the raw head
    average (App. E's raw maps). float32 maps, NaN where masked.
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
    """Rule ``diagonal_normalize``: :func:`normalize_scores` of the score store ``src``, into ``out``."""
    ds = normalize_scores(open_dataset(src))
    write_dataset(ds, out)
    return ds
