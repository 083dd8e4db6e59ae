"""Paper 1 §3's amplification by learned parameters (Kim et al., 2025) on the pretrained models
against their random-init twins (llm_index.csv). The models trained here against their init
twins (train_comparison.csv) are declared targets (``trained_vs_init``, ``trained_vs_init_share``
in ``causalpos/targets.yaml``, judged by :mod:`causalpos.scorecard.engine`).

Each ``*_rows`` function takes its table (None when absent: its rows read "not run") and the
targets, and returns its rows; :mod:`causalpos.scorecard.card` says which table each one reads.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from causalpos.scorecard.paper1 import paper1_runs
from causalpos.scorecard.rows import (
    SOURCES,
    Row,
    field_text,
    fmt_ci,
    not_run,
    target_row,
)
from causalpos.verdicts import (
    positive,
)


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
