"""Rows of paper 1 (Kim et al., 2025) that are composite claims: Fig. 1's closed form and
monotonicity (theory.csv: several rules on lookups, a maximum, the steps of one table, and an
exact computation no table holds), the simulations' pattern per setting and its depth trend
(Figs. 2-10, simulation_index.csv) and Fig. 5 on pretrained models (llm_index.csv: layer 1's
equivalence joined to the later layers' fraction, key 0's column reported). Paper 1's other
targets are declarative (``causalpos/targets.yaml``). A table given as None reads "not run"."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.engine_groups import twins_of
from causalpos.scorecard.rows import (
    MEASURED,
    NO_TEST,
    NOT_APPLICABLE,
    SOURCES,
    Row,
    field_text,
    fill,
    fmt,
    fmt_ci,
    index_column,
    layer_cis,
    measured_row,
    not_run,
    target_row,
)
from causalpos.verdicts import (
    DIFFERS,
    INCONCLUSIVE,
    REPRODUCED,
    all_of,
    check,
    equivalent,
    exact,
    fraction,
    increasing,
    positive,
)


def theory_rows(theory: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Fig. 1's layer-2 scores against the printed values, and layers 3-4 computed exactly
    (:func:`monotone_deep_row`): tests of the paper. The closed form against an exact Gram
    computation and its monotonicity at layer 2 (theory.csv): checks (the paper's proof computed,
    ``holds`` / ``fails``)."""
    src = SOURCES["theory"]
    fig1, closed, mono2, deep = (
        T[k] for k in ("fig1", "closed_form", "monotone_layer2", "monotone_deep")
    )
    deep = {**deep, "layers_str": " or ".join(str(x) for x in deep["layers"])}
    pv_fig1 = ", ".join(f"S({v['query']},{v['key']}) = {v['value']:.3f}" for v in fig1["values"])
    if theory is None:
        why = "the config has no theory section (rule theory_check)"
        rows = [not_run(fig1, fig1["label"], src, why, paper_value=pv_fig1)]
        return rows + [not_run(x, x["label"], src, why) for x in (closed, mono2, deep)]
    rows = []
    for v in fig1["values"]:
        q, k, pv = int(v["query"]), int(v["key"]), float(v["value"])
        target = f"{fig1['label']} S({q},{k})"
        hit = theory[(theory["alpha"] == 0) & (theory["query"] == q) & (theory["key"] == k)]
        if hit.empty:
            rows.append(not_run(fig1, target, src, "theory.csv has no alpha = 0 row for this cell"))
            continue
        cf = float(hit["closed_form"].iloc[0])
        verdict = exact(cf, pv, float(fig1["tolerance"]))
        note = f"rounds to {cf:.3f}" if verdict == DIFFERS else ""
        rows.append(
            target_row(fig1, target, f"{cf:.5f}", verdict, src, paper_value=f"{pv:.3f}", note=note)
        )
    diff = float((theory["closed_form"] - theory["exact_gram"]).abs().max())
    measured = f"max |diff| = {diff:.1e} over {len(theory)} pairs"
    verdict = check(exact(diff, 0.0, float(closed["tolerance"])))
    rows.append(target_row(closed, closed["label"], measured, verdict, src))
    steps = [
        np.diff(g["closed_form"].to_numpy())
        for _, g in theory.sort_values("key").groupby(["alpha", "query"])
    ]
    steps = np.concatenate([s for s in steps if s.size]) if steps else np.array([])
    n_up = int((steps > 0).sum())
    smallest = fmt(steps.min() if steps.size else math.nan)
    measured = f"{steps.size - n_up} of {steps.size} steps <= 0; smallest step {smallest}"
    verdict = check(fraction(n_up, 0, int(steps.size), float(mono2["threshold"])))
    rows.append(target_row(mono2, mono2["label"], measured, verdict, src))
    rows.append(monotone_deep_row(deep))
    return rows


def monotone_deep_row(t: Mapping) -> Row:
    """Layers 3-4 of the parameter-free decoder, exactly (Eq. 1 on an exact Gram matrix)."""
    from causalpos.paper1.theory import exact_gram_scores, monotonicity_violations

    n, alpha, layers = int(t["n_positions"]), float(t["alpha"]), [int(x) for x in t["layers"]]
    scores = exact_gram_scores(n, alpha, max(layers))
    bad = monotonicity_violations(scores)  # (layer, query, step), 0-indexed
    n_steps = n * (n - 1) // 2
    parts, verdicts = [], []
    for layer in layers:
        viol = bad[layer - 1]
        k = int(viol.sum())
        step = np.diff(scores[layer - 1], axis=-1)
        worst = float(np.nanmin(step))
        first_q = int(np.argwhere(viol)[:, 0].min()) + 1 if k else None
        parts.append(
            f"layer {layer}: {k} of {n_steps} steps <= 0"
            + (f" (queries >= {first_q}, largest drop {worst:.1e})" if k else "")
        )
        verdicts.append(fraction(n_steps - k, 0, n_steps, float(t["threshold"])))
    src = "exact computation (causalpos.paper1.theory.monotonicity_violations)"
    return target_row(t, t["label"], "; ".join(parts), all_of(verdicts), src)


def _matches(row: pd.Series, select: Mapping) -> bool:
    for key, want in select.items():
        if key not in row.index:
            return False
        have = row[key]
        wants = want if isinstance(want, list) else [want]
        if isinstance(have, str) and have in ("True", "False"):
            have = have == "True"
        if isinstance(wants[0], bool) or isinstance(have, bool | np.bool_):
            if bool(have) not in [bool(w) for w in wants]:
                return False
        elif isinstance(wants[0], int | float):
            if not any(math.isclose(float(have), float(w), abs_tol=1e-9) for w in wants):
                return False
        elif str(have) not in [str(w) for w in wants]:
            return False
    return True


def simulation_rows(index: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Figs. 2-10 on the simulations: per setting, the figure's pattern judged on the index CIs
    per layer (none at layer 1, a non-relative one later), and the depth trend where selected."""
    src = SOURCES["sim_index"]
    t, depth = T["sim_pattern"], T["sim_depth"]
    margin = float(t["margin"])
    if index is None:
        pattern = {**t, "claim": t["claim_pattern"], "falsified_if": t["falsified_if_pattern"]}
        pv, why = field_text(t, "paper_value_pattern"), "the config has no simulate section"
        return [not_run(pattern, "Figs. 2, 4, 6, 7, 9, 10", src, why, paper_value=pv)]
    rows = []
    for setting, g in index.groupby("setting", sort=False):
        g = g.sort_values("layer")
        fig = next((f for f in t["figures"] if _matches(g.iloc[0], f["select"])), None)
        cis = list(zip(g["ci_lo"], g["ci_hi"]))
        measured = layer_cis(g)
        if fig is None:
            label, why = f"simulation ({setting})", "no figure of paper 1 has this setting"
            rows.append(Row(t["paper"], label, "", "", measured, NOT_APPLICABLE, NO_TEST, why, src))
            continue
        label, kind = f"{fig['label']} ({setting})", fig["expect"]
        if kind == "unscored":
            claim, pv = field_text(fig, "claim"), field_text(t, "paper_value_none")
            why = field_text(fig, "why")
            rows.append(Row(t["paper"], label, claim, pv, measured, MEASURED, NO_TEST, why, src))
            continue
        if kind == "none":
            verdict = all_of(equivalent(ci, 0.0, margin) for ci in cis)
        else:
            verdict = all_of(
                [equivalent(cis[0], 0.0, margin)] + [positive(ci, margin) for ci in cis[1:]]
            )
        claim, pv = field_text(t, f"claim_{kind}"), field_text(t, f"paper_value_{kind}")
        falsified = fill(t[f"falsified_if_{kind}"], t)
        rows.append(Row(t["paper"], label, claim, pv, measured, verdict, falsified, "", src))
        if _matches(g.iloc[0], depth["select"]):
            later = g[g["layer"] > g["layer"].min()]
            verdict = increasing(list(zip(later["ci_lo"], later["ci_hi"])))
            target = f"{depth['label']} ({setting})"
            rows.append(target_row(depth, target, layer_cis(later), verdict, src))
    return rows


#: What a row says when llm_index.csv has no key-0 columns (a table the index read with key 0).
KEY0_IN = "key 0 in the index (llm_index.csv predates the key-0 columns: rerun aggregate_llm_stats)"


def key0_text(g: pd.DataFrame) -> str:
    """What the rows of one run say of key 0: out of the index, its column's size at layer 1 and
    over the later layers (logit units, CI; the part of the non-relative sum of squares it
    carries), and the index with key 0 kept; :data:`KEY0_IN` for a table without the columns."""
    if "key0" not in g:
        return KEY0_IN
    first, later = g.iloc[0], g.iloc[1:]
    text = (
        "key 0 out of the index; its own column (RMS of its deviation from its offsets' level) "
        f"L1 {fmt_ci(first['key0_debiased'], first['key0_lo'], first['key0_hi'])}"
    )
    if len(later):
        share = later["key0_share"].dropna()
        text += f", median over layers >= 2 {fmt(later['key0_debiased'].median())}" + (
            f", {fmt(share.median(), 2)} of their non-relative sum of squares" if len(share) else ""
        )
    text += f"; with key 0 in the index L1 {fmt(first['index_with_key0_debiased'])}"
    if len(later):
        text += f", median {fmt(later['index_with_key0_debiased'].median())}"
    return text


def llm_rows(llm: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Fig. 5 on pretrained models: layer 1 at noise, the later layers' index above the margin
    (logit units, noise-corrected CI per layer), key 0 out of the index (:func:`key0_text`); a
    random-init twin's row is measured, its note the target's ``twin``."""
    src = SOURCES["llm_index"]
    t = T["llm_pattern"]
    margin, threshold = float(t["margin"]), float(t["threshold"])
    if llm is None:
        return [not_run(t, t["label"], src, "the config has no paper1_llm models")]
    rows = []
    twins = twins_of(llm, {"twin_column": "twin"})
    sel = llm[llm["variant"] == t["variant"]] if "variant" in llm else llm
    for (model, dataset), g in sel.groupby(["model", "dataset"], sort=False):
        g = g.sort_values("layer")
        first, later = g.iloc[0], g.iloc[1:]
        l1 = equivalent((first["ci_lo"], first["ci_hi"]), 0.0, margin)
        per = [positive((r.ci_lo, r.ci_hi), margin) for r in later.itertuples()]
        n_yes, n_und = per.count(REPRODUCED), per.count(INCONCLUSIVE)
        verdict = all_of([l1, fraction(n_yes, n_und, len(per), threshold)])
        est = index_column(g)
        med = float(later[est].median()) if len(later) else math.nan
        measured = (
            f"L1 {fmt_ci(first[est], first['ci_lo'], first['ci_hi'])}; layers >= 2: "
            f"{n_yes} of {len(per)} above {margin:g}, {n_und} undecided, "
            f"{len(per) - n_yes - n_und} at or below; median {fmt(med)} (logit units); "
            + key0_text(g)
        )
        note = "" if len(per) else "only one layer: nothing to compare layer 1 with"
        target = f"{t['label']} ({model}, {dataset})"
        if model in twins:
            why = fill(t["twin"], t, init_of=twins[model])
            rows.append(measured_row(t, target, measured, src, why))
            continue
        rows.append(target_row(t, target, measured, verdict, src, note=note))
    return rows
