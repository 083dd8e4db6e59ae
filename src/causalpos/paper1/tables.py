"""Paper 1 tables: the non-relativeness index of simulations and of language models per layer,
and the trained models against their untrained twins (:mod:`causalpos.stages.stats`,
:mod:`causalpos.stages.compare` write them)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.models.layer_kinds import layer_kinds
from causalpos.paper1.compare import group_maps
from causalpos.paper1.diagonal import IndexCI, index_ci, key0_column, normalized_index_cells
from causalpos.paper1.nonrelative import (
    Interval,
    band_ci,
    interval_columns,
    key0_share_interval,
    minus_first_layer,
    paired,
    share_intervals,
)


def llm_index_table(
    stores: dict[tuple[str, str, str], xr.Dataset],
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    first_keys: int = 4,
    twins: Mapping[str, str] | None = None,
):
    """Per (model, dataset, variant, layer) non-relativeness statistics of the head-averaged map.

    ``stores``: (model, dataset, variant) -> merged score store with ``score_group_mean``
    (group, layer, query, key), the raw head-averaged maps of groups of sequences.
    ``twins``: model -> its random-init twin (same architecture, tokenizer, prompts), both among
    the stores; the model's rows then carry ``share_minus_twin*`` and ``share_pooled_minus_twin*``.

    Key 0 is out of the index, the share and the band (paper 1 §7, ``key0=False``) and measured
    beside them: ``key0*`` (the index of the key-0 column), ``key0_share*`` and the index with key
    0 kept, as the paper's Fig. 5 normalizes (``index_with_key0*``, ``noise_floor_with_key0``);
    ``band_with_sink*``: the first-keys band (keys 1..``first_keys``) with key 0 kept. Indices are
    :func:`index_ci`'s (bootstrap over groups), shares and bands jackknifed
    (:mod:`causalpos.paper1.nonrelative`); ``share_minus_l1*`` is NaN on layer 1, ``*_pooled*``
    the same on every row of the model.
    """
    twins = dict(twins or {})
    shares, stats = {}, {}
    for key, ds in stores.items():  # one store's maps in memory at a time, normalized twice
        g = group_maps(ds, "/".join(key))
        boot = {"level": confidence, "n_boot": n_boot, "seed": seed}
        shares[key], stats[key] = _store_stats(g, boot, first_keys)
        stats[key] = (layer_kinds(ds, g.shape[1]), *stats[key])
        del g
    rows = []
    for key, ds in stores.items():
        model, dataset, variant = key
        kinds, ci, key0, ci_with_key0, band, band_sink = stats[key]
        sh, pooled = shares[key]
        l1 = minus_first_layer(sh)
        twin = twins.get(model)
        tkey = (twin, dataset, variant)
        vs_twin = pooled_vs_twin = None
        if twin is not None and tkey in stores:
            _check_same_groups(ds, stores[tkey], "/".join(key), "/".join(tkey))
            vs_twin = paired(sh, shares[tkey][0])
            pooled_vs_twin = paired(pooled, shares[tkey][1])
        for layer, kind in enumerate(kinds):
            row = {
                "model": model,
                "dataset": dataset,
                "variant": variant,
                "layer": layer + 1,
                "layer_kind": kind,
                "index": float(ci.estimate[layer]),
                "index_debiased": float(ci.debiased[layer]),
                "noise_floor": float(ci.noise_floor[layer]),
                "index_over_floor": _over_floor(ci, layer),
                "ci_lo": float(ci.lo[layer]),
                "ci_hi": float(ci.hi[layer]),
                "se": float(ci.se[layer]),
                **_key0_columns(key0, ci_with_key0, layer),
                **interval_columns("share", sh, layer),
                **interval_columns("share_minus_l1", l1, layer, skip=layer == 0),
                **interval_columns("share_pooled", pooled),
                "band_keys": int(first_keys),
                **interval_columns("band", band, layer),
                **interval_columns("band_with_sink", band_sink, layer),
            }
            if vs_twin is not None:
                row["twin"] = twin
                row.update(interval_columns("share_minus_twin", vs_twin, layer))
                row.update(interval_columns("share_pooled_minus_twin", pooled_vs_twin))
            row["n_groups"] = int(ci.n_groups)
            row["n_sequences"] = int(ds.attrs.get("n_sequences", -1))
            rows.append(row)
    return pd.DataFrame(rows)


def _store_stats(g: np.ndarray, boot: dict, first_keys: int) -> tuple:
    """(shares, (index, key-0 size, index with key 0, band, band with key 0)) of one store's
    (group, layer, n, n) maps for :func:`llm_index_table`; ``boot``: ``index_ci``'s level,
    n_boot and seed. Two normalizations: key 0 out (the index, the share, the band, the key-0
    share) and key 0 kept (the paper's: the index with key 0, the band with the sink)."""
    level = boot["level"]
    vals = normalized_index_cells(g, key0=False)
    shares = share_intervals(g, level=level, index_values=vals, key0=False)  # (layer, pooled)
    ci = index_ci(g, index_values=vals, **boot)
    band = band_ci(g, first_keys, level=level, index_values=vals)  # sink out, as vals
    col = key0_column(g)
    key0 = (
        index_ci(g, index_values=col, **boot),
        key0_share_interval(g, level=level, key0_values=col, index_values=vals),
    )
    del vals, col
    with_key0 = normalized_index_cells(g)
    kept = index_ci(g, index_values=with_key0, **boot)
    band_kept = band_ci(g, first_keys, exclude_sink=False, level=level, index_values=with_key0)
    return shares, (ci, key0, kept, band, band_kept)


def _key0_columns(key0: tuple[IndexCI, Interval], with_key0: IndexCI, layer: int) -> dict:
    """The key-0 column's size and the index with key 0 kept, of one layer (llm_index_table)."""
    col, share = key0
    return {
        "key0": float(col.estimate[layer]),
        "key0_debiased": float(col.debiased[layer]),
        "key0_floor": float(col.noise_floor[layer]),
        "key0_lo": float(col.lo[layer]),
        "key0_hi": float(col.hi[layer]),
        **interval_columns("key0_share", share, layer),
        "index_with_key0": float(with_key0.estimate[layer]),
        "index_with_key0_debiased": float(with_key0.debiased[layer]),
        "noise_floor_with_key0": float(with_key0.noise_floor[layer]),
    }


def _over_floor(ci: IndexCI, k: int) -> float:
    """The index over its noise floor (≈ 1: no detectable non-relative signal)."""
    return float(ci.estimate[k] / ci.noise_floor[k]) if ci.noise_floor[k] > 0 else math.nan


def _check_same_groups(a: xr.Dataset, b: xr.Dataset, la: str, lb: str) -> None:
    """A paired contrast needs the two stores to hold the same groups of the same sequences."""
    na, nb = a.sizes.get("group"), b.sizes.get("group")
    same = na == nb and a.attrs.get("n_sequences") == b.attrs.get("n_sequences")
    if same and "group" in a.coords and "group" in b.coords:
        same = np.array_equal(a["group"].values, b["group"].values)
    if not same:
        raise ValueError(
            f"{la} and its twin {lb} do not hold the same groups of sequences ({na} vs {nb} groups); "
            "a twin must be extracted on the same dataset with the same extract.n_groups"
        )


#: The simulation settings each row of :func:`simulation_index_table` names, from the store's attrs.
_SIMULATION_ATTRS = ("alpha", "norm", "scaling", "rope", "causal", "residual")


def simulation_index_table(
    stores: Mapping[str, xr.Dataset], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Per-layer non-relativeness index of simulation stores, one row per (setting, layer).

    ``stores``: setting name → simulation dataset with ``score_group`` (group, layer, query,
    key). ``layer`` is numbered as in the paper (1 = first); ``ci_lo``, ``ci_hi``: :func:`index_ci`'s
    noise-corrected CI of the noise-free index at ``confidence``.
    """
    rows = []
    for name, ds in stores.items():
        if "score_group" not in ds:
            raise ValueError(
                f"simulation_index_table: store {name!r} has no 'score_group'; rerun the "
                f"simulation with n_groups >= 2"
            )
        gm = ds["score_group"].transpose("group", "layer", "query", "key").values
        ci = index_ci(gm, level=confidence, n_boot=n_boot, seed=seed)
        kinds = layer_kinds(ds)
        for k, layer in enumerate(ds["layer"].values):
            rows.append(
                {
                    "setting": name,
                    **{k: ds.attrs.get(k) for k in _SIMULATION_ATTRS},
                    "layer": int(layer) + 1,
                    "layer_kind": kinds[k],
                    "index": float(ci.estimate[k]),
                    "ci_lo": float(ci.lo[k]),
                    "ci_hi": float(ci.hi[k]),
                    "se": float(ci.se[k]),
                    "noise_floor": float(ci.noise_floor[k]),
                    "index_over_floor": _over_floor(ci, k),
                    "index_debiased": float(ci.debiased[k]),
                    "n_groups": ci.n_groups,
                    "n_samples": ds.attrs.get("n_samples"),
                }
            )
    return pd.DataFrame(rows)
