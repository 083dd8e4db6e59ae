"""The ``plant_doses`` table: the positive control planted as a dose series in the residual
stream (:mod:`causalpos.paper2.summary.doses`), a row per run of each series (dose 0 first) with
its reading in the model's units, the paired step from the previous dose, the declared margin and
whether dose 0 is a negative control here; the scorecard judges the series
(:func:`causalpos.scorecard.controls.dose_verdicts`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.paper2.tables.headline import EXPECTED_MAP, ci_cells

#: What the reading is, in words (the ``units`` column).
UNITS = "N over the layers from the plant up / the causal run's pooled D (model's units)"

#: The ``note`` of a series read but not judged, and why.
NOT_JUDGED = (
    "dose 0 is not a negative control here (it is position-free only with identity RoPE or "
    "NoPE and no mask, and a control only on chunks at random offsets, with a causal run)"
)


def plant_doses_frame(summary: xr.Dataset) -> pd.DataFrame:
    """The ``plant_doses`` rows of one summary (empty without a dose series)."""
    if "dose_leakage" not in summary:
        return pd.DataFrame()
    margin = float(summary.attrs["dose_margin"])
    rows = []
    for i, run in enumerate(summary["dose_run"].values):
        rows.append(
            {
                "variant": str(run),
                "series": str(summary["dose_twin"].values[i]),
                "dose": float(summary["dose_size"].values[i]),
                "layer": int(summary["dose_layer"].values[i]),
                "target": str(summary.attrs["dose_target"]),
                "window": str(summary.attrs["dose_window"]),
                "reading": EXPECTED_MAP,
                "units": UNITS,
                **ci_cells("leakage", map(float, summary["dose_leakage"].values[i])),
                **ci_cells("step", map(float, summary["dose_step"].values[i])),
                "margin": margin,
            }
        )
    df = pd.DataFrame(rows)
    df.insert(3, "dose_index", df.groupby("series", sort=False).cumcount())
    control = summary["dose_control"]
    judged = {str(k): bool(float(control.sel(dose_series=k)) == 1) for k in set(df["series"])}
    df["dose0_is_control"] = df["series"].map(judged).astype(int)
    df["note"] = ["" if judged[k] else NOT_JUDGED for k in df["series"]]
    return df.replace({np.inf: np.nan})
