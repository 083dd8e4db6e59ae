"""Stages ``aggregate_sim_stats`` and ``aggregate_llm_stats``: the non-relativeness index tables."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.io.store import open_dataset
from causalpos.paper1.diagonal import index_ci

log = logging.getLogger("causalpos.stages.stats")


def llm_index_table(
    stores: dict[tuple[str, str, str], xr.Dataset],
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
):
    """Per (model, dataset, variant, layer) non-relativeness index of the head-averaged map.

    ``stores``: (model, dataset, variant) -> merged score store with ``score_group_mean``
    (group, layer, query, key), the raw head-averaged maps of groups of sequences. Bootstrap over
    groups (:func:`causalpos.diagonal.index_ci`, which normalizes them).
    """
    import pandas as pd

    from causalpos.paper1.diagonal import index_ci

    rows = []
    for (model, dataset, variant), ds in stores.items():
        if "score_group_mean" not in ds:
            raise KeyError(
                f"score store of {model}/{dataset}/{variant} has no 'score_group_mean' "
                "(extract with the 'groups' reducer)"
            )
        g = np.asarray(
            ds["score_group_mean"].transpose("group", "layer", "query", "key").values,
            dtype=np.float64,
        )
        ci = index_ci(g, level=confidence, n_boot=n_boot, seed=seed)
        for layer in range(g.shape[1]):
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "variant": variant,
                    "layer": layer + 1,
                    "index": float(ci.estimate[layer]),
                    "index_debiased": float(ci.debiased[layer]),
                    "noise_floor": float(ci.noise_floor[layer]),
                    "index_over_floor": float(ci.estimate[layer] / ci.noise_floor[layer])
                    if ci.noise_floor[layer] > 0
                    else math.nan,
                    "ci_lo": float(ci.lo[layer]),
                    "ci_hi": float(ci.hi[layer]),
                    "se": float(ci.se[layer]),
                    "n_groups": int(ci.n_groups),
                    "n_sequences": int(ds.attrs.get("n_sequences", -1)),
                }
            )
    return pd.DataFrame(rows)


def simulation_index_table(
    stores: Mapping[str, xr.Dataset], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Per-layer non-relativeness index of simulation stores, one row per (setting, layer).

    ``stores``: mapping setting name → simulation dataset with ``score_group`` (group, layer,
    query, key) (:func:`causalpos.simulate.simulate`). Returns a pandas DataFrame with columns
    ``setting``, the setting's ``alpha``, ``norm``, ``scaling``, ``rope``, ``causal``,
    ``residual``, ``layer`` (numbered as in the paper: 1 = first layer), ``index`` (of the
    grand-mean map), ``ci_lo``, ``ci_hi`` (noise-corrected bootstrap over groups at ``confidence``,
    a CI for the noise-free index; :func:`index_ci`),
    ``se`` (bootstrap sd), ``noise_floor``, ``index_over_floor`` (≈ 1: no detectable
    non-relative signal), ``index_debiased``, ``n_groups``, ``n_samples``.
    """
    import pandas as pd

    rows = []
    for name, ds in stores.items():
        if "score_group" not in ds:
            raise ValueError(
                f"simulation_index_table: store {name!r} has no 'score_group'; rerun the "
                f"simulation with n_groups >= 2"
            )
        gm = ds["score_group"].transpose("group", "layer", "query", "key").values
        ci = index_ci(gm, level=confidence, n_boot=n_boot, seed=seed)
        a = ds.attrs
        for k, layer in enumerate(ds["layer"].values):
            rows.append(
                {
                    "setting": name,
                    "alpha": a.get("alpha"),
                    "norm": a.get("norm"),
                    "scaling": a.get("scaling"),
                    "rope": a.get("rope"),
                    "causal": a.get("causal"),
                    "residual": a.get("residual"),
                    "layer": int(layer) + 1,
                    "index": float(ci.estimate[k]),
                    "ci_lo": float(ci.lo[k]),
                    "ci_hi": float(ci.hi[k]),
                    "se": float(ci.se[k]),
                    "noise_floor": float(ci.noise_floor[k]),
                    "index_over_floor": (
                        float(ci.estimate[k] / ci.noise_floor[k])
                        if ci.noise_floor[k] > 0
                        else float("nan")
                    ),
                    "index_debiased": float(ci.debiased[k]),
                    "n_groups": ci.n_groups,
                    "n_samples": a.get("n_samples"),
                }
            )
    return pd.DataFrame(rows)


def aggregate_sim_stats(
    stores: Mapping[str, str], out, *, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Rule ``aggregate_sim_stats``: :func:`simulation_index_table` of the simulation stores
    (setting -> path), written as CSV to ``out``."""
    table = simulation_index_table(
        {name: open_dataset(p) for name, p in stores.items()},
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
    )
    table.to_csv(out, index=False)
    log.info("\n%s", table.to_string())
    return table


def aggregate_llm_stats(
    stores: Mapping[str, str], out, *, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Rule ``aggregate_llm_stats``: :func:`llm_index_table` of the normalized score stores
    (``"model/dataset/variant"`` -> path), written as CSV to ``out``."""
    opened = {tuple(label.split("/")): open_dataset(p) for label, p in stores.items()}
    table = llm_index_table(opened, confidence=confidence, n_boot=n_boot, seed=seed)
    table.to_csv(out, index=False)
    log.info("\n%s", table.to_string())
    return table
