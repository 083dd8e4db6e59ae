"""``claim3_factors``: claim 3's factor effects within one model
(:mod:`causalpos.paper2.summary.factors`) as a flat table — per layer, per layer kind, over
every layer, and the slope over the sliding layers with the change it implies across them."""

from __future__ import annotations

import ast

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.models.layer_kinds import kinds_by_layer
from causalpos.paper2.summary.factors import FACTORS

#: The mapping of paper 2's components each reading names (paper2.md §3), "" where it names none.
MAPPINGS = {
    "total": "",
    "logit": "mechanism: residual stream (indirect + mask-free)",
    "direct": "mechanism: causal mask",
    "indirect": "",
    "mask_free": "ablation: residual stream",
}

#: What each factor's effect is, in words (the sign of its difference).
EFFECTS = {
    "window": "window kept minus removed (causal minus no_window)",
    "rope_base": "global base minus own base (global_base minus causal)",
}


def factors_frame(summary: xr.Dataset) -> pd.DataFrame:
    """One row per (factor, reading, window, level): ``level`` "layer" (``layer``,
    ``layer_kind``), "kind" (``layer_kind`` a kind, or "all"), or "slope" (``effect`` the slope
    per layer over ``sliding_layers``; ``change`` = slope × (last − first sliding layer), in the
    effect's unit). Empty without the block."""
    if "factor_layer" not in summary:
        return pd.DataFrame()
    runs = ast.literal_eval(summary.attrs.get("factor_runs", "{}"))
    sliding = [int(x) for x in np.atleast_1d(summary.attrs.get("factor_sliding_layers", []))]
    span = float(max(sliding) - min(sliding)) if len(sliding) >= 2 else np.nan
    kinds = kinds_by_layer(summary)
    rows = []
    for factor in summary["factor"].values.tolist():
        run, ring = runs.get(factor, [FACTORS[factor][0], None])
        for reading in summary["factor_reading"].values.tolist():
            for w in summary["window"].values.tolist():
                sel = dict(factor=factor, factor_reading=reading, window=w)
                base = {
                    "factor": factor,
                    "intervention": run,
                    "ring_twin": ring or "",
                    "effect_of": EFFECTS[factor],
                    "reading": reading,
                    "mapping": MAPPINGS[reading],
                    "window": w,
                }
                lay = summary["factor_layer"].sel(**sel)
                for ly in summary["layer"].values.tolist():
                    rows.append(base | _vals("layer", int(ly), kinds[int(ly)], lay.sel(layer=ly)))
                kin = summary["factor_kind"].sel(**sel)
                for lev in summary["factor_level"].values.tolist():
                    rows.append(base | _vals("kind", np.nan, lev, kin.sel(factor_level=lev)))
                slope = summary["factor_slope"].sel(**sel)
                row = base | _vals("slope", np.nan, "sliding layers", slope)
                row |= {f"change{k}": row[f"effect{k}"] * span for k in ("", "_lo", "_hi")}
                rows.append(row)
    out = pd.DataFrame(rows)
    out["sliding_layers"] = " ".join(str(x) for x in sliding)
    out["span"] = span
    out["window_masks"] = bool(int(summary.attrs.get("factor_window_masks", 0)))
    out["n_sequences"] = int(summary.attrs.get("n_sequences", 0))
    return out


def _vals(level: str, layer, kind: str, da: xr.DataArray) -> dict:
    """A row's level and its effect with its interval, read from ``da`` (stat)."""
    est, lo, hi = (float(da.sel(stat=s)) for s in ("estimate", "lo", "hi"))
    return dict(level=level, layer=layer, layer_kind=kind, effect=est, effect_lo=lo, effect_hi=hi)
