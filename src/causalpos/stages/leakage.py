"""Stages of paper 2's leakage: per-(model, dataset) summary store, tables across pairs."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import xarray as xr

from causalpos.models.layer_kinds import LAYER_KIND, masks_anything
from causalpos.models.variants import parse_variant
from causalpos.paper2.prompts import pool_small_strata
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary.assemble import leakage_summary
from causalpos.paper2.summary.headline import position_free

#: What the leakage summary reads from each run's score store (the leakage reducer's output).
LEAKAGE_VARIABLES = ("leak_delta", "leak_fit", "leak_window")


def leakage(
    stores: Mapping[str, str],
    out,
    *,
    settings: Mapping | None = None,
    data_store=None,
    strata: str = "none",
    min_stratum: int = 5,
    attrs: Mapping | None = None,
    cost=None,
) -> xr.Dataset:
    """``leakage`` rule: :func:`summarize_leakage` of the merged score stores of one (model,
    dataset), written to ``out``.

    ``stores``: variant -> path of its merged score store; ``settings``: the rule's flat
    ``summary`` param (:meth:`LeakageSettings.from_params`); ``data_store``: the dataset's token
    store; ``strata``, ``min_stratum``, ``attrs``: as :func:`summarize_leakage` reads them;
    ``cost``: where to write the job's CPU time and peak memory once the summary is written.
    """
    from causalpos.io.jobcost import write_job_cost
    from causalpos.io.store import open_dataset, write_dataset

    summary_settings = LeakageSettings.from_params(settings or {})
    _check_strata(strata, data_store is not None)
    # Every configured run must be there: a store of older code without the leakage reducer's
    # output is a StoreFormatError with the rebuild command, never a run dropped in silence.
    opened = {v: open_dataset(p, variables=LEAKAGE_VARIABLES) for v, p in stores.items()}
    data = None if data_store is None else open_dataset(data_store)
    ds = summarize_leakage(
        opened, summary_settings, data=data, strata=strata, min_stratum=min_stratum, attrs=attrs
    )
    write_dataset(ds, out)
    if cost is not None:  # last: the summary written, its cost complete
        write_job_cost(cost)
    return ds


def _check_strata(strata: str, has_data: bool) -> None:
    if strata not in ("none", "source"):
        raise ValueError(f"strata must be 'none' or 'source', got {strata!r}")
    if strata == "source" and not has_data:
        raise ValueError("strata='source' needs the dataset's store (data_store)")


def summarize_leakage(
    opened: Mapping[str, xr.Dataset],
    settings: LeakageSettings,
    *,
    data: xr.Dataset | None = None,
    strata: str = "none",
    min_stratum: int = 5,
    attrs: Mapping | None = None,
) -> xr.Dataset:
    """:func:`leakage_summary` of one (model, dataset)'s runs, with what the tables read beside
    it: rule ``leakage``'s summary, and the notebook API's (:mod:`causalpos.api`).

    ``opened``: variant -> its merged score store. ``data``: the dataset's token store: its
    ``source`` labels, its ``mode`` (position-free runs are negative controls only on chunks at
    random offsets) and position 0; None: no labels, no controls, position 0 unrecorded.
    ``strata``: ``"none"`` (plain bootstrap over prompts) or ``"source"`` (stratified by source;
    sources under ``min_stratum`` prompts pooled, :func:`pool_small_strata`). ``attrs``: extra
    attributes; its ``positional`` decides which runs are position-free.
    """
    _check_strata(strata, data is not None)
    labels = None
    first = next(iter(opened.values()))
    if strata == "source":
        seqs = np.sort(first["sequence"].values)
        labels, n_pooled = pool_small_strata(data["source"].sel(sequence=seqs).values, min_stratum)
        if np.unique(labels).size < 2:
            labels = None  # one stratum: the plain bootstrap
    free, controls_note, mode = _controls(opened, attrs, data)
    ds = leakage_summary(opened, settings, strata=labels, position_free_runs=free)
    ds.attrs["controls_note"] = controls_note
    ds.attrs["data_mode"] = str(mode or "")  # the tables' data_mode: claims 1-2 need "chunks"
    if strata == "source":
        ds.attrs.update(
            {
                "strata_min_size": min_stratum,
                "strata_pooled_prompts": n_pooled,
                "strata_n": 1 if labels is None else int(np.unique(labels).size),
            }
        )
    # The extraction-time choices (fits, windows, pair subsample) travel on leak_delta's attrs.
    reducer = {
        f"reducer_{k.removeprefix('leak_')}": v
        for k, v in first["leak_delta"].attrs.items()
        if k.startswith("leak_")
    }
    # Position 0 of the prompts: the data store's `bos` (as fixed_bos: the summary's own `bos`
    # attr holds the BOS-replacement pairs), prefix and prepend_bos setting.
    data_attrs = {}
    if data is not None:
        data_attrs = {
            "fixed_bos": int(bool(data.attrs.get("bos", False))),
            "prefix_ids": [int(x) for x in data.attrs.get("prefix_ids", [])],
            "prepend_bos": str(data.attrs.get("prepend_bos", "false")),
            **token0_attrs(data, first["sequence"].values),
        }
    if LAYER_KIND in first.coords and "layer" in ds.dims:  # each layer's mask, from the capture
        ds = ds.assign_coords({LAYER_KIND: first[LAYER_KIND].sel(layer=ds["layer"])})
    ds.attrs.update(
        {
            "seq_len": int(first.attrs.get("seq_len", first.sizes.get("query", 0))),
            "variants": list(opened),
            "strata": strata,
            **reducer,
            **data_attrs,
            **dict(attrs or {}),
        }
    )
    return ds


def token0_attrs(data: xr.Dataset, sequences) -> dict:
    """``token0_fixed`` (1 where token 0 is one id across the summary's prompts, else 0) and
    ``token0_ids`` (the distinct ids, at most 5), read from the data store's tokens: the
    mask-free route of the decomposition reads 0 by symmetry where token 0 varies
    (:mod:`causalpos.paper2.decomposition`); {} where the store holds no tokens."""
    if "tokens" not in data:
        return {}
    tok0 = np.asarray(data["tokens"].sel(sequence=np.asarray(sequences)).isel(position=0).values)
    ids = np.unique(tok0)
    return {"token0_fixed": int(ids.size == 1), "token0_ids": [int(x) for x in ids[:5]]}


def _controls(opened: Mapping[str, xr.Dataset], attrs, data) -> tuple[list[str], str, str]:
    """(the position-free runs that are negative controls here, a note where none can be, the
    data store's mode)."""
    positional = str((attrs or {}).get("positional", ""))
    # A planted run (plant_query) is position-free but for its planted term: a positive control,
    # never a negative one (causalpos.paper2.summary.planted).
    windowed = _windowed(opened)
    free = [
        v
        for v in opened
        if position_free(v, positional, windowed) and parse_variant(v).plant is None
    ]
    # A position-free run is a negative control only on prompts whose content is exchangeable
    # over positions: chunks at random offsets (a fixed token 0 is modelled by the landmark).
    # Document openings (mode "first") put position into the data themselves.
    mode = data.attrs.get("mode") if data is not None else None
    if free and mode != "chunks":
        note = (
            f"position-free runs {free} are not controls here: the prompts are not chunks at "
            f"random offsets (mode {mode!r}), so their content depends on position"
        )
        return [], note, mode
    return free, "", mode


def _windowed(opened: Mapping[str, xr.Dataset]) -> bool:
    """Whether any layer's window masks something at the stores' length (their ``layer_kind``
    coordinate; a store without it: no)."""
    for ds in opened.values():
        if "layer_kind" in ds.coords:
            T = int(ds.attrs.get("seq_len", ds.sizes.get("query", 0)))
            return any(masks_anything(k, T) for k in ds["layer_kind"].values.tolist())
    return False
