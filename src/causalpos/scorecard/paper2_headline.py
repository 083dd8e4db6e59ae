"""Paper 2's rows on the headline reading (causalpos.paper2.summary.headline): the controls
(negative: passed / reads position / underpowered against a declared margin; positive:
recovered / not recovered), claim 2 (the residual-stream component, the causal-mask one
measured beside it), judged against the config's materiality thresholds, and claim 1 beside a
trained model's random-init / init twin (a measurement: paper 2 claims nothing about the
untrained architecture)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.controls import with_verdicts
from causalpos.scorecard.materiality import for_model
from causalpos.scorecard.paper2_kinds import power_note
from causalpos.scorecard.rows import (
    MEASURED,
    NO_TEST,
    NOT_APPLICABLE,
    SOURCES,
    TABLE_MEASURED,
    Row,
    field_text,
    fill,
    fmt,
    fmt_ci,
    measured_row,
    not_run,
    openings,
    ring_missing,
    rule_text,
    rules_text,
    target_row,
    text_column,
)
from causalpos.verdicts import (
    NOT_RECOVERED,
    RECOVERED,
    all_of,
    difference_ci,
    negative_control,
    positive,
    recovered,
)


def control_rows(ctl: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """The controls of the headline reading, one row per distinct position-free pass (naming
    the variants that run it: ``same_pass``), target and landmark reading: the negative control
    (reads 0 in the model's units, against the margin declared before the run) and the positive
    controls (a planted effect recovered or not)."""
    src = SOURCES["controls"]
    tn, tp = T["control_negative"], T["control_positive"]
    if ctl is None:
        why = (
            "no position-free run (identity_rope+bidirectional, or a NoPE model bidirectionally) "
            "on prompts that are chunks at random offsets (document openings carry position in "
            "their content)"
        )
        return [not_run(tn, tn["label"], src, why), not_run(tp, tp["label"], src, why)]
    rows = []
    ctl = with_verdicts("controls", ctl)  # the per-prompt reading's, quoted beside
    for r, same in zip(ctl.itertuples(), text_column(ctl, "same_pass")):
        variant = f"{r.variant} = {same} (one pass)" if same else r.variant
        where = f"{r.model}, {r.dataset}, {variant}, {r.target}"
        rows += _units_control_rows(r, where, tn, src)
        rows += _positive_control_rows(r, where, tp, src)
    return rows


def _units_control_rows(r, where: str, tn: Mapping, src: str) -> list[Row]:
    """The negative control in the model's units, one row per landmark reading: its (1 − 2α)
    interval against the margin declared for the reading
    (:func:`~causalpos.verdicts.negative_control`); the counted reading needs prompts whose token
    0 varies (a fixed BOS puts its identity in the key-0 column of any run). A table without the
    interval (``negative_<landmark>_tost_lo``, ``_tost_hi``, ``_margin``): not run."""
    lms = [
        lm
        for lm in ("modelled", "counted")
        if np.isfinite(getattr(r, f"negative_{lm}_margin", np.nan))  # a reading the row has
    ]
    if not lms:
        why = (
            "the controls table has no interval in the model's units against a declared margin "
            "(columns negative_modelled_tost_lo, _tost_hi, _margin): rerun aggregate_leakage"
        )
        return [not_run(tn, f"{tn['label']} ({where})", src, why)]
    rows = []
    level = getattr(r, "negative_tost_level", np.nan)
    for lm in lms:
        pre = f"negative_{lm}_"
        label = f"{tn['label']} ({where}, landmark {lm})"
        if lm == "counted" and getattr(r, "fixed_bos", 0) == 1:
            why = (
                "token 0 is a fixed BOS: its identity is a key-0 column of any run, so the counted "
                "reading's control is the position-free run on prompts whose token 0 varies"
            )
            rows.append(not_run(tn, label, src, why))
            continue
        est = tuple(getattr(r, f"{pre}model_units{k}") for k in ("", "_lo", "_hi"))
        tost = (getattr(r, f"{pre}tost_lo"), getattr(r, f"{pre}tost_hi"))
        margin = getattr(r, f"{pre}margin")
        verdict = negative_control(tost, margin)
        measured = (
            f"{fmt_ci(*est)} in the model's units (causal run's expected-map variance); "
            f"{fmt(100 * level, 2)} % interval [{fmt(tost[0])}, {fmt(tost[1])}] against "
            f"+-{fmt(margin)}; own ratio {fmt_ci(r.negative, r.negative_lo, r.negative_hi)}; "
            f"per-prompt reading {fmt_ci(r.per_prompt, r.per_prompt_lo, r.per_prompt_hi)} "
            f"({r.per_prompt_control})"
        )
        note = _negative_note(est, tost)
        values = {"margin": float(margin)}
        if np.isfinite(level):
            values["alpha"] = (1.0 - float(level)) / 2.0
        text = rule_text(negative_control, **values)
        rows.append(target_row(tn, label, measured, verdict, src, note=note, rule=text))
    return rows


def _negative_note(est, tost) -> str:
    """What a negative control's row must say beside its verdict: a bound that is not finite, or
    an interval wholly below 0 (the truth is 0: a bias or a miscoverage, never a threshold)."""
    if not np.isfinite([*est, *tost]).all():
        return "a bound is not finite: the control cannot pass"
    if est[2] < 0:
        return (
            "its interval lies wholly below 0, where the truth is 0: the estimator or its "
            "interval is biased on this run (no claim takes its threshold from a control)"
        )
    return ""


def _planted_model_row(r, where: str, tp: Mapping, src: str) -> list[Row]:
    """The positive control planted in the model's forward pass (logits): recovered when the
    planted layer's interval excludes 0 and covers the truth computed from the planted term
    (:func:`~causalpos.verdicts.recovered`), and the exact checks hold (the twin's maps
    everywhere else, log-attention unchanged)."""
    pv = getattr(r, "planted_model_variant", None)
    if not isinstance(pv, str) or not pv:
        return []
    truth = r.planted_model_truth
    est = (r.planted_model_estimate, r.planted_model_lo, r.planted_model_hi)
    ok = recovered(est[1:], truth) == RECOVERED and r.planted_model_check == 1
    ratio = (r.planted_model_ratio, r.planted_model_ratio_lo, r.planted_model_ratio_hi)
    measured = (
        f"planted {fmt(truth)} (n_heads ||P_D b||^2, per prompt pair), recovered {fmt_ci(*est)}; "
        f"recovered/planted {fmt_ci(*ratio, 3)}; exact checks "
        + ("hold" if r.planted_model_check == 1 else "fail")
    )
    label = f"{tp['label']}, planted in the model ({where.rsplit(', ', 2)[0]}, {pv})"
    falsified = (
        "not recovered if the planted layer's interval excludes the planted size or reaches 0, "
        "or if the planted run's other layers or its log-attention differ from its twin's"
    )
    kw = dict(paper_value=f"{fmt(truth)} (planted in layer's logits)", falsified_if=falsified)
    return [target_row(tp, label, measured, RECOVERED if ok else NOT_RECOVERED, src, **kw)]


def _positive_control_rows(r, where: str, tp: Mapping, src: str) -> list[Row]:
    rows = _planted_model_row(r, where, tp, src)
    if not np.isfinite(r.planted):
        why = "the planted share could not be set (the control's expected maps are flat)"
        return rows + [not_run(tp, f"{tp['label']} ({where})", src, why)]
    est = (r.planted_estimate, r.planted_estimate_lo, r.planted_estimate_hi)
    verdict = recovered(est[1:], r.planted)  # covers the planted share and excludes 0
    measured = f"planted {fmt(r.planted)}, recovered {fmt_ci(*est)}"
    text = rule_text(recovered, truth=float(r.planted))
    kw = dict(paper_value=f"{fmt(r.planted)} (planted)", rule=text)
    return rows + [target_row(tp, f"{tp['label']} ({where})", measured, verdict, src, **kw)]


def claim2_rows(dec: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 2 on the headline decomposition, per trained model (twins: measured), RoPE
    condition, log-attention: the residual-stream component above the materiality threshold,
    the causal-mask component (total minus ring) measured beside it (:func:`_causal_mask_check`)
    — except on a sliding-window model's ``full<W>`` rows, where every query sees W keys and the
    normaliser carries no position: there both components are tested."""
    src = SOURCES["decomposition_headline"]
    t = T["claim2_component"]
    if dec is None:
        why = "no headline decomposition (no model with a causal and a bidirectional run)"
        return [not_run(t, t["label"], src, why)]
    d = dec[(dec["target"] == "logattn") & (dec["condition"] == "rope")]
    rows = []
    for (model, dataset), g in d.groupby(["model", "dataset"], sort=False):
        full = g[g["window"].astype(str).str.startswith("full")]
        swa = (text_column(g, "positional") == "swa").any()
        r = (full if swa and len(full) else g).iloc[0]
        full_window = swa and str(r["window"]).startswith("full")
        comps = {k: (r[k], r[f"{k}_lo"], r[f"{k}_hi"]) for k in ("residual_stream", "causal_mask")}
        labels = {"residual_stream": "residual", "causal_mask": "causal mask"}
        measured = "; ".join(f"{labels[k]} {fmt_ci(*v)}" for k, v in comps.items())
        measured += f" (window {r['window']})"
        target = f"{t['label']} ({model}, {dataset})"
        no_ring = ring_missing(r)
        if no_ring:  # the components' NaN is a run not made: never judged
            if not full_window:
                rows.append(
                    _causal_mask_check(T, model, dataset, comps["causal_mask"], "", no_ring)
                )
            rows.append(not_run(t, target, src, "; ".join(filter(None, (no_ring, openings(r))))))
            continue
        if not full_window:
            rows.append(_causal_mask_check(T, model, dataset, comps["causal_mask"], r["window"]))
        twin = str(r.get("init_of", "") or "")
        if twin and twin != "nan":
            rows.append(measured_row(t, target, measured, src, f"init weights of {twin}"))
            continue
        if (text_column(g, "positional") == "nope").any():
            why = (
                "a NoPE model: its bidirectional run has no positional input (the negative "
                "control), so the residual-stream component is 0 by construction"
            )
            rows.append(target_row(t, target, measured, NOT_APPLICABLE, src, note=why))
            continue
        if openings(r):
            rows.append(not_run(t, target, src, openings(r)))
            continue
        free = r.get("mask_free_status", TABLE_MEASURED)
        if isinstance(free, str) and free and free != TABLE_MEASURED:  # reads 0 by symmetry
            rows.append(target_row(t, target, measured, NOT_APPLICABLE, src, note=free))
            continue
        tested = ("residual_stream", "causal_mask") if full_window else ("residual_stream",)
        tm = for_model(t, model)
        verdict = all_of(positive(comps[k][1:], float(tm["threshold"])) for k in tested)
        note = (
            "a sliding window's full rows: every query sees W keys, so the causal-mask component "
            "is tested too"
            if full_window
            else "the causal-mask component (total minus ring) is measured beside it, not tested"
        )
        n = int(r["n_sequences"]) if "n_sequences" in r and pd.notna(r["n_sequences"]) else 0
        power = power_note(
            verdict, comps["residual_stream"], float(tm["threshold"]), n, (model, dataset)
        )
        note = f"{note}; {power}" if power else note
        text = rule_text(positive, threshold=float(tm["threshold"]))
        text = rules_text(text, rule_text(all_of) if full_window else "")
        rows.append(target_row(tm, target, measured, verdict, src, note=note, rule=text))
    return rows


def _causal_mask_check(
    T: Mapping, model: str, dataset: str, cm, window: str, no_ring: str = ""
) -> Row:
    """Claim 2's causal-mask component beside the test: the total minus the ring's leakage, a
    difference of two measured quantities (not an identity), so measured with no verdict (never
    a check); not run without the ring run (``no_ring``: why)."""
    t = T["claim2_component"]
    target = f"{t['label']}, causal-mask component ({model}, {dataset})"
    kw = dict(claim=field_text(t, "claim_check"), paper_value="> 0 (Llama, Qwen, Mistral)")
    src = SOURCES["decomposition_headline"]
    if no_ring:
        return not_run(t, target, src, no_ring, **kw)
    measured = f"causal mask {fmt_ci(*cm)} (window {window})"
    why = fill(t["why_measured"], t)
    if not np.isfinite(cm[1:]).all():
        why += "; a bound of the measured component is not finite"
    return target_row(t, target, measured, MEASURED, src, falsified_if=NO_TEST, note=why, **kw)


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
