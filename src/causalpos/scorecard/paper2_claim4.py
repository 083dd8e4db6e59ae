"""Claim 4 of paper 2, in one place: the causal-mask share of the log-attention leakage per model
against the paper's value (on the one-unit decomposition's ablation mapping, landmark counted:
the reading that matches paper 2's reconstructed fit; the mechanism mapping reported beside it)
and its scale shift between two models on the same prompts (a paired contrast),
each row's verdict from :mod:`causalpos.verdicts` (:func:`claim4_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.paper2 import headline_decomposition
from causalpos.scorecard.paper2_kinds import band_power_note
from causalpos.scorecard.rows import (
    EXPECTED_MAP,
    NOT_APPLICABLE,
    SOURCES,
    TABLE_MEASURED,
    Row,
    equivalence_row,
    fmt,
    fmt_ci,
    measured_row,
    not_run,
    paper_value_for,
    ring_missing,
    rule_text,
    target_row,
)
from causalpos.verdicts import within_range


def claim4_rows(
    dec: pd.DataFrame | None, comp: pd.DataFrame | None, sc: pd.DataFrame | None, T: Mapping
) -> list[Row]:
    """Every claim-4 row: the causal-mask share per model against the paper's value (from the
    one-unit components ``comp``), "not run" for each model whose headline decomposition ``dec``
    lacks a run, and the scale shift between two models on the same prompts (``sc``)."""
    t4 = T["claim4_share"]
    src = SOURCES["decomposition_headline"]
    d = headline_decomposition(dec)
    if d is None:
        why = "the config decomposes no model (no bidirectional variant in leakage)"
        rows = [not_run(t4, t4["label"], src, why, paper_value=_paper_values(t4))]
    else:
        rows = _not_made_rows(d, T)
    # the comp table's own "not run" row is left out where the decomposition's rows say why
    n = _prompts(d)
    rows += [r for r in _share_rows(comp, T, n) if not (rows and r.target == t4["label"])]
    for r in rows:
        r.reading = EXPECTED_MAP
    return rows + _scale_rows(sc, T)


def _not_made_rows(d: pd.DataFrame, T: Mapping) -> list[Row]:
    """A "not run" row for each (model, dataset) of claim 4's condition whose decomposition row
    is not measured (a run missing)."""
    t4 = T["claim4_share"]
    src = SOURCES["decomposition_headline"]
    rope = d[d["condition"] == t4["condition"]] if "condition" in d else d
    if "status" not in rope or "ring_run" in rope:
        return []  # with a ring_run column, status is the ring run's: claim 4 reads without it
    return [
        not_run(
            t4,
            f"{t4['label']} ({r.model}, {r.dataset})",
            src,
            f"{r.status} (the decomposition needs the causal and the bidirectional run)",
            paper_value=_paper_values(t4),
        )
        for r in rope[rope["status"] != TABLE_MEASURED].itertuples()
    ]


def _prompts(d: pd.DataFrame | None) -> dict[tuple[str, str], int]:
    """The prompts of each (model, dataset) of the headline decomposition (``n_sequences``; none
    where the table lacks the column): the n a claim-4 row's power note scales from."""
    if d is None or "n_sequences" not in d:
        return {}
    n = d.groupby(["model", "dataset"], sort=False)["n_sequences"].min()
    return {k: int(v) for k, v in n.items() if np.isfinite(v)}


def _paper_values(t: Mapping) -> str:
    return "; ".join(f"{k}: {v:.0%}" for k, v in t["values"].items())


#: The claim-4 row of the mechanism mapping: reported beside the compared one, not judged.
MECHANISM_NOTE = (
    "the mechanism mapping (causal mask = the direct route, the causal run's normaliser at each "
    "layer; residual stream = the indirect + mask-free routes, the causal run's logits) is not "
    "paper 2's mapping: reported beside the ablation mapping's compared row, not compared"
)


def _share_rows(
    comp: pd.DataFrame | None, T: Mapping, n: Mapping[tuple[str, str], int] | None = None
) -> list[Row]:
    """Claim 4 on the ablation mapping (paper 2's own: causal mask = the direct + indirect
    routes, residual stream = the mask-free route), the key-0 column counted (paper 2's
    reconstructed fit), against the paper's value; paper 2's own reading, the mechanism mapping
    and the modelled landmark in the measured text, and a second, measured row per model with
    the mechanism mapping's share. Where token 0 is not fixed the ablation share is 1 by
    construction: not applicable. ``n``: the prompts per (model, dataset), for the power note."""
    t4 = T["claim4_share"]
    src = SOURCES["decomposition_components"]
    n = n or {}
    if comp is None:
        why = "no one-unit decomposition (the config decomposes no model: no ring run)"
        return [not_run(t4, t4["label"], src, why, paper_value=_paper_values(t4))]
    first = comp.groupby(["model", "dataset"], sort=False)["window"].transform("first")
    d = comp[(comp["window"] == first) & (comp["condition"] == t4["condition"])]
    rows = []
    for (model, dataset), g in d.groupby(["model", "dataset"], sort=False):
        by = {r.landmark: r for r in g.itertuples()}
        target = f"{t4['label']} ({model}, {dataset})"
        if "counted" not in by:
            why = "the table has no landmark-counted reading, the one paper 2's fit matches"
            rows.append(not_run(t4, target, src, why))
            continue
        r = by["counted"]
        n_ = n.get((model, dataset), 0)
        rows.append(_ablation_row(t4, r, by.get("modelled"), target, n_, src, T))
        mech = f"{t4['label']}, mechanism mapping ({model}, {dataset})"
        if ring_missing(r):
            rows.append(not_run(t4, mech, src, ring_missing(r)))
            continue
        text = f"{_ci(r, 'share_causal_mask_mechanism')} (landmark counted)"
        if "modelled" in by:
            text += f"; landmark modelled {_ci(by['modelled'], 'share_causal_mask_mechanism')}"
        rows.append(measured_row(t4, mech, text, src, MECHANISM_NOTE))
    return rows


def _ci(r, name: str) -> str:
    """A share of a components row with its interval."""
    return fmt_ci(getattr(r, name), getattr(r, f"{name}_lo"), getattr(r, f"{name}_hi"), 2)


def _ablation_row(t4: Mapping, r, m, target: str, n: int, src: str, T: Mapping) -> Row:
    """Claim 4's compared row of one model: the ablation mapping's share of the counted reading
    ``r`` (``m``: the modelled reading, reported) against the paper's value, or for a pretrained
    model the paper did not run against the paper's range (:func:`_range_row`); an
    inconclusive row says what its decision needs (``n``: its prompts)."""
    model = r.model
    missing = ring_missing(r)
    status = getattr(r, "mask_free_status", TABLE_MEASURED)
    paper = f"{_ci(r, 'share_causal_mask_paper')} (ablation log-attention)"
    parts = [
        "ablation mapping "
        + ("not run (no ring run)" if missing else _ci(r, "share_causal_mask_ablation")),
        f"paper 2's own reading {paper}, edge artefact {fmt(r.share_artefact, 2)} of its "
        "residual reading",
    ]
    if not missing:
        parts.append(f"mechanism mapping {_ci(r, 'share_causal_mask_mechanism')}")
    if m is not None:
        modelled = f"paper 2's own reading {_ci(m, 'share_causal_mask_paper')}"
        if not ring_missing(m):
            modelled = f"ablation mapping {_ci(m, 'share_causal_mask_ablation')}, " + modelled
        parts.append(f"landmark modelled: {modelled}")
    measured = "landmark counted: " + "; ".join(parts)
    if missing:
        return not_run(t4, target, src, missing, paper_value=_paper_values(t4))
    if status != TABLE_MEASURED:
        return target_row(t4, target, measured, NOT_APPLICABLE, src, note=status)
    value = paper_value_for(model, t4["values"], T)
    vals = tuple(float(getattr(r, f"share_causal_mask_ablation{s}")) for s in ("", "_lo", "_hi"))
    where = (str(model), str(r.dataset))
    if value is None:
        return _range_row(t4, r, target, measured, vals, src, (n, where))
    margin = float(t4["margin"])
    row = equivalence_row(t4, target, measured, vals[1:], value, src, f"{value:.0%}")
    row.note = band_power_note(row.verdict, vals, (value - margin, value + margin), n, where)
    return row


#: Why a model with no value of its own is not compared with the paper's range.
NOT_COMPARED = {
    "init_of": "a random-init / init twin ({}): the paper reports no share for this model, and "
    "claim 4 is about trained models",
    "positional": "a model trained here (positional: {}): the paper reports no share for this "
    "model, and claim 4's range is of pretrained models at the paper's scales",
}


def _range_row(t4: Mapping, r, target: str, measured: str, vals, src: str, power) -> Row:
    """Claim 4 on a model the paper did not run: the ablation share's CI (``vals``: estimate,
    lo, hi) against the range of the paper's values widened by the margin
    (:func:`~causalpos.verdicts.within_range`, ``t4["range"]``), with the power note of an
    inconclusive row (``power`` = (prompts, (model, dataset))); a twin or a model trained here
    is measured (:data:`NOT_COMPARED`)."""
    for column, why in NOT_COMPARED.items():
        if (value := getattr(r, column, "")) and isinstance(value, str):
            return measured_row(t4, target, measured, src, why.format(value))
    rng, margin = t4["range"], float(t4["margin"])
    low, high = min(t4["values"].values()), max(t4["values"].values())
    band = (low - margin, high + margin)
    verdict = within_range(vals[1:], low, high, margin)
    fields = {"low": low, "high": high, "margin": margin, "band_lo": band[0], "band_hi": band[1]}
    kw = dict(
        paper_value=f"{low:.0%}-{high:.0%} (the paper's range; no value for this model)",
        falsified_if=" ".join(str(rng["falsified_if"]).format(**fields).split()),
        note=band_power_note(verdict, vals, band, *power),
        rule=rule_text(within_range, low=low, high=high, margin=margin),
    )
    return target_row(t4, target, measured, verdict, src, **kw)


def _scale_rows(sc: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 4's scale shift as a paired contrast: for two models of claim 4's scales on the same
    prompts, the share difference against the paper's (values of ``claim4_share``); random /
    init twins of those architectures: measured."""
    src = SOURCES["scale_contrast"]
    t, t4 = T["claim4_scale"], T["claim4_share"]
    values = t4["values"]
    scales = ", ".join(k.split("/")[-1] for k in values)
    why = (
        f"the config runs fewer than two of claim 4's scales ({scales}) decomposed on the same "
        "prompts (each needs a causal and a bidirectional run)"
    )
    if sc is None:
        return [not_run(t, t["label"], src, why)]
    first = sc.groupby(["model", "model_b", "dataset"], sort=False)["window"].transform("first")
    d = sc[
        (sc["window"] == first)
        & (sc["condition"] == t["condition"])
        & (sc["target"] == t["target"])
    ]
    rows = []
    for r in d.itertuples():
        va = paper_value_for(r.model, values, T)
        vb = paper_value_for(r.model_b, values, T)
        if va is None or vb is None:
            continue
        paper = vb - va
        diff = (r.difference, r.difference_lo, r.difference_hi)
        measured = (
            f"{r.model_b} - {r.model} {fmt_ci(*diff, 2)} (shares {fmt(r.share_causal_mask_b, 2)} "
            f"and {fmt(r.share_causal_mask, 2)}; window {r.window})"
        )
        target = f"{t['label']} ({r.model_b} - {r.model}, {r.dataset})"
        twins = [x for x in (r.init_of, r.init_of_b) if isinstance(x, str) and x]
        if twins:
            note = f"random / init weights ({', '.join(twins)}): the claim is about trained models"
            rows.append(measured_row(t, target, measured, src, note))
            continue
        pv = f"{paper:+.0%} ({vb:.0%} - {va:.0%})"
        rows.append(equivalence_row(t, target, measured, diff[1:], paper, src, pv))
    return rows or [not_run(t, t["label"], src, why)]
