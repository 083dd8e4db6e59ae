"""Rows of paper 2 (Ruscio et al., 2026) on the headline decomposition into causal-mask and
residual-stream shares: claim 10, Table 6's RoPE controls, claim 3's architectures (NTK
scaling, sliding windows) and their ordering. Each ``*_rows`` function takes its table(s) (None
when absent: its rows read "not run") and the targets; :mod:`causalpos.scorecard.card` says
which it reads."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.materiality import for_model
from causalpos.scorecard.paper2_kinds import power_note, prompts_of
from causalpos.scorecard.rows import (
    CHECKS,
    EXPECTED_MAP,
    NOT_APPLICABLE,
    PER_PROMPT,
    SOURCES,
    TABLE_MEASURED,
    Row,
    field_text,
    fill,
    fmt_ci,
    not_run,
    paper_model_id,
    ring_missing,
    target_row,
    text_column,
)
from causalpos.verdicts import (
    INCONCLUSIVE,
    all_of,
    check,
    covers,
    difference_ci,
    nearly_identical,
    positive,
)

#: The causal-mask share's estimate and interval columns.
SHARE = ("share_causal_mask", "share_causal_mask_lo", "share_causal_mask_hi")


def headline_decomposition(dec: pd.DataFrame | None) -> pd.DataFrame | None:
    """The decomposition table's rows the scorecard reads: log-attention, each (model, dataset)'s
    headline window (its first), every run made (``status`` measured)."""
    if dec is None:
        return None
    first = dec.groupby(["model", "dataset"], sort=False)["window"].transform("first")
    d = dec[(dec["target"] == "logattn") & (dec["window"] == first)]
    if "status" not in d:
        d = d.assign(status=TABLE_MEASURED)
    return d if not d.empty else None


def _on_headline(rows: list[Row]) -> list[Row]:
    for r in rows:
        r.reading = EXPECTED_MAP
    return rows


def headline_controls_rows(dec: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Table 6 (:func:`controls_rows`) on the headline decomposition, conditions' CIs combined
    as independent samples."""
    return _on_headline(controls_rows(headline_decomposition(dec), T))


def claim10_rows(dec: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 10 on the headline decomposition: the causal-mask share of the log-attention leakage
    nearly identical on the datasets a model is decomposed on whose prompts start alike (the same
    token-0 prefix)."""
    src = SOURCES["decomposition_headline"]
    t10 = T["claim10_content"]
    dec = headline_decomposition(dec)
    if dec is None:
        why = "the config decomposes no model (no bidirectional variant in leakage)"
        return _on_headline([not_run(t10, t10["label"], src, why)])
    rows = []
    rope = dec[dec["condition"] == T["claim4_share"]["condition"]] if "condition" in dec else dec
    made = rope["status"] == TABLE_MEASURED  # headline_decomposition gives every row a status
    unmade = [f"{r.model} on {r.dataset} ({r.status})" for r in rope[~made].itertuples()]
    rope = rope[made]
    # Content independence compares datasets whose prompts start alike: the same token-0 prefix
    # (a fixed BOS, or none) where the table says which, so a BOS / no-BOS contrast is not read
    # as a content effect.
    keys = ["model", "prefix_ids"] if "prefix_ids" in rope else ["model"]
    grouped = rope.assign(
        **({"prefix_ids": rope["prefix_ids"].fillna("")} if len(keys) > 1 else {})
    )
    groups = list(grouped.groupby(keys, sort=False))
    n_groups = grouped.groupby("model")[keys[-1]].nunique() if len(keys) > 1 else None
    many = []
    for key, g in groups:
        model = key[0] if isinstance(key, tuple) else key
        if g["dataset"].nunique() < 2:
            continue
        label = f"{t10['label']} ({model})"
        if n_groups is not None and n_groups[model] > 1:
            label = f"{t10['label']} ({model}, token-0 prefix {key[1] or '[]'})"
        many.append((label, g))
    if not many:
        why = (
            "no model is decomposed on two datasets with the same token-0 prefix (e.g. text "
            "and random tokens after the same BOS)"
            + (f"; not measured: {', '.join(unmade)}" if unmade else "")
        )
        rows.append(not_run(t10, t10["label"], src, why))
    for label, g in many:
        est = [tuple(getattr(r, c) for c in SHARE) for r in g.itertuples()]
        diffs = [
            difference_ci(est[i], est[j]) for i in range(len(est)) for j in range(i + 1, len(est))
        ]
        worst = max(diffs, key=lambda d: abs(d[0]))
        measured = (
            ", ".join(f"{d}: {fmt_ci(*e, 2)}" for d, e in zip(g["dataset"], est))
            + f"; largest difference {fmt_ci(*worst, 2)}"
        )
        verdict = nearly_identical(est, float(t10["margin"]))
        rows.append(target_row(t10, label, measured, verdict, src))
    return _on_headline(rows)


def _paired_differences(g: pd.DataFrame) -> list[tuple[float, float, float]] | None:
    """Every pair's (estimate, lo, hi) of the difference of causal-mask shares from the table's
    ``share_causal_mask_minus_<condition>`` columns (a paired bootstrap), or None when the table
    does not have them all."""
    conds = [str(c) for c in g["condition"]]
    out = []
    for i in range(len(conds)):
        for j in range(i + 1, len(conds)):
            name = f"share_causal_mask_minus_{conds[j]}"
            if not {name, f"{name}_lo", f"{name}_hi"} <= set(g.columns):
                return None
            r = g.iloc[i]
            d = (float(r[name]), float(r[f"{name}_lo"]), float(r[f"{name}_hi"]))
            if not all(np.isfinite(d)):
                return None
            out.append(d)
    return out


def controls_rows(ctl: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Table 6: nearly identical causal-mask shares under the RoPE controls, judged on paired
    differences where the table has them, among the conditions whose bidirectional run can carry
    position. A position-free condition (targets.yaml ``position_free_conditions``; every
    condition of a NoPE model) has share 1 by construction: a check row (its CI covers 1), never
    part of the comparison; with fewer than two other conditions the comparison is not
    applicable (it would be forced)."""
    src = SOURCES["decomposition_headline"]
    t = T["table6_controls"]
    if ctl is None:
        return [not_run(t, t["label"], src, "the config has no leakage section")]
    rows = []
    free_conditions = set(t.get("position_free_conditions") or ())
    arch = architectures(ctl, T)
    for (model, dataset), g in ctl.groupby(["model", "dataset"], sort=False):
        target = f"{t['label']} ({model}, {dataset})"
        if len(g) < 2:
            continue
        bad = g[list(SHARE)].isna().any(axis=1)
        if "status" in g:
            bad |= g["status"] != TABLE_MEASURED
        free = g["condition"].isin(free_conditions) | (arch[g.index] == "nope")
        rows += _table6_checks(g[free], bad[free], t, model, dataset, src)
        tested, tested_bad = g[~free], bad[~free]
        if tested_bad.any():
            missing = [
                f"{r.condition} ({r.status})" if "status" in g else str(r.condition)
                for r in tested[tested_bad].itertuples()
            ]
            why = (
                "the causal-mask share needs each condition's run on the ring (its residual "
                "stream); missing for " + ", ".join(missing)
            )
            rows.append(not_run(t, target, src, why))
            continue
        good = g[~bad]
        est = [tuple(getattr(r, c) for c in SHARE) for r in good.itertuples()]
        measured = ", ".join(f"{c}: {fmt_ci(*e, 2)}" for c, e in zip(good["condition"], est))
        paired = _paired_differences(good)
        if paired is not None and len(paired):
            worst = max(paired, key=lambda d: max(abs(d[1]), abs(d[2])))
            measured += f"; largest paired difference {fmt_ci(*worst, 2)}"
        if len(tested) < 2:
            why = field_text(t, "not_applicable")
            fal = f"none: not applicable ({why})"
            rows.append(
                target_row(t, target, measured, NOT_APPLICABLE, src, note=why, falsified_if=fal)
            )
            continue
        est = [tuple(getattr(r, c) for c in SHARE) for r in tested.itertuples()]
        paired = _paired_differences(tested)
        verdict = nearly_identical(est, float(t["margin"]), paired)
        note = "" if paired is not None else "differences combined as independent samples"
        rows.append(target_row(t, target, measured, verdict, src, note=note))
    if not rows:
        why = "only the rope condition was run (no identity_rope / scrambled_rope variants)"
        rows.append(not_run(t, t["label"], src, why))
    return rows


def _table6_checks(
    g: pd.DataFrame, bad: pd.Series, t: Mapping, model: str, dataset: str, src: str
) -> list[Row]:
    """Table 6's position-free conditions as checks: the causal-mask share's CI covers 1."""
    rows = []
    kw = dict(
        claim=field_text(t, "claim_check"),
        paper_value="1 (by construction)",
        falsified_if=fill(t["falsified_if_check"], t),
        section=CHECKS,
    )
    for r, missing in zip(g.itertuples(), bad):
        target = f"{t['label']}, position-free condition ({model}, {dataset}, {r.condition})"
        if missing:
            why = f"{getattr(r, 'status', 'not measured')} (no causal-mask share)"
            rows.append(not_run(t, target, src, why, **kw))
            continue
        ci = (r.share_causal_mask_lo, r.share_causal_mask_hi)
        measured = f"share {fmt_ci(r.share_causal_mask, *ci, 2)}"
        if {"residual_stream", "residual_stream_lo", "residual_stream_hi"} <= set(g.columns):
            measured += f"; residual {fmt_ci(r.residual_stream, r.residual_stream_lo, r.residual_stream_hi)}"
        rows.append(target_row(t, target, measured, check(covers(ci, 1.0)), src, **kw))
    return rows


def architectures(df: pd.DataFrame, T: Mapping) -> pd.Series:
    """rope / ntk / swa / nope per row: the ``positional`` column of the models trained here,
    else the papers' model id looked up in claim3_ntk's ``architectures``; "" if neither."""
    arch = T["claim3_ntk"].get("architectures") or {}
    pos = text_column(df, "positional")
    named = df["model"].map(lambda m: arch.get(paper_model_id(m, T) or "", ""))
    return pos.where(pos != "", named)


def claim3_rows(dec: pd.DataFrame | None, trend: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 3 on the one-factor models trained here and the papers' models: (a) NTK's
    residual-stream share below standard RoPE's, (b) a sliding window's residual-stream leakage
    growing with depth. Init / random twins are not the architectures the claim is about."""
    tn, ts = T["claim3_ntk"], T["claim3_swa"]
    notes = tn.get("architecture_notes") or {}
    rows = []
    src = SOURCES["decomposition_headline"]
    dec = headline_decomposition(dec)
    col = tn["column"]
    if dec is None or not {col, f"{col}_lo", f"{col}_hi"} <= set(dec.columns):
        why = "no decomposition table with the residual-stream share (no bidirectional runs)"
        rows.append(not_run(tn, tn["label"], src, why))
    else:
        d = dec[dec["condition"] == "rope"] if "condition" in dec else dec
        d = d[d["status"] == TABLE_MEASURED]
        d = d.assign(arch_=architectures(d, T), init_=text_column(d, "init_of"))
        d = d[d["init_"] == ""]
        n_pairs = 0
        for dataset, g in d.groupby("dataset", sort=False):
            for ntk in g[g["arch_"] == "ntk"].itertuples():
                for std in g[g["arch_"] == "rope"].itertuples():
                    a = tuple(getattr(std, c) for c in (col, f"{col}_lo", f"{col}_hi"))
                    b = tuple(getattr(ntk, c) for c in (col, f"{col}_lo", f"{col}_hi"))
                    diff = difference_ci(a, b)
                    measured = (
                        f"{std.model} minus {ntk.model}: {fmt_ci(*diff, 2)}; "
                        f"{col} {std.model} {fmt_ci(*a, 2)}, {ntk.model} {fmt_ci(*b, 2)}; residual "
                        f"component {fmt_ci(std.residual_stream, std.residual_stream_lo, std.residual_stream_hi)} vs "
                        f"{fmt_ci(ntk.residual_stream, ntk.residual_stream_lo, ntk.residual_stream_hi)}"
                    )
                    tm = for_model(tn, std.model, ntk.model)
                    thr = float(tm["threshold"])
                    verdict = positive(diff[1:], thr)
                    power = power_note(
                        verdict, diff, thr, prompts_of(std, ntk), (std.model, dataset)
                    )
                    note = "; ".join(
                        x for x in ("CIs of two models combined as independent samples", power) if x
                    )
                    target = f"{tn['label']} ({ntk.model} vs {std.model}, {dataset})"
                    kw = dict(note=note, reading=EXPECTED_MAP)
                    rows.append(target_row(tm, target, measured, verdict, src, **kw))
                    n_pairs += 1
        if not n_pairs:
            why = (
                "no NTK-scaled and standard-RoPE model (trained here: `positional`; the papers': "
                "targets.yaml claim3_ntk.architectures) decomposed on the same dataset"
            )
            rows.append(not_run(tn, tn["label"], src, why))
    src = SOURCES["depth_trend"]
    if trend is None:
        why = "no depth-trend table (aggregate_leakage's paper2_per_prompt_depth_trend.csv)"
        return rows + [not_run(ts, ts["label"], src, why, reading=PER_PROMPT)]
    sel = trend[
        (trend["variant"] == "bidirectional")
        & (trend["target"] == "logattn")
        & (trend["trend"] == ts["trend"])
    ]
    sel = sel.assign(arch_=architectures(sel, T), init_=text_column(sel, "init_of"))
    swa = sel[(sel["arch_"] == "swa") & (sel["init_"] == "")]
    if swa.empty:
        why = (
            "no sliding-window model (trained here: `positional: swa`; the papers': targets.yaml "
            "claim3_ntk.architectures) with a bidirectional run"
        )
        return rows + [not_run(ts, ts["label"], src, why, reading=PER_PROMPT)]
    for r in swa.itertuples():
        same = sel[sel["dataset"] == r.dataset]
        ctx = [
            f"{o.model} ({'init of ' + o.init_ if o.init_ else o.arch_}) "
            f"{fmt_ci(o.estimate, o.lo, o.hi)}"
            for o in same.itertuples()
            if o.model != r.model and (o.arch_ == "rope" or o.init_ == r.model)
        ]
        measured = f"slope {fmt_ci(r.estimate, r.lo, r.hi)} per layer" + (
            "; " + ", ".join(ctx) if ctx else ""
        )
        pid = paper_model_id(r.model, T)
        verdict = positive((r.lo, r.hi), float(ts["threshold"]))
        note = field_text(notes, pid) if pid in notes else ""
        target = f"{ts['label']} ({r.model}, {r.dataset})"
        rows.append(target_row(ts, target, measured, verdict, src, note=note, reading=PER_PROMPT))
    return rows


def claim3_order_rows(dec: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 3's ordering on the headline: residual-stream component NTK < standard < sliding
    window, per dataset with one trained (not twin) model of each, at one common query window,
    each difference above the materiality threshold (``leakage.materiality.claim3_order``)."""
    src = SOURCES["decomposition_headline"]
    t = T["claim3_order"]
    why = (
        "no dataset with an NTK-scaled, a standard-RoPE and a sliding-window model (trained here: "
        "`positional`; the papers': targets.yaml claim3_ntk.architectures) decomposed on it"
    )
    if dec is None:
        return [not_run(t, t["label"], src, why)]
    d = dec[(dec["target"] == "logattn") & (dec["condition"] == "rope")]
    d = d.assign(arch_=architectures(d, T), init_=text_column(d, "init_of"))
    ring = pd.Series([not ring_missing(r) for _, r in d.iterrows()], index=d.index, dtype=bool)
    d = d[(d["init_"] == "") & ring]
    rows = []
    for dataset, g in d.groupby("dataset", sort=False):
        by = {a: g[g["arch_"] == a] for a in ("ntk", "rope", "swa")}
        if any(x.empty for x in by.values()):
            continue
        windows = [str(w) for w in dict.fromkeys(g["window"])]
        full = [w for w in windows if w.startswith("full")]
        window = full[0] if full else windows[0]
        pick, n_of = {}, {}
        for a, x in by.items():
            x = x[x["window"] == window]
            if x.empty:
                break
            r = x.iloc[0]
            pick[a] = (
                r["model"],
                (r["residual_stream"], r["residual_stream_lo"], r["residual_stream_hi"]),
            )
            n_of[a] = r
        if len(pick) < 3:
            continue
        d1 = difference_ci(pick["rope"][1], pick["ntk"][1])
        d2 = difference_ci(pick["swa"][1], pick["rope"][1])
        tm = for_model(t, *(m for m, _ in pick.values()))
        thr = float(tm["threshold"])
        verdicts = [positive(x[1:], thr) for x in (d1, d2)]
        verdict = all_of(verdicts)
        n = prompts_of(*n_of.values())
        power = [
            f"{name}: {note}"
            for name, d, v in (
                ("standard - NTK", d1, verdicts[0]),
                ("sliding window - standard", d2, verdicts[1]),
            )
            if (note := power_note(v, d, thr, n, (pick["rope"][0], str(dataset))))
        ]
        notes = ["CIs of two models combined as independent samples"]
        if verdict == INCONCLUSIVE:
            notes += power
        measured = (
            ", ".join(f"{a} {m} {fmt_ci(*v)}" for a, (m, v) in pick.items())
            + f"; standard - NTK {fmt_ci(*d1)}, sliding window - standard {fmt_ci(*d2)} "
            f"(window {window})"
        )
        target = f"{t['label']} ({dataset})"
        rows.append(target_row(tm, target, measured, verdict, src, note="; ".join(notes)))
    return rows or [not_run(t, t["label"], src, why)]
