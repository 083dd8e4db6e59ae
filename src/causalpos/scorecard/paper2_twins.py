"""Paper 2's rows of a trained model beside its random-init / init twin on the same prompts:
claim 1's trained-minus-twin contrast (:func:`twin_contrast_rows`), a measurement (paper 2 claims
nothing about the untrained architecture; a difference of measured quantities is a test or a
measurement, never a check)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.rows import SOURCES, Row, fmt, fmt_ci, measured_row, text_column
from causalpos.verdicts import difference_ci

#: What a trained-minus-twin contrast of claim 1 says, by where its interval lies.
TWIN_DIRECTION = {
    "below": "the trained model's logit position is below its untrained architecture's",
    "above": "the trained model's logit position is above its untrained architecture's",
    "covers": "the interval covers 0: the trained model's logit position is not told from its "
    "untrained architecture's",
}


def twin_contrast_rows(sel: pd.DataFrame, landmarks: pd.Series | None, t: Mapping) -> list[Row]:
    """Claim 1 beside its random-init / init twin: the trained model's headline logit leakage
    minus its twin's on the same dataset (and landmark reading), one measured row per pair.
    The headline table keeps no replicates, so the two intervals are combined as independent
    samples (:func:`~causalpos.verdicts.difference_ci`); the twin ran on the same prompts, and
    for positively correlated estimates that overstates the width. A measurement, not a test:
    paper 2 claims nothing about the untrained architecture (a difference of measured
    quantities is never a check)."""
    src = SOURCES["headline"]
    lms = landmarks if landmarks is not None else pd.Series("", index=sel.index)
    twins = text_column(sel, "init_of")
    est = {
        (r.model, r.dataset, lm): (float(r.leakage), float(r.leakage_lo), float(r.leakage_hi))
        for r, lm in zip(sel.itertuples(), lms)
    }
    rows = []
    for r, twin, lm in zip(sel.itertuples(), twins, lms):
        trained = est.get((twin, r.dataset, lm)) if twin else None
        if trained is None:
            continue
        b = est[(r.model, r.dataset, lm)]
        d = difference_ci(trained, b)
        where = f"{twin} - {r.model}, {r.dataset}" + (f", landmark {lm}" if lm else "")
        ratio = b[0] / trained[0] if trained[0] else np.nan
        measured = (
            f"{fmt_ci(*d)}; {twin} {fmt_ci(*trained)}, {r.model} {fmt_ci(*b)} "
            f"(twin / trained x{fmt(ratio)})"
        )
        side = "below" if d[2] < 0 else "above" if d[1] > 0 else "covers"
        why = (
            f"{TWIN_DIRECTION[side]}; a measurement: paper 2 claims nothing about the untrained "
            "architecture. Same prompts, intervals combined as independent samples (the headline "
            "table keeps no paired replicates), which overstates the width"
        )
        target = f"{t['label']}, trained minus init twin ({where})"
        rows.append(measured_row(t, target, measured, src, why))
    return rows
