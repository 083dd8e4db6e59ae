"""claim 3 by intervention within one model (table ``claim3_factors``,
:mod:`causalpos.paper2.summary.factors`): the window's effect as a slope over the sliding layers,
and the global RoPE base's effect on the sliding layers, each on the causal run's logits (the
residual stream on the mechanism mapping), judged against ``leakage.materiality.claim3_order``.

The ``claim 3 (sliding vs global layers)`` rows (:mod:`causalpos.scorecard.paper2_kinds`) stay:
they compare layer kinds that differ in more than the window (observational)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.materiality import for_model
from causalpos.scorecard.paper2_kinds import power_note
from causalpos.scorecard.rows import (
    NOT_APPLICABLE,
    SOURCES,
    Row,
    fmt,
    fmt_ci,
    measured_row,
    not_run,
    target_row,
    text_column,
)
from causalpos.verdicts import DIFFERS, INCONCLUSIVE, REPRODUCED, negative, positive

#: The reading each row decides on, and the one it reports beside it.
DECIDING, BESIDE = "logit", "mask_free"
RUN_WHAT = {
    "window": "variants causal and no_window (and ring) on a model with sliding-window layers "
    "at T > W (leakage.experiments.gemma_controls)",
    "rope_base": "variants causal, global_base, ring and global_base+ring on a model whose "
    "sliding and global layers have two RoPE bases (leakage.experiments.gemma_controls)",
}


def _pick(fac: pd.DataFrame, factor: str, reading: str, level: str, kind: str | None = None):
    d = fac[(fac["factor"] == factor) & (fac["reading"] == reading) & (fac["level"] == level)]
    if kind is not None:
        d = d[d["layer_kind"] == kind]
    return d


def _vals(r, col: str = "effect") -> tuple[float, float, float]:
    return tuple(float(getattr(r, f"{col}{s}")) for s in ("", "_lo", "_hi"))


def _windows(fac: pd.DataFrame) -> pd.DataFrame:
    """Each (model, dataset)'s first window (the headline's: ``leakage.window`` comes first)."""
    first = fac.groupby(["model", "dataset"], sort=False)["window"].transform("first")
    return fac[fac["window"] == first]


def claim3_factor_rows(fac: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """One row per (model, dataset) and factor: ``claim3_window`` (the window's effect on the
    logits, slope × span across the sliding layers, above the threshold) and ``claim3_base``
    (the global base's effect on the sliding layers' logits, below −threshold), each against
    its model's own threshold (``leakage.per_model``, else the config's); "not run" for a
    factor no summary holds; random-init twins measured."""
    src = SOURCES["claim3_factors"]
    out = []
    d = None if fac is None or fac.empty else _windows(fac)
    for factor, key in (("window", "claim3_window"), ("rope_base", "claim3_base")):
        t = T[key]
        rows = d[d["factor"] == factor] if d is not None else None
        if rows is None or rows.empty:
            out.append(not_run(t, t["label"], src, f"needs {RUN_WHAT[factor]}"))
            continue
        for (model, dataset), g in rows.groupby(["model", "dataset"], sort=False):
            tm = for_model(t, model)  # the model's own threshold (leakage.per_model)
            out.append(_row(factor, tm, g, f"{t['label']} ({model}, {dataset})", src))
    return out


def _row(factor: str, t: Mapping, g: pd.DataFrame, label: str, src: str) -> Row:
    thr = float(t["threshold"])
    first = g.iloc[0]
    n = int(first["n_sequences"]) if "n_sequences" in g and np.isfinite(first["n_sequences"]) else 0
    twin = text_column(g, "init_of").iloc[0]
    if factor == "window":
        s = _pick(g, factor, DECIDING, "slope").iloc[0]
        k = _pick(g, factor, DECIDING, "kind")
        k = k[k["layer_kind"].str.startswith("sliding")]
        vals = _vals(s, "change")
        measured = (
            f"window's effect on the logits: slope {fmt_ci(*_vals(s))} per layer over sliding "
            f"layers {s.sliding_layers}, change across them {fmt_ci(*vals)}"
        )
        if not k.empty:
            measured += f"; sliding layers pooled {fmt_ci(*_vals(k.iloc[0]))}"
        if not bool(first["window_masks"]):
            why = "not applicable: window ≥ T (removing it changes nothing at this length)"
            return target_row(t, label, measured, NOT_APPLICABLE, src, note=why)
        ci = vals[1:]
        verdict = positive(ci, thr)
    else:
        k = _pick(g, factor, DECIDING, "kind")
        k = k[k["layer_kind"].str.startswith("sliding")]
        if k.empty:
            return not_run(t, label, src, "no sliding layer in the table")
        vals = _vals(k.iloc[0])
        measured = f"global base minus own on the sliding layers' logits {fmt_ci(*vals)}"
        beside = _pick(g, factor, BESIDE, "kind", k.iloc[0]["layer_kind"])
        if not beside.empty and np.isfinite(beside.iloc[0]["effect"]):
            measured += f"; mask-free route (ring twins) {fmt_ci(*_vals(beside.iloc[0]))}"
        else:
            measured += "; mask-free route not run (needs ring and global_base+ring)"
        ci = vals[1:]
        verdict = negative(ci, thr)
    measured += f" (threshold {fmt(thr)}, mechanism mapping)"
    if twin:
        return measured_row(t, label, measured, src, "a random-init twin: the baseline")
    note = ""
    if verdict == INCONCLUSIVE:
        signed = vals if factor == "window" else tuple(-x for x in (vals[0], vals[2], vals[1]))
        note = power_note(verdict, signed, thr, n)
    elif verdict in (REPRODUCED, DIFFERS):
        note = f"{n} prompts, paired replicates" if n else ""
    return target_row(t, label, measured, verdict, src, note=note)
