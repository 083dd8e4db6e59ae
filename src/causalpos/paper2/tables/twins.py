"""Claim 1 beside its random-init / init twin (:func:`twin_contrast_frame`): the trained model's
headline logit leakage minus its twin's on the same dataset; where the two do not pair, the
scorecard combines the two headline intervals as independent samples."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.paper2 import inference as inf
from causalpos.paper2.labels import HEADLINE_BOOT_TARGET
from causalpos.paper2.tables.headline import EXPECTED_MAP

#: The run whose headline the contrast reads (claim 1's: the causal run).
RUN = "causal"

#: ``pairing`` of a row whose replicates pair, and of one whose replicates do not.
PAIRED = "paired: the same resampled prompts (counts_digest {digest})"
NO_REPLICATES = (
    "independent: {which} keeps no replicates of the headline leakage (leakage_model_boot; rerun "
    "rule leakage)"
)
OTHER_PROMPTS = (
    "independent: the two summaries resampled different prompts (counts_digest {a} vs {b})"
)

COLUMNS = ["model", "dataset", "twin", "window", "target", "reading", "leakage", "leakage_twin"]
COLUMNS += ["difference", "difference_lo", "difference_hi", "paired", "pairing"]


def twin_contrast_frame(summaries: Mapping[tuple[str, str], xr.Dataset]) -> pd.DataFrame:
    """A row per (trained model, its twin, dataset) whose summaries both hold the headline
    reading: the causal run's headline leakage of :data:`HEADLINE_BOOT_TARGET` on the first
    window, trained minus twin, with the percentile interval of the replicates' differences at
    the summaries' level where they pair (``paired`` True, ``pairing`` :data:`PAIRED`); NaN
    bounds and ``pairing`` saying why where they do not (:data:`NO_REPLICATES`,
    :data:`OTHER_PROMPTS`)."""
    rows = []
    for (twin, dataset), st in summaries.items():
        model = str(st.attrs.get("init_of", ""))
        sm = summaries.get((model, dataset)) if model else None
        if sm is None or not all(_has_headline(s) for s in (sm, st)):
            continue
        window = str(sm["leakage_model"]["window"].values[0])
        sel = dict(variant=RUN, window=window, target=HEADLINE_BOOT_TARGET, stat="estimate")
        if window not in st["window"].values:
            continue
        a, b = float(sm["leakage_model"].sel(**sel)), float(st["leakage_model"].sel(**sel))
        lo = hi = np.nan
        paired = False
        da, db = sm.attrs.get("counts_digest"), st.attrs.get("counts_digest")
        missing = [n for n, s in ((model, sm), (twin, st)) if "leakage_model_boot" not in s]
        if missing:
            pairing = NO_REPLICATES.format(which=" and ".join(missing))
        elif da is None or da != db:
            pairing = OTHER_PROMPTS.format(a=da, b=db)
        else:
            d = sm["leakage_model_boot"].sel(variant=RUN).values.astype(np.float64)
            d = d - st["leakage_model_boot"].sel(variant=RUN).values
            lo, hi = inf.bounds(d, float(sm.attrs.get("level", 0.95)), skip_nan=True)
            pairing = PAIRED.format(digest=da)
            paired = True
        labels = (model, dataset, twin, window, HEADLINE_BOOT_TARGET, EXPECTED_MAP)
        rows.append(labels + (a, b, a - b, float(lo), float(hi), paired, pairing))  # COLUMNS
    return pd.DataFrame(rows, columns=COLUMNS)


def _has_headline(s: xr.Dataset) -> bool:
    """Whether a summary holds the causal run's headline reading."""
    return "leakage_model" in s and RUN in s["leakage_model"]["variant"].values
