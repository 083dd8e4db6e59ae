"""The ``plant_doses`` table (causalpos.paper2.tables.doses): one row per run of a dose series
from the summary's numbers (the scorecard judges the series: causalpos.verdicts.dose_series on
the table's intervals and margin)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import xarray as xr

from causalpos import verdicts as V
from causalpos.paper2.tables.doses import plant_doses_frame
from causalpos.scorecard.controls import dose_verdicts, with_verdicts

TWIN = "identity_rope+bidirectional"
RUNS = [TWIN] + [f"identity_rope+plant_stream{k}+bidirectional" for k in (1, 2, 3)]


def _summary(zero=(0.0, -0.001, 0.001), steps_lo=(0.001, 0.002, 0.003), control=1.0):
    est = np.array([zero, (0.002, 0.001, 0.003), (0.01, 0.008, 0.012), (0.03, 0.028, 0.032)])
    steps = np.full((4, 3), np.nan)
    for k, lo in enumerate(steps_lo, 1):
        steps[k] = (lo + 0.001, lo, lo + 0.002)
    return xr.Dataset(
        {
            "dose_leakage": (("dose_run", "stat"), est),
            "dose_step": (("dose_run", "stat"), steps),
            "dose_control": (("dose_series",), [control]),
        },
        coords={
            "dose_run": RUNS,
            "dose_twin": ("dose_run", [TWIN] * 4),
            "dose_size": ("dose_run", [0.0, 0.2, 0.4, 0.8]),
            "dose_layer": ("dose_run", [2] * 4),
            "dose_series": [TWIN],
            "stat": ["estimate", "lo", "hi"],
        },
        attrs={"dose_margin": 0.003, "dose_target": "logit", "dose_window": "all"},
    )


def test_rows_carry_the_summarys_numbers_and_no_verdict():
    df = plant_doses_frame(_summary())
    assert list(df["variant"]) == RUNS and list(df["dose_index"]) == [0, 1, 2, 3]
    assert list(df["dose"]) == [0.0, 0.2, 0.4, 0.8] and set(df["layer"]) == {2}
    np.testing.assert_array_equal(df["leakage_hi"], [0.001, 0.003, 0.012, 0.032])
    assert np.isnan(df["step"][0]) and df["step_lo"][3] == 0.003
    assert set(df["margin"]) == {0.003} and set(df["dose0_is_control"]) == {1}
    # the verdicts are the scorecard's (causalpos.scorecard.controls), never the table's
    assert not {"dose0_control", "positive_control"} & set(df.columns)
    # dose 0 no negative control: the table says so, and the note says why
    free = plant_doses_frame(_summary(control=0.0))
    assert set(free["dose0_is_control"]) == {0} and "not a negative control" in free["note"][0]
    assert plant_doses_frame(xr.Dataset()).empty


def test_the_scorecard_judges_the_tables_numbers():
    """:func:`causalpos.scorecard.controls.with_verdicts` on the table: dose 0 by
    :func:`causalpos.verdicts.negative_control`, the series by
    :func:`causalpos.verdicts.dose_series`."""
    judged = with_verdicts("plant_doses", plant_doses_frame(_summary()))
    assert list(judged["dose0_control"]) == ["passed", "", "", ""]
    assert set(judged["positive_control"]) == {"recovered"}
    reads = with_verdicts("plant_doses", plant_doses_frame(_summary(zero=(0.01, 0.005, 0.015))))
    assert reads["dose0_control"][0] == "reads position"
    assert set(reads["positive_control"]) == {"not recovered"}
    flat = plant_doses_frame(_summary(steps_lo=(0.001, -0.0005, 0.003)))
    assert set(with_verdicts("plant_doses", flat)["positive_control"]) == {"not recovered"}
    free = with_verdicts("plant_doses", plant_doses_frame(_summary(control=0.0)))
    assert set(free["positive_control"]) == {"not run"}
    margin = 0.003
    for lows in itertools.product([0.001, 0.0, -0.001, np.nan], repeat=2):
        for zero in [(-0.001, 0.002), (0.004, 0.005), (-0.004, 0.0)]:
            rows = pd.DataFrame(
                {
                    "leakage_lo": [zero[0], 0, 0],
                    "leakage_hi": [zero[1], 0, 0],
                    "step_lo": [np.nan, *lows],
                    "step_hi": [np.nan, 0.01, 0.01],
                    "margin": margin,
                }
            )
            got = dose_verdicts(rows)
            steps = list(zip(lows, [0.01, 0.01], strict=True))
            assert got == (
                V.negative_control(zero, margin),
                V.dose_series(zero, steps, margin),
            ), (zero, lows, margin)
