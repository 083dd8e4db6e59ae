"""The ``plant_doses`` table: the positive control planted as a dose series in the residual
stream (:mod:`causalpos.paper2.summary.doses`), one row per run of each series (dose 0 first),
its reading in the model's units, the paired step from the previous dose, and the series'
outcome: :func:`causalpos.verdicts.dose_series`, as the scorecard reads it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.paper2.tables.headline import EXPECTED_MAP
from causalpos.verdicts import dose_series, negative_control

#: What the reading is, in words (the ``units`` column).
UNITS = "N over the layers from the plant up / the causal run's pooled D (model's units)"

#: ``positive_control`` where the series is read but not judged, and why (the ``note`` column).
NOT_JUDGED = (
    "dose 0 is not a negative control here (it is position-free only with identity RoPE or "
    "NoPE and no mask, and a control only on chunks at random offsets, with a causal run)"
)


def dose_series_outcome(rows: pd.DataFrame, margin: float) -> tuple[str, str]:
    """(dose-0 outcome, series outcome) of one series' rows (dose 0 first; columns
    ``leakage_lo``, ``leakage_hi``, ``step_lo``, ``step_hi``) against the declared ``margin``:
    dose 0 by :func:`causalpos.verdicts.negative_control` on its 95 % interval (two one-sided
    tests at 2.5 % each: stricter than the controls' 5 %), the series by
    :func:`causalpos.verdicts.dose_series`."""
    zero_ci = (float(rows["leakage_lo"].iloc[0]), float(rows["leakage_hi"].iloc[0]))
    steps = list(zip(rows["step_lo"].iloc[1:], rows["step_hi"].iloc[1:], strict=True))
    return negative_control(zero_ci, margin), dose_series(zero_ci, steps, margin)


def plant_doses_frame(summary: xr.Dataset) -> pd.DataFrame:
    """The ``plant_doses`` rows of one summary (empty without a dose series)."""
    if "exp_dose" not in summary:
        return pd.DataFrame()
    margin = float(summary.attrs["exp_dose_margin"])
    rows = []
    for i, run in enumerate(summary["dose_run"].values):
        est, lo, hi = (float(x) for x in summary["exp_dose"].values[i])
        s, s_lo, s_hi = (float(x) for x in summary["exp_dose_step"].values[i])
        rows.append(
            {
                "variant": str(run),
                "series": str(summary["dose_twin"].values[i]),
                "dose": float(summary["dose_size"].values[i]),
                "layer": int(summary["dose_layer"].values[i]),
                "target": str(summary.attrs["exp_dose_target"]),
                "window": str(summary.attrs["exp_dose_window"]),
                "reading": EXPECTED_MAP,
                "units": UNITS,
                "leakage": est,
                "leakage_lo": lo,
                "leakage_hi": hi,
                "step": s,
                "step_lo": s_lo,
                "step_hi": s_hi,
                "margin": margin,
            }
        )
    df = pd.DataFrame(rows)
    df.insert(3, "dose_index", df.groupby("series", sort=False).cumcount())
    control = summary["exp_dose_control"]
    outcome, verdict, note = [], [], []
    for series, g in df.groupby("series", sort=False):
        judged = bool(float(control.sel(dose_series=series)) == 1)
        zero, v = dose_series_outcome(g, margin)
        outcome += [zero] + [""] * (len(g) - 1)
        verdict += [v if judged else "not run"] * len(g)
        note += ["" if judged else NOT_JUDGED] * len(g)
    df["dose0_control"] = outcome
    df["positive_control"] = verdict
    df["note"] = note
    return df.replace({np.inf: np.nan})
