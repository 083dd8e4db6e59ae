"""Rows of paper 2 (Ruscio et al., 2026) on position 0: the BOS replacements of Table 9, on the
per-prompt reading (:func:`bos_rows`) and on the headline (:func:`bos_headline_rows`); a
table given as None reads "not run"."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.rows import (
    NOT_APPLICABLE,
    RESIDUAL_STREAM,
    SOURCES,
    TABLE_MEASURED,
    Row,
    equivalence_band,
    equivalence_row,
    fmt,
    fmt_ci,
    measured_row,
    not_run,
    target_row,
    text_column,
)


def _token0_fixed(p0: pd.DataFrame | None) -> dict[tuple[str, str], bool]:
    """(model, dataset) -> whether token 0 is the same in every prompt (position-0 table)."""
    if p0 is None or "token0_fixed" not in p0:
        return {}
    known = p0.dropna(subset=["token0_fixed"]).groupby(["model", "dataset"])["token0_fixed"]
    return {key: bool(v) for key, v in known.first().items()}


#: The passes without a causal mask, as a run's name spells them: position 0 is not alone there,
#: and the sinks vanish with the mask (SmolLM2: 89 sink heads causally, 0 on the ring).
MASK_FREE_PASSES = ("ring", "bidirectional")
#: The pass each headline reading of Table 9 made without the causal mask is read on.
SINK_FREE_READINGS = {"residual_stream": "ring", "residual_stream_paper": "bidirectional"}


def _sink_counts(sk: pd.DataFrame | None) -> dict[tuple[str, str, str, float], float]:
    """(model, dataset, variant, tau) -> the number of sink heads (the sink-head table)."""
    if sk is None or not {"variant", "tau", "n_sink_heads"} <= set(sk.columns):
        return {}
    return {
        (str(r.model), str(r.dataset), str(r.variant), round(float(r.tau), 6)): float(
            r.n_sink_heads
        )
        for r in sk.itertuples()
    }


def _mask_free(run: str) -> str:
    """The pass without a causal mask a run's name names ("" for a causal run)."""
    parts = str(run).split("+")
    return next((p for p in MASK_FREE_PASSES if p in parts), "")


def sinkless_note(counts: Mapping, model: str, dataset: str, runs: tuple[str, ...], tau) -> str:
    """Why a Table 9 row read on ``runs`` (the replaced run and its baseline) is not applicable:
    a pass without the causal mask that keeps no sink head, by the sink-head table ``counts``
    where it counts every run at ``tau`` (a head in either run: "", scored), else by the pass
    itself, naming the runs the table does not count. "" for a causal pass."""
    name = next((p for p in map(_mask_free, runs) if p), "")
    if not name:
        return ""
    key = round(float(tau), 6)
    got = {r: counts.get((model, dataset, r, key)) for r in runs}
    measured = {r: n for r, n in got.items() if n is not None and np.isfinite(n)}
    if any(n > 0 for n in measured.values()):
        return ""
    if len(measured) == len(runs):
        basis = f"measured: 0 sink heads at tau {tau:g} in {' and '.join(runs)}"
    else:
        uncounted = ", ".join(r for r in runs if r not in measured)
        basis = (
            f"from the pass: the {name} pass has no causal mask, so position 0 is not alone and "
            f"its sinks vanish with the mask; the sink-head table counts no head of {uncounted}"
        )
    return (
        f"a pass without sinks ({basis}): Table 9 replaces the token whose trajectory the sink "
        "heads read, so its premise needs the sinks; the readings that keep them (the causal "
        "total, the sink heads) are scored"
    )


def _window_size(name: str) -> float:
    digits = "".join(ch for ch in str(name) if ch.isdigit())
    return float(digits) if digits else math.inf


def bos_rows(
    bos: pd.DataFrame | None, p0: pd.DataFrame | None, sk: pd.DataFrame | None, T: Mapping
) -> list[Row]:
    """Table 9: the BOS replacements' effect on the residual-stream component, at the smallest
    early-query window; not applicable where the position-0 table ``p0`` says token 0 varies,
    and on a pass without sinks (:func:`sinkless_note`, the sink-head table ``sk``)."""
    src = SOURCES["bos_effects"]
    t = T["table9_bos"]
    fixed = _token0_fixed(p0)
    counts, tau = _sink_counts(sk), float(T["sink_heads"]["tau"])
    pv = "; ".join(f"{k}: {v:+.0%}" for k, v in t["values"].items())
    if bos is None:
        return [not_run(t, t["label"], src, "the config runs no BOS replacement", paper_value=pv)]
    rows = []
    if "measure" in bos:
        # Table 9's C_res is the residual-stream component: the ring runs' leakage (§3)
        others = bos[bos["measure"] != RESIDUAL_STREAM]
        bos = bos[bos["measure"] == RESIDUAL_STREAM]
        if bos.empty:
            col = "variant" if "variant" in others else "intervention"
            runs = ", ".join(sorted(set(others[col].astype(str))))
            why = (
                f"no BOS replacement was run on the ring ({runs}); Table 9's residual-stream "
                "component is the ring's leakage: add <replacement>+ring (a bidirectional run "
                "gives paper 2's own reading, measure residual_stream_paper, in the table)"
            )
            return [not_run(t, t["label"], src, why, paper_value=pv)]
    if "status" in bos:
        for r in bos[bos["status"] != TABLE_MEASURED].itertuples():
            target = f"{t['label']} ({r.model}, {r.intervention})"
            rows.append(not_run(t, target, src, str(r.status), paper_value=pv))
        bos = bos[bos["status"] == TABLE_MEASURED]
    early = bos[bos["bos_window"].astype(str).str.startswith("early")].copy()
    if early.empty:
        return rows or [not_run(t, t["label"], src, "no early-query window", paper_value=pv)]
    early["_size"] = early["bos_window"].map(_window_size)
    first = early.sort_values("_size").groupby(["model", "dataset", "intervention"]).head(1)
    for r in first.itertuples():
        target = f"{t['label']} ({r.model}, {r.intervention}, {r.bos_window})"
        measured = fmt_ci(r.effect, r.effect_lo, r.effect_hi, 2)
        # the replacement's kind ("mean", "all_gaussian"); older tables name it "intervention"
        kind = getattr(r, "replacement", None) if "replacement" in bos else r.intervention
        value = t["values"].get(kind)
        if value is None:
            why = "the paper reports no value for this intervention"
            rows.append(measured_row(t, target, measured, src, why))
            continue
        kw = dict(paper_value=f"{value:+.0%}", falsified_if=equivalence_band(t, value))
        if "variant" in bos and "baseline" in bos:
            runs = (str(r.variant), str(r.baseline))
        else:  # older tables: the run is the intervention's name after bos_replace_
            runs = (f"bos_replace_{r.intervention}", "+".join(r.intervention.split("+")[1:]))
        why = sinkless_note(counts, r.model, r.dataset, runs, tau)
        if not why and fixed.get((r.model, r.dataset)) is False:
            why = "token 0 varies across prompts: there is no fixed BOS to replace"
        if why:
            rows.append(target_row(t, target, measured, NOT_APPLICABLE, src, note=why, **kw))
            continue
        ci = (r.effect_lo, r.effect_hi)
        rows.append(equivalence_row(t, target, measured, ci, value, src, f"{value:+.0%}"))
    return rows


#: How each reading of Table 9 on the headline is read, for the rows' notes.
BOS_READING_NOTES = {
    "residual_stream": "ring runs (§3's C_res, the ring's logits)",
    "residual_stream_paper": "bidirectional runs (paper 2's own C_res, log-attention)",
    "causal_total": "causal runs, all heads: the sinks kept",
    "sink_heads": "causal runs, the causal run's sink heads only (attention to key 0 >= {tau})",
}


def bos_headline_rows(
    bos: pd.DataFrame | None, p0: pd.DataFrame | None, sk: pd.DataFrame | None, T: Mapping
) -> list[Row]:
    """Table 9 on the headline: every replacement (``replace all`` included) against the
    paper's value by its own row, at the smallest early-query window, in each reading
    (residual-stream component, causal total, sink heads); not applicable where token 0 varies
    and on a pass without sinks (the ring's and the bidirectional pass's readings,
    :func:`sinkless_note` on the sink-head table ``sk``); twins measured."""
    src = SOURCES["bos_headline"]
    t = T["table9_headline"]
    pv = "; ".join(f"{k}: {v:+.0%}" for k, v in t["values"].items())
    if bos is None:
        why = (
            "no headline BOS effect: the config replaces no BOS, or the headline's windows "
            "(leakage.reducer.expected_stats) hold none of the runs"
        )
        return [not_run(t, t["label"], src, why, paper_value=pv)]
    early = bos[bos["window"].astype(str).str.startswith("early")].copy()
    if early.empty:
        why = "no early-query window among the headline's (add early<N> to expected_stats)"
        return [not_run(t, t["label"], src, why, paper_value=pv)]
    early["_size"] = early["window"].map(_window_size)
    early = early[early["_size"] == early.groupby(["model", "dataset"])["_size"].transform("min")]
    fixed = _token0_fixed(p0)
    counts = _sink_counts(sk)
    rows = []
    for r, twin in zip(early.itertuples(), text_column(early, "init_of")):
        target = f"{t['label']} ({r.model}, {r.replacement}, {r.bos_reading}, {r.window})"
        measured = (
            f"{fmt_ci(r.effect, r.effect_lo, r.effect_hi, 2)}; C {fmt_ci(r.c, r.c_lo, r.c_hi)} vs "
            f"{fmt_ci(r.c_baseline, r.c_baseline_lo, r.c_baseline_hi)}"
        )
        how = BOS_READING_NOTES.get(r.bos_reading, r.bos_reading).format(
            tau=fmt(getattr(r, "sink_tau", np.nan), 2)
        )
        if r.bos_reading == "sink_heads":
            measured += f"; {fmt(r.n_sink_heads)} sink heads"
        value = t["values"].get(r.replacement)
        if value is None:
            why = f"{how}; the paper reports no value for this replacement"
            rows.append(measured_row(t, target, measured, src, why))
            continue
        if twin:
            rows.append(measured_row(t, target, measured, src, f"{how}; init weights of {twin}"))
            continue
        kw = dict(paper_value=f"{value:+.0%}", falsified_if=equivalence_band(t, value))
        tau = getattr(r, "sink_tau", np.nan)
        tau = float(tau) if np.isfinite(tau) else float(T["sink_heads"]["tau"])
        mask_free = SINK_FREE_READINGS.get(r.bos_reading, "")
        runs = (f"bos_replace_{r.replacement}+{mask_free}", mask_free) if mask_free else ()
        why = sinkless_note(counts, r.model, r.dataset, runs, tau)
        if not why and fixed.get((r.model, r.dataset)) is False:
            why = "token 0 varies across prompts: there is no fixed BOS to replace"
        if why:
            rows.append(
                target_row(t, target, measured, NOT_APPLICABLE, src, note=f"{how}; {why}", **kw)
            )
            continue
        ci = (r.effect_lo, r.effect_hi)
        rows.append(equivalence_row(t, target, measured, ci, value, src, f"{value:+.0%}", note=how))
    return rows
