"""Paper 1 §3's amplification by learned parameters (Kim et al., 2025): the models trained here
against their init twins (train_comparison.csv: the index in logit units, measured, and the
scale-free share, judged) and the pretrained models against their random-init twins (llm_index.csv).

Each ``*_rows`` function takes its table (None when absent: its rows read "not run") and the
targets, and returns its rows; :mod:`causalpos.scorecard.card` says which table each one reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.paper1 import paper1_runs
from causalpos.scorecard.rows import (
    MEASURED,
    SOURCES,
    Row,
    field_text,
    fmt,
    fmt_ci,
    measured_row,
    not_run,
    target_row,
)
from causalpos.verdicts import (
    positive,
)


def trained_rows(cmp: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Paper 1 §3's "learned parameters amplify the causal-mask pattern", on the models trained
    here, in logit units: layer-mean index of each trained variant minus that of its init twin
    (paired CI), measured. An init twin's logits are ≈ 0, so the difference is positive
    whenever training grows the logit scale: no plausible input makes it differ. The test is
    the scale-free share (:func:`trained_share_rows`)."""
    src = SOURCES["train_comparison"]
    t = T["trained_vs_init"]
    if cmp is None:
        return [not_run(t, t["label"], src, "the config trains no models with init twins")]
    rows = []
    for r in cmp.itertuples():
        lo, hi = r.minus_init_lo, r.minus_init_hi
        amp = getattr(r, "amplification", math.nan)
        measured = f"{fmt_ci(r.minus_init, lo, hi)} (logit units)" + (
            f"; ratio x{fmt(amp)} [{fmt(r.amplification_lo)}, {fmt(r.amplification_hi)}]"
            if amp is not None and np.isfinite(amp)
            else ""
        )
        rule = positive((lo, hi), float(t["threshold"]))
        rows.append(
            target_row(
                t,
                f"{t['label']} (trained-{r.variant} vs init)",
                measured,
                MEASURED,
                src,
                note=f"{field_text(t, 'note')}; its rule says {rule}",
            )
        )
    return rows


def trained_share_rows(cmp: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """§3 amplification on the scale-free share: trained variant minus its init twin."""
    src = SOURCES["train_comparison"]
    t = T["trained_vs_init_share"]
    if cmp is None:
        why = (
            "the config trains no models with init twins, or train_comparison.csv predates the "
            "share columns (rerun compare_trained)"
        )
        return [not_run(t, t["label"], src, why)]
    rows = []
    for r in cmp.itertuples():
        lo, hi = r.share_pooled_minus_init_lo, r.share_pooled_minus_init_hi
        measured = f"{fmt_ci(r.share_pooled_minus_init, lo, hi)} (share of variance, pooled layers)"
        if "share_pooled" in cmp and "init_share_pooled" in cmp:
            measured += (
                f"; trained {fmt_ci(r.share_pooled, r.share_pooled_lo, r.share_pooled_hi)}, init "
                f"{fmt_ci(r.init_share_pooled, r.init_share_pooled_lo, r.init_share_pooled_hi)}"
            )
        target = f"{t['label']} (trained-{r.variant} vs init)"
        if "nope" not in str(r.variant):
            # with rotary position, training also builds a relative pattern: the target itself
            # expects the share to fall there, so a fall cannot falsify the claim
            rows.append(measured_row(t, target, measured, src, field_text(t, "note_rope")))
            continue
        rows.append(
            target_row(
                t,
                target,
                measured,
                positive((lo, hi), float(t["threshold"])),
                src,
                note=field_text(t, "note"),
            )
        )
    return rows


def llm_twin_share_rows(llm: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """§3 amplification on the scale-free share: a pretrained model minus its random-init twin."""
    src = SOURCES["llm_index"]
    t = T["llm_vs_random_share"]
    cols = ("share_pooled", "share_pooled_minus_twin", "share_pooled_minus_twin_lo")
    if llm is None or "twin" not in llm or not set(cols) <= set(llm.columns):
        why = (
            "no paper1_llm model has its random-init twin among the paper1_llm models (a "
            "random_init model `like:` it, on the same datasets), or llm_index.csv predates the "
            "twin columns (rerun aggregate_llm_stats)"
        )
        return [not_run(t, t["label"], src, why)]
    rows = []
    for model, dataset, g in paper1_runs(llm[llm["twin"].notna()], t):
        r = g.iloc[0]
        lo, hi = r["share_pooled_minus_twin_lo"], r["share_pooled_minus_twin_hi"]
        twin = llm[(llm["model"] == r["twin"]) & (llm["dataset"] == dataset)]
        if "variant" in llm:
            twin = twin[twin["variant"] == t["variant"]]
        measured = (
            f"{fmt_ci(r['share_pooled_minus_twin'], lo, hi)} (share of variance, pooled layers"
            + (", key 0 out)" if "key0" in llm else ", key 0 in)")
        )
        if len(twin):
            tw = twin.iloc[0]
            measured += (
                f"; {model} {fmt_ci(r['share_pooled'], r['share_pooled_lo'], r['share_pooled_hi'])}, "
                f"{r['twin']} {fmt_ci(tw['share_pooled'], tw['share_pooled_lo'], tw['share_pooled_hi'])}"
            )
        rows.append(
            target_row(
                t,
                f"{t['label']} ({model} vs {r['twin']}, {dataset})",
                measured,
                positive((lo, hi), float(t["threshold"])),
                src,
                note=field_text(t, "note"),
            )
        )
    return rows
