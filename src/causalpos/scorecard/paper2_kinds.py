"""Paper 2's rows per layer kind (a model whose layers mask differently: sliding-window and global
layers, e.g. Gemma 3): claim 2's residual-stream component on each kind's layers, and claim 3
within one model — the sliding-window layers' residual-stream component against the global
layers', the same weights and prompts (paired replicates). A kind whose window masks nothing at
the run's length is *not applicable* there ("window ≥ T": its layers see what global ones see).

Both are judged against the materiality thresholds of the config (``leakage.materiality``); an
inconclusive row says how many prompts would make it conclusive (:func:`prompts_needed`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.rows import (
    NOT_APPLICABLE,
    SOURCES,
    Row,
    fmt_ci,
    measured_row,
    not_run,
    ring_missing,
    target_row,
    text_column,
)
from causalpos.verdicts import INCONCLUSIVE, positive

#: What the sliding-minus-global rows cannot separate (claim 3's factor rows do).
OBSERVATIONAL = (
    "observational: sliding and global layers differ in the window and also in the RoPE base, "
    "depth and role (each factor alone: the claim 3 window / RoPE base rows)"
)

#: z of a two-sided 95 % interval and of 80 % power: the sample that would resolve an effect of
#: the estimate's size against the threshold (:func:`prompts_needed`).
Z_INTERVAL, Z_POWER = 1.959964, 0.841621


def prompts_needed(est: float, lo: float, hi: float, threshold: float, n: int) -> int | None:
    """Prompts a reading needs for its 95 % interval to clear ``threshold`` with 80 % power, if
    its estimate held: n · ((z₀.₉₇₅ + z₀.₈) · SE / |est − threshold|)², SE from the interval's
    half-width (SE ∝ 1/√n); None without a finite estimate, interval and n."""
    if not (np.isfinite([est, lo, hi, threshold]).all() and n and est != threshold):
        return None
    se = (hi - lo) / (2 * Z_INTERVAL)
    return int(np.ceil(n * ((Z_INTERVAL + Z_POWER) * se / abs(est - threshold)) ** 2))


def power_note(verdict: str, vals, threshold: float, n: int) -> str:
    if verdict != INCONCLUSIVE:
        return ""
    need = prompts_needed(*vals, threshold, n)
    if need is None:
        return ""
    return f"about {need} prompts would resolve it at 80 % power if the estimate held ({n} here)"


def _rows_of(bykind: pd.DataFrame) -> pd.DataFrame:
    """The headline decomposition's per-kind rows (condition rope, key 0 modelled, the first
    window) of models with more than one kind."""
    d = bykind[(bykind["condition"] == "rope") & (text_column(bykind, "landmark") == "modelled")]
    first = d.groupby(["model", "dataset"], sort=False)["window"].transform("first")
    d = d[d["window"] == first]
    kinds = d[~d["layer_kind"].str.endswith(" minus global")]
    several = kinds.groupby(["model", "dataset"])["layer_kind"].transform("nunique") > 1
    keep = kinds[several][["model", "dataset"]].drop_duplicates()
    return d.merge(keep, on=["model", "dataset"])


def claim2_kind_rows(bykind: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 2's residual-stream component on each layer kind's layers (the ring's logits over
    the causal run's expected log-attention variance, the kind's layers pooled) against the
    materiality threshold; random-init twins are measured."""
    t = T["claim2_kinds"]
    src = SOURCES["decomposition_components_by_kind"]
    if bykind is None or bykind.empty:
        why = "no model with sliding-window and global layers decomposed on the ring"
        return [not_run(t, t["label"], src, why)]
    d = _rows_of(bykind)
    d = d[~d["layer_kind"].str.endswith(" minus global")]
    rows = []
    thr = float(t["threshold"])
    for r, twin, n in zip(d.itertuples(), text_column(d, "init_of"), _n_prompts(d)):
        vals = (r.residual_stream, r.residual_stream_lo, r.residual_stream_hi)
        n_layers = int(r.n_layers) if pd.notna(r.n_layers) else "?"
        label = f"{t['label']} ({r.model}, {r.dataset}, {r.layer_kind}: {n_layers} layers)"
        measured = (
            f"residual stream {fmt_ci(*vals)}; total {fmt_ci(r.total, r.total_lo, r.total_hi)}"
        )
        if ring_missing(r):
            rows.append(not_run(t, label, src, ring_missing(r)))
            continue
        if twin:
            rows.append(measured_row(t, label, measured, src, "a random-init twin: the baseline"))
            continue
        verdict = positive(vals[1:], thr)
        note = power_note(verdict, vals, thr, n)
        rows.append(target_row(t, label, measured, verdict, src, note=note))
    return rows or [not_run(t, t["label"], src, "no model with several layer kinds")]


def claim3_kind_rows(bykind: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 3 within one model: the sliding-window layers' residual-stream component minus the
    global layers' (paired: the same weights and prompts) above the materiality threshold;
    *not applicable* where the window masks nothing at the run's length."""
    t = T["claim3_kinds"]
    src = SOURCES["decomposition_components_by_kind"]
    if bykind is None or bykind.empty:
        why = "no model with sliding-window and global layers decomposed on the ring"
        return [not_run(t, t["label"], src, why)]
    d = _rows_of(bykind)
    d = d[d["layer_kind"].str.endswith(" minus global")]
    rows = []
    thr = float(t["threshold"])
    for r, twin, n in zip(d.itertuples(), text_column(d, "init_of"), _n_prompts(d)):
        kind = r.layer_kind.removesuffix(" minus global")
        label = f"{t['label']} ({r.model}, {r.dataset}, {kind} vs global)"
        vals = (r.residual_stream, r.residual_stream_lo, r.residual_stream_hi)
        measured = f"{kind} minus global {fmt_ci(*vals)} (residual-stream component)"
        if not bool(r.window_masks):
            why = "not applicable: window ≥ T (the sliding layers see what global ones see)"
            rows.append(target_row(t, label, measured, NOT_APPLICABLE, src, note=why))
            continue
        if ring_missing(r):
            rows.append(not_run(t, label, src, ring_missing(r)))
            continue
        if twin:
            rows.append(measured_row(t, label, measured, src, "a random-init twin: the baseline"))
            continue
        verdict = positive(vals[1:], thr)
        note = "; ".join(x for x in (OBSERVATIONAL, power_note(verdict, vals, thr, n)) if x)
        rows.append(target_row(t, label, measured, verdict, src, note=note))
    return rows or [not_run(t, t["label"], src, "no model with several layer kinds")]


def _n_prompts(d: pd.DataFrame) -> list[int]:
    """Each row's number of prompts (the tables' ``n_sequences`` column; 0 where absent)."""
    if "n_sequences" not in d:
        return [0] * len(d)
    return [int(x) if np.isfinite(x) else 0 for x in d["n_sequences"].astype(float)]
