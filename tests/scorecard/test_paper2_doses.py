"""The dose series' rows of the scorecard (causalpos.scorecard.paper2_doses): one per series in
the controls section, recovered / not recovered by causalpos.verdicts.dose_series on the table's
intervals and margin, not run where the series is not judged or there is no table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causalpos.scorecard.paper2_doses import dose_series_rows
from causalpos.scorecard.rows import load_targets

T = load_targets()["targets"]


def _table(zero=(0.0003, -0.0012, 0.0022), steps_lo=(0.0016, 0.0065, 0.022), judged=True):
    rows = []
    for k, (dose, lo) in enumerate(zip((0.0, 0.175, 0.35, 0.7), (np.nan, *steps_lo), strict=True)):
        est = zero if k == 0 else (0.002 * 4**k, 0.0015 * 4**k, 0.0025 * 4**k)
        rows.append(
            {
                "model": "smollm2-135m",
                "dataset": "kjv-chunks128-bos",
                "series": "identity_rope+bidirectional",
                "variant": "identity_rope+bidirectional"
                if k == 0
                else f"identity_rope+plant_stream{k}+bidirectional",
                "dose": dose,
                "layer": 2,
                "target": "logit",
                "leakage": est[0],
                "leakage_lo": est[1],
                "leakage_hi": est[2],
                "step": np.nan if k == 0 else lo + 0.0005,
                "step_lo": lo,
                "step_hi": np.nan if k == 0 else lo + 0.001,
                "margin": 0.003,
                "dose0_is_control": int(judged),
                "note": "" if judged else "dose 0 is not a negative control here",
            }
        )
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # any row order


def test_a_series_is_recovered_where_dose_0_reads_0_and_every_step_rises():
    (row,) = dose_series_rows(_table(), T)
    assert row.verdict == "recovered" and row.paper == "paper 2"
    assert "kjv-chunks128-bos" in row.target and "layer 2" in row.target
    assert "dose 0: 0.0003 [-0.0012, 0.0022]" in row.measured and "dose 0 passed" in row.measured
    assert "+-0.003" in row.falsified_if and row.source.endswith("paper2_plant_doses.csv")


def test_a_series_is_not_recovered_when_dose_0_reads_position_or_a_step_is_flat():
    for table, why in (
        (_table(zero=(0.006, 0.004, 0.008)), "dose 0 reads position"),
        (_table(zero=(0.001, -0.002, 0.004)), "dose 0 underpowered"),
        (_table(steps_lo=(0.0016, -0.0001, 0.022)), "dose 0 passed"),
        (_table(steps_lo=(0.0016, np.nan, 0.022)), "dose 0 passed"),
    ):
        (row,) = dose_series_rows(table, T)
        assert row.verdict == "not recovered", why
        assert why in row.measured


def test_not_run_without_a_judged_series():
    (row,) = dose_series_rows(_table(judged=False), T)
    assert row.verdict == "not run" and "not a negative control" in row.note
    assert "dose 0.7: " in row.measured  # read, not judged: the numbers stay
    (row,) = dose_series_rows(None, T)
    assert row.verdict == "not run" and "leakage.plant_stream" in row.note
