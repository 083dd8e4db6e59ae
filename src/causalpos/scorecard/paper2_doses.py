"""Paper 2's positive control that propagates: one controls row per dose series of the
``plant_doses`` table (:func:`causalpos.scorecard.controls.dose_verdicts`), ``not run`` where
dose 0 is not a negative control (the table's ``dose0_is_control``)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from causalpos.scorecard.controls import dose_verdicts
from causalpos.scorecard.rows import NOT_RUN, SOURCES, Row, fill, fmt, fmt_ci, not_run, target_row


def dose_series_rows(doses: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """The dose series' rows (``doses``: the ``plant_doses`` table, None where absent)."""
    src = SOURCES["plant_doses"]
    t = T["control_dose_series"]
    if doses is None:
        why = (
            "no dose series (identity_rope+plant_stream<k>+bidirectional beside "
            "identity_rope+bidirectional and causal in a leakage experiment, leakage.plant_stream)"
        )
        return [not_run(t, t["label"], src, why)]
    rows = []
    for (model, dataset, series), g in doses.groupby(["model", "dataset", "series"], sort=False):
        g = g.sort_values("dose")
        margin = float(g["margin"].iloc[0])
        zero, verdict = dose_verdicts(g)
        label = f"{t['label']} ({model}, {dataset}, {series}, layer {int(g['layer'].iloc[0])})"
        readings = "; ".join(
            f"dose {fmt(r.dose)}: {fmt_ci(r.leakage, r.leakage_lo, r.leakage_hi)}"
            + ("" if r.dose == 0 else f", step {fmt_ci(r.step, r.step_lo, r.step_hi)}")
            for r in g.itertuples()
        )
        measured = f"{readings} (model's units, {g['target'].iloc[0]}); dose 0 {zero}"
        falsified = fill(t["falsified_if"], t, margin=fmt(margin))
        note = str(g["note"].iloc[0]) if "note" in g else ""
        if g["dose0_is_control"].iloc[0] != 1:  # read, not judged: the numbers stay
            rows.append(target_row(t, label, measured, NOT_RUN, src, note=note, falsified_if=falsified))  # fmt: skip
            continue
        pv = f"0 at dose 0 (within +-{fmt(margin)}), rising with the dose"
        kw = dict(falsified_if=falsified, paper_value=pv)
        rows.append(target_row(t, label, measured, verdict, src, **kw))
    return rows
