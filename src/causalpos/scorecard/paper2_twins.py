"""Claim 1 of paper 2 beside a trained model's random-init / init twin on the same prompts: the
trained-minus-twin contrast, paired where both summaries resampled the same prompts. A
measurement: paper 2 claims nothing about the untrained architecture."""

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


#: Why a contrast's intervals are combined as independent samples where the table has no row.
NO_TABLE = "no paired contrast of the two on the twin table (paper2_twin_contrast.csv)"


def claim1_twin_rows(
    head: pd.DataFrame | None, twins: pd.DataFrame | None, T: Mapping
) -> list[Row]:
    """Claim 1's trained-minus-twin contrasts (:func:`twin_contrast_rows`) on the headline
    table ``head``'s rows claim 1 reads (each (model, dataset)'s first window, target and
    variant ``claim1_logit``'s), one per landmark reading where it holds several; none where
    ``head`` is None (claim 1's row says why)."""
    t = T["claim1_logit"]
    if head is None:
        return []
    first = head.groupby(["model", "dataset"], sort=False)["window"].transform("first")
    head = head[(head["window"] == first) & (head["target"] == t["target"])]
    sel = head[head["variant"] == t["variant"]]
    landmarks = text_column(head, "landmark")
    several = landmarks.nunique() > 1
    return twin_contrast_rows(sel, landmarks[sel.index] if several else None, t, twins)


def twin_contrast_rows(
    sel: pd.DataFrame, landmarks: pd.Series | None, t: Mapping, twins: pd.DataFrame | None = None
) -> list[Row]:
    """The trained model's headline logit leakage minus its twin's on the same dataset (and
    landmark reading), one measured row per pair: paired where the twin table ``twins`` holds
    the two on the same resampled prompts (key 0 modelled), else the intervals combined as
    independent samples (which overstates the width), the note saying why they did not pair."""
    src = SOURCES["headline"]
    lms = landmarks if landmarks is not None else pd.Series("", index=sel.index)
    paired = _paired(twins)
    est = {
        (r.model, r.dataset, lm): (float(r.leakage), float(r.leakage_lo), float(r.leakage_hi))
        for r, lm in zip(sel.itertuples(), lms)
    }
    rows = []
    for r, twin, lm in zip(sel.itertuples(), text_column(sel, "init_of"), lms):
        trained = est.get((twin, r.dataset, lm)) if twin else None
        if trained is None:
            continue
        b = est[(r.model, r.dataset, lm)]
        pair = paired.get((twin, r.model, r.dataset)) if lm in ("", "modelled") else None
        if pair is not None and bool(pair.paired):
            d = (float(pair.difference), float(pair.difference_lo), float(pair.difference_hi))
            how = f"same prompts, {pair.pairing}: the replicates' differences"
        else:
            d = difference_ci(trained, b)
            why = str(pair.pairing) if pair is not None else NO_TABLE
            if lm not in ("", "modelled"):
                why = "the paired replicates are of the headline reading (key 0 modelled)"
            how = (
                "same prompts, intervals combined as independent samples, which overstates the "
                f"width ({why})"
            )
        where = f"{twin} - {r.model}, {r.dataset}" + (f", landmark {lm}" if lm else "")
        ratio = b[0] / trained[0] if trained[0] else np.nan
        measured = (
            f"{fmt_ci(*d)}; {twin} {fmt_ci(*trained)}, {r.model} {fmt_ci(*b)} "
            f"(twin / trained x{fmt(ratio)})"
        )
        side = "below" if d[2] < 0 else "above" if d[1] > 0 else "covers"
        why = (
            f"{TWIN_DIRECTION[side]}; a measurement: paper 2 claims nothing about the untrained "
            f"architecture. {how[0].upper()}{how[1:]}"
        )
        target = f"{t['label']}, trained minus init twin ({where})"
        rows.append(measured_row(t, target, measured, src, why))
    return rows


def _paired(twins: pd.DataFrame | None) -> dict[tuple[str, str, str], object]:
    """The twin table's rows by (trained model, twin, dataset)."""
    if twins is None or twins.empty:
        return {}
    return {(r.model, r.twin, r.dataset): r for r in twins.itertuples()}
