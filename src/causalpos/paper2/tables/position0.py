"""Paper 2's position-0 tables: the per-condition trajectory and the probes' summary row of one
position-0 store (:func:`position0_frames`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.models.layer_kinds import GLOBAL, LAYER_KIND, block_kinds, with_layer_kind
from causalpos.paper2 import inference as inf


def position0_frames(p0: xr.Dataset, kinds=None) -> tuple[pd.DataFrame, dict]:
    """(per condition and layer frame, probe summary row) of a position-0 store. ``kinds``: the
    kind of each row of the trajectory (``embedding``, then each block's attention layer;
    default every block global), the frame's ``layer_kind`` column."""
    # Sorted: a store's variables come back in the order zarr lists its directory, which the
    # filesystem decides (two runs of the same code gave the columns in different orders).
    per_layer = sorted(v for v in p0.data_vars if set(p0[v].dims) <= {"condition", "layer"})
    df = p0[per_layer].drop_vars(LAYER_KIND, errors="ignore").to_dataframe().reset_index()
    if kinds is None:
        kinds = block_kinds([GLOBAL] * (int(p0.sizes["layer"]) - 1))
    df = with_layer_kind(df, list(kinds))
    # whether token 0 is the same in every prompt: claim 7 (std exactly 0) presupposes it
    fixed = int(p0.attrs["token0_fixed"]) if "token0_fixed" in p0.attrs else np.nan
    df["token0_fixed"] = fixed
    n_prompts = int(p0.attrs.get("probe_n_prompts", 0))
    probe = {
        "probe_labels": p0.attrs.get("probe_labels", ""),
        "probe_n_prompts": n_prompts,
        "probe_n_classes": p0.attrs.get("probe_n_classes", 0),
        "probe_n_folds": p0.attrs.get("n_folds", np.nan),
        "probe_n_permutations": p0.attrs.get("n_perm", np.nan),
        # why a probe was refused or which classes were dropped (fewer prompts than folds)
        "probe_note": str(p0.attrs.get("probe_note", "")),
        "token0_fixed": fixed,
    }
    cond = p0.attrs.get("probe_condition", "causal")
    if "probe_accuracy" in p0:
        acc = p0["probe_accuracy"].sel(condition=cond)
        if np.isfinite(acc.values).any():
            best = int(np.nanargmax(acc.values))
            for k in ("accuracy", "chance", "null_mean", "p_value"):
                v = p0[f"probe_{k}"].sel(condition=cond).values
                probe[f"best_layer_{k}"] = float(v[best])
                # layer 0 = the embedding of token 0: what token 0 alone tells about the label
                probe[f"embedding_{k}"] = float(v[0])
            probe["best_layer"] = int(acc["layer"].values[best])
            for pre in ("best_layer", "embedding"):
                lo, hi = inf.wilson(probe[f"{pre}_accuracy"], n_prompts)
                probe[f"{pre}_accuracy_lo"], probe[f"{pre}_accuracy_hi"] = lo, hi
            probe["min_p_value"] = float(np.nanmin(p0["probe_p_value"].sel(condition=cond).values))
    probe["n_sink_heads"] = p0.attrs.get("n_sink_heads", 0)
    for k in ("accuracy", "chance", "null_mean", "p_value"):
        probe[f"sink_probe_{k}"] = p0.attrs.get(f"sink_probe_{k}", np.nan)
    # Wilson interval over the cross-validated predictions (each prompt predicted once)
    probe["sink_probe_accuracy_lo"], probe["sink_probe_accuracy_hi"] = inf.wilson(
        probe["sink_probe_accuracy"], n_prompts
    )
    probe["sink_probe_note"] = str(p0.attrs.get("sink_probe_note", ""))
    return df, probe
