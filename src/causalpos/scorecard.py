"""The reproduction scorecard: each target of both papers as a row that could have failed.

A row holds the claim, the paper's value, the value this run measured (with its CI), a verdict
and the measurement that would have made it ``differs`` (``falsified_if``). The targets — claim
text, paper values, margins, thresholds, which of the papers' models a value belongs to — live in
``causalpos/targets.yaml``; the verdicts come from the rules of :mod:`causalpos.verdicts`, each of
which can return ``reproduced``, ``differs`` and ``inconclusive``. Rows that are not tests say why:
``not run`` (the config or the tables do not measure it), ``not applicable`` (the claim's premise
does not hold for this model, e.g. no fixed BOS) and ``measured`` (the paper gives no value to
compare with).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from causalpos.verdicts import (
    DIFFERS,
    INCONCLUSIVE,
    REPRODUCED,
    TESTED,
    all_of,
    at_most,
    difference_ci,
    equivalent,
    exact,
    fraction,
    increasing,
    nearly_identical,
    positive,
)

#: A paper-2 table row's ``status`` when its runs were all made (causalpos.paper2.tables).
TABLE_MEASURED = "measured"
#: A BOS-effects row measured on the residual-stream component (causalpos.paper2.summary).
RESIDUAL_STREAM = "residual_stream"

NOT_RUN = "not run"
NOT_APPLICABLE = "not applicable"
MEASURED = "measured"

__all__ = [
    "REPRODUCED",
    "DIFFERS",
    "INCONCLUSIVE",
    "NOT_RUN",
    "NOT_APPLICABLE",
    "MEASURED",
    "Row",
    "load_targets",
    "paper_model_id",
    "build_scorecard",
    "to_markdown",
]

PathLike = str | os.PathLike | None
NO_TEST = "none: a measurement, not a test"


@dataclass
class Row:
    paper: str
    target: str
    claim: str
    paper_value: str
    measured: str
    verdict: str
    falsified_if: str
    note: str
    source: str

    def as_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Targets and tables


def load_targets(source: PathLike | Mapping = None) -> dict:
    """The targets: a mapping as given, the YAML file at ``source``, or the packaged
    ``causalpos/targets.yaml``."""
    if isinstance(source, Mapping):
        return dict(source)
    if source is None:
        text = resources.files("causalpos").joinpath("targets.yaml").read_text()
    else:
        text = Path(source).read_text()
    return yaml.safe_load(text)


def paper_model_id(name: str, targets: Mapping) -> str | None:
    """The papers' id of the model a table calls ``name`` (``targets["paper_models"]``), or None.

    A name matches an id it is listed under, the id itself, or the id's last path component
    (case-insensitive): ``llama-3.2-1b`` -> ``meta-llama/Llama-3.2-1B``.
    """
    low = str(name).lower()
    for pid, names in (targets.get("paper_models") or {}).items():
        if name in (names or []) or low in (pid.lower(), pid.split("/")[-1].lower()):
            return pid
    return None


def _value_for(name: str, values: Mapping, targets: Mapping) -> float | None:
    """The paper's value for the model ``name`` from ``values`` keyed by the papers' ids."""
    pid = paper_model_id(name, targets)
    if pid is not None and pid in values:
        return float(values[pid])
    low = str(name).lower()
    for key, v in values.items():
        if low in (key.lower(), key.split("/")[-1].lower()):
            return float(v)
    return None


def _read(path: PathLike, required: tuple[str, ...] = ()) -> pd.DataFrame | None:
    """The table at ``path``; None when absent, empty (e.g. a config with no BOS experiment) or
    lacking a ``required`` column, so its rows read "not run"."""
    if path is None or not Path(path).is_file():
        return None
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    if df.empty or not set(required) <= set(df.columns):
        return None
    return df


def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float | np.floating) and not np.isfinite(x)):
        return "nan"
    return f"{float(x):.{digits}g}"


def _ci(est, lo, hi, digits: int = 3) -> str:
    return f"{_fmt(est, digits)} [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"


def _fill(template: str, t: Mapping, **extra) -> str:
    return " ".join(str(template).format(**{**t, **extra}).split())


def _text(t: Mapping, key: str) -> str:
    return " ".join(str(t.get(key, "")).split())


def _band(t: Mapping, value: float) -> str:
    """``falsified_if`` of an equivalence target, with the band around this row's value."""
    m = float(t["margin"])
    return f"{_fill(t['falsified_if'], t)}: [{value - m:.2f}, {value + m:.2f}]"


def _row(t: Mapping, target: str, measured: str, verdict: str, source: str, **kw) -> Row:
    """A row of target ``t``; ``kw`` overrides claim, paper_value, falsified_if, note."""
    return Row(
        paper=t["paper"],
        target=target,
        claim=kw.get("claim", _text(t, "claim")),
        paper_value=kw.get("paper_value", _text(t, "paper_value")),
        measured=measured,
        verdict=verdict,
        falsified_if=kw.get("falsified_if") or _fill(t["falsified_if"], t),
        note=kw.get("note", ""),
        source=source,
    )


def _not_run(t: Mapping, target: str, source: str, why: str, **kw) -> Row:
    return _row(t, target, "", NOT_RUN, source, note=why, **kw)


def _measured(t: Mapping, target: str, measured: str, source: str, why: str) -> Row:
    """A value reported without a test: the paper gives none for this model or condition."""
    return _row(
        t, target, measured, MEASURED, source, paper_value="n/a", falsified_if=NO_TEST, note=why
    )


def _est(g: pd.DataFrame) -> str:
    """The index column shown next to the CI: the debiased index where the table has it."""
    return "index_debiased" if "index_debiased" in g else "index"


def _layers(g: pd.DataFrame) -> str:
    est = _est(g)
    return "; ".join(
        f"L{int(r.layer)} {_ci(getattr(r, est), r.ci_lo, r.ci_hi)}" for r in g.itertuples()
    )


# --------------------------------------------------------------------------------------------
# Paper 1


def _paper1_theory(theory: pd.DataFrame | None, T: Mapping) -> list[Row]:
    src = "results/sim/theory.csv"
    fig1, closed, mono2, deep = (
        T[k] for k in ("fig1", "closed_form", "monotone_layer2", "monotone_deep")
    )
    deep = {**deep, "layers_str": " or ".join(str(x) for x in deep["layers"])}
    pv_fig1 = ", ".join(f"S({v['query']},{v['key']}) = {v['value']:.3f}" for v in fig1["values"])
    if theory is None:
        why = "the config has no theory section (rule theory_check)"
        return [
            _not_run(fig1, fig1["label"], src, why, paper_value=pv_fig1),
            _not_run(closed, closed["label"], src, why),
            _not_run(mono2, mono2["label"], src, why),
            _not_run(deep, deep["label"], src, why),
        ]
    rows = []
    for v in fig1["values"]:
        q, k, pv = int(v["query"]), int(v["key"]), float(v["value"])
        target = f"{fig1['label']} S({q},{k})"
        hit = theory[(theory["alpha"] == 0) & (theory["query"] == q) & (theory["key"] == k)]
        if hit.empty:
            rows.append(
                _not_run(fig1, target, src, "theory.csv has no alpha = 0 row for this cell")
            )
            continue
        cf = float(hit["closed_form"].iloc[0])
        verdict = exact(cf, pv, float(fig1["tolerance"]))
        note = f"rounds to {cf:.3f}" if verdict == DIFFERS else ""
        rows.append(
            _row(fig1, target, f"{cf:.5f}", verdict, src, paper_value=f"{pv:.3f}", note=note)
        )
    diff = float((theory["closed_form"] - theory["exact_gram"]).abs().max())
    rows.append(
        _row(
            closed,
            closed["label"],
            f"max |diff| = {diff:.1e} over {len(theory)} pairs",
            exact(diff, 0.0, float(closed["tolerance"])),
            src,
        )
    )
    steps = [
        np.diff(g["closed_form"].to_numpy())
        for _, g in theory.sort_values("key").groupby(["alpha", "query"])
    ]
    steps = np.concatenate([s for s in steps if s.size]) if steps else np.array([])
    n_up = int((steps > 0).sum())
    rows.append(
        _row(
            mono2,
            mono2["label"],
            f"{steps.size - n_up} of {steps.size} steps <= 0; smallest step {_fmt(steps.min() if steps.size else math.nan)}",
            fraction(n_up, 0, int(steps.size), float(mono2["threshold"])),
            src,
        )
    )
    rows.append(_monotone_deep(deep))
    return rows


def _monotone_deep(t: Mapping) -> Row:
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
    return _row(
        t,
        t["label"],
        "; ".join(parts),
        all_of(verdicts),
        "exact computation (causalpos.paper1.theory.monotonicity_violations)",
    )


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


def _sim_rows(index: pd.DataFrame | None, T: Mapping) -> list[Row]:
    src = "results/stats/simulation_index.csv"
    t, depth = T["sim_pattern"], T["sim_depth"]
    margin = float(t["margin"])
    if index is None:
        return [
            _not_run(
                {**t, "claim": t["claim_pattern"], "falsified_if": t["falsified_if_pattern"]},
                "Figs. 2, 4, 6, 7, 9, 10",
                src,
                "the config has no simulate section",
                paper_value=_text(t, "paper_value_pattern"),
            )
        ]
    rows = []
    for setting, g in index.groupby("setting", sort=False):
        g = g.sort_values("layer")
        fig = next((f for f in t["figures"] if _matches(g.iloc[0], f["select"])), None)
        cis = list(zip(g["ci_lo"], g["ci_hi"]))
        measured = _layers(g)
        if fig is None or fig["expect"] == "unscored":
            why = "no figure of paper 1 has this setting" if fig is None else _text(fig, "why")
            label = f"simulation ({setting})" if fig is None else f"{fig['label']} ({setting})"
            rows.append(
                Row(
                    t["paper"],
                    label,
                    _text(fig, "claim") if fig else "",
                    _text(t, "paper_value_none") if fig else "",
                    measured,
                    NOT_APPLICABLE if fig is None else MEASURED,
                    NO_TEST,
                    why,
                    src,
                )
            )
            continue
        kind = fig["expect"]
        if kind == "none":
            verdict = all_of(equivalent(ci, 0.0, margin) for ci in cis)
        else:
            verdict = all_of(
                [equivalent(cis[0], 0.0, margin)] + [positive(ci, margin) for ci in cis[1:]]
            )
        rows.append(
            Row(
                t["paper"],
                f"{fig['label']} ({setting})",
                _text(t, f"claim_{kind}"),
                _text(t, f"paper_value_{kind}"),
                measured,
                verdict,
                _fill(t[f"falsified_if_{kind}"], t),
                "",
                src,
            )
        )
        if _matches(g.iloc[0], depth["select"]):
            later = g[g["layer"] > g["layer"].min()]
            rows.append(
                _row(
                    depth,
                    f"{depth['label']} ({setting})",
                    _layers(later),
                    increasing(list(zip(later["ci_lo"], later["ci_hi"]))),
                    src,
                )
            )
    return rows


def _llm_rows(llm: pd.DataFrame | None, T: Mapping) -> list[Row]:
    src = "results/stats/llm_index.csv"
    t = T["llm_pattern"]
    margin, threshold = float(t["margin"]), float(t["threshold"])
    if llm is None:
        return [_not_run(t, t["label"], src, "the config has no paper1_llm models")]
    rows = []
    sel = llm[llm["variant"] == t["variant"]] if "variant" in llm else llm
    for (model, dataset), g in sel.groupby(["model", "dataset"], sort=False):
        g = g.sort_values("layer")
        first, later = g.iloc[0], g.iloc[1:]
        l1 = equivalent((first["ci_lo"], first["ci_hi"]), 0.0, margin)
        per = [positive((r.ci_lo, r.ci_hi), margin) for r in later.itertuples()]
        n_yes, n_und = per.count(REPRODUCED), per.count(INCONCLUSIVE)
        verdict = all_of([l1, fraction(n_yes, n_und, len(per), threshold)])
        est = _est(g)
        med = float(later[est].median()) if len(later) else math.nan
        measured = (
            f"L1 {_ci(first[est], first['ci_lo'], first['ci_hi'])}; layers >= 2: "
            f"{n_yes} of {len(per)} above {margin:g}, {n_und} undecided, "
            f"{len(per) - n_yes - n_und} at or below; median {_fmt(med)} (logit units)"
        )
        note = "" if len(per) else "only one layer: nothing to compare layer 1 with"
        rows.append(
            _row(t, f"{t['label']} ({model}, {dataset})", measured, verdict, src, note=note)
        )
    return rows


def _trained_rows(cmp: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Paper 1 §3's "learned parameters amplify the causal-mask pattern", on the models trained
    here: layer-mean index of each trained variant minus that of its init twin (paired CI)."""
    src = "results/stats/train_comparison.csv"
    t = T["trained_vs_init"]
    if cmp is None:
        return [_not_run(t, t["label"], src, "the config trains no models with init twins")]
    rows = []
    for r in cmp.itertuples():
        lo, hi = r.minus_init_lo, r.minus_init_hi
        amp = getattr(r, "amplification", math.nan)
        measured = f"{_ci(r.minus_init, lo, hi)} (logit units)" + (
            f"; ratio x{_fmt(amp)} [{_fmt(r.amplification_lo)}, {_fmt(r.amplification_hi)}]"
            if amp is not None and np.isfinite(amp)
            else ""
        )
        rows.append(
            _row(
                t,
                f"{t['label']} (trained-{r.variant} vs init)",
                measured,
                positive((lo, hi), float(t["threshold"])),
                src,
                note="scale caveat: logit units (see claim)",
            )
        )
    return rows


_LAYER1_COLUMNS = ("model", "dataset", "layer", "share", "share_lo", "share_hi", "share_minus_l1")
_LAYER1_COLUMNS += ("share_minus_l1_lo", "share_minus_l1_hi")
_BAND_COLUMNS = ("model", "dataset", "layer", "band", "band_lo", "band_hi")
_SHARE_INIT_COLUMNS = ("variant", "share_pooled_minus_init", "share_pooled_minus_init_lo")
_SHARE_INIT_COLUMNS += ("share_pooled_minus_init_hi",)
_TWIN_COLUMNS = ("model", "dataset", "layer", "share")
_NO_NEW_COLUMNS = (
    "the config has no paper1_llm models, or llm_index.csv predates the {what} columns "
    "(rerun aggregate_llm_stats)"
)


def _paper1_models(llm: pd.DataFrame, t: Mapping):
    """(model, dataset, rows sorted by layer) of the table's runs of the target's variant."""
    sel = llm[llm["variant"] == t["variant"]] if "variant" in llm else llm
    for (model, dataset), g in sel.groupby(["model", "dataset"], sort=False):
        yield model, dataset, g.sort_values("layer")


def _llm_layer1_share_rows(llm: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Fig. 5's "except at layer 1" on the scale-free share: share(L) − share(1), paired CI."""
    src = "results/stats/llm_index.csv"
    t = T["llm_layer1_share"]
    if llm is None:
        return [_not_run(t, t["label"], src, _NO_NEW_COLUMNS.format(what="share"))]
    margin, threshold = float(t["margin"]), float(t["threshold"])
    rows = []
    for model, dataset, g in _paper1_models(llm, t):
        first, later = g.iloc[0], g.iloc[1:]
        per = [
            positive((r.share_minus_l1_lo, r.share_minus_l1_hi), margin) for r in later.itertuples()
        ]
        n_yes, n_und = per.count(REPRODUCED), per.count(INCONCLUSIVE)
        med = float(later["share_minus_l1"].median()) if len(later) else math.nan
        measured = (
            f"share L1 {_ci(first['share'], first['share_lo'], first['share_hi'])}; layers >= 2: "
            f"{n_yes} of {len(per)} above layer 1, {n_und} undecided, "
            f"{len(per) - n_yes - n_und} at or below; median share(L) - share(1) {_fmt(med)}"
        )
        note = "" if len(per) else "only one layer: nothing to compare layer 1 with"
        rows.append(
            _row(
                t,
                f"{t['label']} ({model}, {dataset})",
                measured,
                fraction(n_yes, n_und, len(per), threshold),
                src,
                note=note,
            )
        )
    return rows


def _llm_first_keys_rows(llm: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Fig. 5's first keys: the sign of the first-keys band at the scored layers (with CI)."""
    src = "results/stats/llm_index.csv"
    t = T["llm_first_keys"]
    sign = {"negative": -1.0, "positive": 1.0}[str(t["sign"])]
    layers = [int(x) for x in t["layers"]]
    t = {
        **t,
        "layers_str": ", ".join(str(x) for x in layers),
        "other": "at or above" if sign < 0 else "at or below",
    }
    if llm is None:
        return [_not_run(t, t["label"], src, _NO_NEW_COLUMNS.format(what="first-keys band"))]
    margin, threshold = float(t["margin"]), float(t["threshold"])
    word = {1.0: "above", -1.0: "below"}

    def side(lo: float, hi: float) -> str:
        """reproduced: beyond the margin on the paper's side; differs: the CI rules that out."""
        return positive((lo, hi) if sign > 0 else (-hi, -lo), margin)

    rows = []
    for model, dataset, g in _paper1_models(llm, t):
        scored = g[g["layer"].isin(layers)]
        per = [side(r.band_lo, r.band_hi) for r in scored.itertuples()]
        n_yes, n_und = per.count(REPRODUCED), per.count(INCONCLUSIVE)
        later = g[g["layer"] > g["layer"].min()]
        below = int((later["band_hi"] < 0).sum())
        above = int((later["band_lo"] > 0).sum())
        keys = int(g["band_keys"].iloc[0]) if "band_keys" in g else None
        measured = (
            (f"keys 1..{keys}: " if keys else "")
            + "; ".join(
                f"L{int(r.layer)} {_ci(r.band, r.band_lo, r.band_hi)}" for r in scored.itertuples()
            )
            + f" (logit units); all {len(later)} layers >= 2: {below} below 0, {above} above, "
            f"{len(later) - below - above} undecided"
        )
        if "band_with_sink" in g and len(scored):
            r = scored.iloc[0]
            measured += (
                f"; with key 0 kept in the normalization L{int(r['layer'])} "
                f"{_ci(r['band_with_sink'], r['band_with_sink_lo'], r['band_with_sink_hi'])}"
            )
        note = (
            "" if len(scored) else f"the table has none of layers {t['layers_str']} for this model"
        )
        other = [int(r.layer) for r, v in zip(scored.itertuples(), per) if v == DIFFERS]
        if other:
            note = f"the first keys are not {word[sign]} their offsets' level at layer(s) " + (
                ", ".join(map(str, other))
            )
        rows.append(
            _row(
                t,
                f"{t['label']} ({model}, {dataset})",
                measured,
                fraction(n_yes, n_und, len(per), threshold),
                src,
                note=note,
            )
        )
    return rows


def _trained_share_rows(cmp: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """§3 amplification on the scale-free share: trained variant minus its init twin."""
    src = "results/stats/train_comparison.csv"
    t = T["trained_vs_init_share"]
    if cmp is None:
        why = (
            "the config trains no models with init twins, or train_comparison.csv predates the "
            "share columns (rerun compare_trained)"
        )
        return [_not_run(t, t["label"], src, why)]
    rows = []
    for r in cmp.itertuples():
        lo, hi = r.share_pooled_minus_init_lo, r.share_pooled_minus_init_hi
        measured = f"{_ci(r.share_pooled_minus_init, lo, hi)} (share of variance, pooled layers)"
        if "share_pooled" in cmp and "init_share_pooled" in cmp:
            measured += (
                f"; trained {_ci(r.share_pooled, r.share_pooled_lo, r.share_pooled_hi)}, init "
                f"{_ci(r.init_share_pooled, r.init_share_pooled_lo, r.init_share_pooled_hi)}"
            )
        rows.append(
            _row(
                t,
                f"{t['label']} (trained-{r.variant} vs init)",
                measured,
                positive((lo, hi), float(t["threshold"])),
                src,
                note=_text(t, "note_rope") if "nope" not in str(r.variant) else _text(t, "note"),
            )
        )
    return rows


def _llm_twin_share_rows(llm: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """§3 amplification on the scale-free share: a pretrained model minus its random-init twin."""
    src = "results/stats/llm_index.csv"
    t = T["llm_vs_random_share"]
    cols = ("share_pooled", "share_pooled_minus_twin", "share_pooled_minus_twin_lo")
    if llm is None or "twin" not in llm or not set(cols) <= set(llm.columns):
        why = (
            "no paper1_llm model has its random-init twin among the paper1_llm models (a "
            "random_init model `like:` it, on the same datasets), or llm_index.csv predates the "
            "twin columns (rerun aggregate_llm_stats)"
        )
        return [_not_run(t, t["label"], src, why)]
    rows = []
    for model, dataset, g in _paper1_models(llm[llm["twin"].notna()], t):
        r = g.iloc[0]
        lo, hi = r["share_pooled_minus_twin_lo"], r["share_pooled_minus_twin_hi"]
        twin = llm[(llm["model"] == r["twin"]) & (llm["dataset"] == dataset)]
        if "variant" in llm:
            twin = twin[twin["variant"] == t["variant"]]
        measured = f"{_ci(r['share_pooled_minus_twin'], lo, hi)} (share of variance, pooled layers)"
        if len(twin):
            tw = twin.iloc[0]
            measured += (
                f"; {model} {_ci(r['share_pooled'], r['share_pooled_lo'], r['share_pooled_hi'])}, "
                f"{r['twin']} {_ci(tw['share_pooled'], tw['share_pooled_lo'], tw['share_pooled_hi'])}"
            )
        rows.append(
            _row(
                t,
                f"{t['label']} ({model} vs {r['twin']}, {dataset})",
                measured,
                positive((lo, hi), float(t["threshold"])),
                src,
                note=_text(t, "note"),
            )
        )
    return rows


# --------------------------------------------------------------------------------------------
# Paper 2


def _claim1_rows(leak: pd.DataFrame | None, T: Mapping) -> list[Row]:
    src = "results/stats/paper2_leakage_by_model.csv"
    t = T["claim1_logit"]
    if leak is None:
        return [_not_run(t, t["label"], src, "the config has no leakage section")]
    sel = leak[(leak["target"] == t["target"]) & (leak["variant"] == t["variant"])]
    if sel.empty:
        return [_not_run(t, t["label"], src, f"no {t['target']} leakage of a {t['variant']} run")]
    return [
        _row(
            t,
            f"{t['label']} ({r.model}, {r.dataset})",
            _ci(r.estimate, r.lo, r.hi),
            positive((r.lo, r.hi), float(t["threshold"])),
            src,
        )
        for r in sel.itertuples()
    ]


def _decomposition_rows(dec: pd.DataFrame | None, T: Mapping) -> list[Row]:
    src = "results/stats/paper2_decomposition.csv"
    t4, t10 = T["claim4_share"], T["claim10_content"]
    if dec is None:
        why = "the config decomposes no model (no bidirectional variant in leakage)"
        return [
            _not_run(t4, t4["label"], src, why, paper_value=_claim4_paper_values(t4)),
            _not_run(t10, t10["label"], src, why),
        ]
    rows = []
    rope = dec[dec["condition"] == t4["condition"]] if "condition" in dec else dec
    if "status" in rope:
        for r in rope[rope["status"] != TABLE_MEASURED].itertuples():
            rows.append(
                _not_run(
                    t4,
                    f"{t4['label']} ({r.model}, {r.dataset})",
                    src,
                    f"{r.status} (the decomposition needs the causal and the bidirectional run)",
                    paper_value=_claim4_paper_values(t4),
                )
            )
        rope = rope[rope["status"] == TABLE_MEASURED]
    cols = ("share_causal_mask", "share_causal_mask_lo", "share_causal_mask_hi")
    for r in rope.itertuples():
        est, lo, hi = (getattr(r, c) for c in cols)
        measured = f"{_ci(est, lo, hi, 2)}; total {_ci(r.total, r.total_lo, r.total_hi, 3)}"
        value = _value_for(r.model, t4["values"], T)
        target = f"{t4['label']} ({r.model}, {r.dataset})"
        if value is None:
            why = "the paper reports no share for this model"
            rows.append(_measured(t4, target, measured, src, why))
            continue
        m = float(t4["margin"])
        rows.append(
            _row(
                t4,
                target,
                measured,
                equivalent((lo, hi), value, m),
                src,
                paper_value=f"{value:.0%}",
                falsified_if=_band(t4, value),
            )
        )
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
        rows.append(
            _not_run(
                t10,
                t10["label"],
                src,
                "no model is decomposed on two datasets with the same token-0 prefix (e.g. text "
                "and random tokens after the same BOS)",
            )
        )
    for label, g in many:
        est = [tuple(getattr(r, c) for c in cols) for r in g.itertuples()]
        diffs = [
            difference_ci(est[i], est[j]) for i in range(len(est)) for j in range(i + 1, len(est))
        ]
        worst = max(diffs, key=lambda d: abs(d[0]))
        measured = (
            ", ".join(f"{d}: {_ci(*e, 2)}" for d, e in zip(g["dataset"], est))
            + f"; largest difference {_ci(*worst, 2)}"
        )
        rows.append(
            _row(
                t10,
                label,
                measured,
                nearly_identical(est, float(t10["margin"])),
                src,
            )
        )
    return rows


def _claim4_paper_values(t: Mapping) -> str:
    return "; ".join(f"{k}: {v:.0%}" for k, v in t["values"].items())


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


def _controls_rows(ctl: pd.DataFrame | None, T: Mapping) -> list[Row]:
    src = "results/stats/paper2_rope_controls.csv"
    t = T["table6_controls"]
    if ctl is None:
        return [_not_run(t, t["label"], src, "the config has no leakage section")]
    rows = []
    cols = ("share_causal_mask", "share_causal_mask_lo", "share_causal_mask_hi")
    for (model, dataset), g in ctl.groupby(["model", "dataset"], sort=False):
        target = f"{t['label']} ({model}, {dataset})"
        if len(g) < 2:
            continue
        bad = g[list(cols)].isna().any(axis=1)
        if "status" in g:
            bad |= g["status"] != TABLE_MEASURED
        if bad.any():
            missing = [
                f"{r.condition} ({r.status})" if "status" in g else str(r.condition)
                for r in g[bad].itertuples()
            ]
            why = (
                "the causal-mask share needs each condition's bidirectional run; missing for "
                + ", ".join(missing)
            )
            rows.append(_not_run(t, target, src, why))
            continue
        est = [tuple(getattr(r, c) for c in cols) for r in g.itertuples()]
        paired = _paired_differences(g)
        measured = ", ".join(f"{c}: {_ci(*e, 2)}" for c, e in zip(g["condition"], est))
        if paired is not None:
            worst = max(paired, key=lambda d: max(abs(d[1]), abs(d[2])))
            measured += f"; largest paired difference {_ci(*worst, 2)}"
        rows.append(
            _row(
                t,
                target,
                measured,
                nearly_identical(est, float(t["margin"]), paired),
                src,
                note="" if paired is not None else "differences combined as independent samples",
            )
        )
    if not rows:
        rows.append(
            _not_run(
                t,
                t["label"],
                src,
                "only the rope condition was run (no identity_rope / scrambled_rope variants)",
            )
        )
    return rows


def _token0_fixed(p0: pd.DataFrame | None) -> dict[tuple[str, str], bool]:
    """(model, dataset) -> whether token 0 is the same in every prompt (position-0 table)."""
    if p0 is None or "token0_fixed" not in p0:
        return {}
    out = {}
    for (m, d), g in p0.groupby(["model", "dataset"]):
        v = g["token0_fixed"].dropna()
        if len(v):
            out[(m, d)] = bool(v.iloc[0])
    return out


def _window_size(name: str) -> float:
    digits = "".join(ch for ch in str(name) if ch.isdigit())
    return float(digits) if digits else math.inf


def _bos_rows(bos: pd.DataFrame | None, fixed: Mapping, T: Mapping) -> list[Row]:
    src = "results/stats/paper2_bos_effects.csv"
    t = T["table9_bos"]
    pv = "; ".join(f"{k}: {v:+.0%}" for k, v in t["values"].items())
    if bos is None:
        return [_not_run(t, t["label"], src, "the config runs no BOS replacement", paper_value=pv)]
    rows = []
    if "measure" in bos:
        # Table 9's C_res is the residual-stream component: the bidirectional runs' leakage (§3)
        causal_only = bos[bos["measure"] != RESIDUAL_STREAM]
        bos = bos[bos["measure"] == RESIDUAL_STREAM]
        if bos.empty:
            col = "variant" if "variant" in causal_only else "intervention"
            runs = ", ".join(sorted(set(causal_only[col].astype(str))))
            why = (
                f"the BOS replacements were run causally only ({runs}); Table 9's residual-stream "
                "component is the bidirectional-ablation leakage: add <replacement>+bidirectional"
            )
            return [_not_run(t, t["label"], src, why, paper_value=pv)]
    if "status" in bos:
        for r in bos[bos["status"] != TABLE_MEASURED].itertuples():
            target = f"{t['label']} ({r.model}, {r.intervention})"
            rows.append(_not_run(t, target, src, str(r.status), paper_value=pv))
        bos = bos[bos["status"] == TABLE_MEASURED]
    early = bos[bos["bos_window"].astype(str).str.startswith("early")].copy()
    if early.empty:
        return rows or [_not_run(t, t["label"], src, "no early-query window", paper_value=pv)]
    early["_size"] = early["bos_window"].map(_window_size)
    first = early.sort_values("_size").groupby(["model", "dataset", "intervention"]).head(1)
    m = float(t["margin"])
    for r in first.itertuples():
        target = f"{t['label']} ({r.model}, {r.intervention}, {r.bos_window})"
        measured = _ci(r.effect, r.effect_lo, r.effect_hi, 2)
        # the replacement's kind ("mean", "all_gaussian"); older tables name it "intervention"
        kind = getattr(r, "replacement", None) if "replacement" in bos else r.intervention
        value = t["values"].get(kind)
        if value is None:
            why = "the paper reports no value for this intervention"
            rows.append(_measured(t, target, measured, src, why))
            continue
        fal = _band(t, value)
        if fixed.get((r.model, r.dataset)) is False:
            rows.append(
                _row(
                    t,
                    target,
                    measured,
                    NOT_APPLICABLE,
                    src,
                    paper_value=f"{value:+.0%}",
                    falsified_if=fal,
                    note="token 0 varies across prompts: there is no fixed BOS to replace",
                )
            )
            continue
        rows.append(
            _row(
                t,
                target,
                measured,
                equivalent((r.effect_lo, r.effect_hi), float(value), m),
                src,
                paper_value=f"{value:+.0%}",
                falsified_if=fal,
            )
        )
    return rows


def _position0_rows(p0: pd.DataFrame | None, T: Mapping) -> list[Row]:
    src = "results/stats/paper2_position0.csv"
    t = T["claim7_position0"]
    if p0 is None:
        return [_not_run(t, t["label"], src, "the config has no position-0 experiment")]
    rows = []
    tol = float(t["tolerance"])
    for (model, dataset), g in p0[p0["condition"] == "causal"].groupby(
        ["model", "dataset"], sort=False
    ):
        target = f"{t['label']} ({model}, {dataset})"
        std = float(g["std"].max())
        measured = f"max std over layers {std:.2e}" + (
            f"; max |deviation| {float(g['max_abs_dev'].max()):.2e}" if "max_abs_dev" in g else ""
        )
        if "token0_fixed" not in g or g["token0_fixed"].isna().all():
            why = (
                "the position-0 table has no token0_fixed column (made before it was added; "
                "rerun aggregate_leakage): whether token 0 is fixed decides the claim"
            )
            rows.append(_row(t, target, measured, NOT_RUN, src, note=why))
        elif not bool(g["token0_fixed"].dropna().iloc[0]):
            why = "token 0 varies across prompts (no fixed BOS): the claim's premise does not hold"
            rows.append(_row(t, target, measured, NOT_APPLICABLE, src, note=why))
        else:
            rows.append(_row(t, target, measured, exact(std, 0.0, tol), src))
    return rows


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    """A text column of a table, "" where absent or empty (older tables lack the model columns)."""
    if name not in df:
        return pd.Series([""] * len(df), index=df.index)
    return df[name].fillna("").astype(str)


def _architectures(df: pd.DataFrame, T: Mapping) -> pd.Series:
    """rope / ntk / swa / nope per row: the ``positional`` column of the models trained here,
    else the papers' model id looked up in claim3_ntk's ``architectures``; "" if neither."""
    arch = T["claim3_ntk"].get("architectures") or {}
    pos = _col(df, "positional")
    named = df["model"].map(lambda m: arch.get(paper_model_id(m, T) or "", ""))
    return pos.where(pos != "", named)


def _claim3_rows(dec: pd.DataFrame | None, trend: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 3 on the one-factor models trained here and the papers' models: (a) NTK's
    residual-stream share below standard RoPE's, (b) a sliding window's residual-stream leakage
    growing with depth. Init / random twins are not the architectures the claim is about."""
    tn, ts = T["claim3_ntk"], T["claim3_swa"]
    notes = tn.get("architecture_notes") or {}
    rows = []
    src = "results/stats/paper2_decomposition.csv"
    col = tn["column"]
    if dec is None or not {col, f"{col}_lo", f"{col}_hi"} <= set(dec.columns):
        why = "no decomposition table with the residual-stream share (no bidirectional runs)"
        rows.append(_not_run(tn, tn["label"], src, why))
    else:
        d = dec[dec["condition"] == "rope"] if "condition" in dec else dec
        if "status" in d:
            d = d[d["status"] == TABLE_MEASURED]
        d = d.assign(arch_=_architectures(d, T), init_=_col(d, "init_of"))
        d = d[d["init_"] == ""]
        n_pairs = 0
        for dataset, g in d.groupby("dataset", sort=False):
            for ntk in g[g["arch_"] == "ntk"].itertuples():
                for std in g[g["arch_"] == "rope"].itertuples():
                    a = tuple(getattr(std, c) for c in (col, f"{col}_lo", f"{col}_hi"))
                    b = tuple(getattr(ntk, c) for c in (col, f"{col}_lo", f"{col}_hi"))
                    diff = difference_ci(a, b)
                    measured = (
                        f"{std.model} minus {ntk.model}: {_ci(*diff, 2)}; "
                        f"{col} {std.model} {_ci(*a, 2)}, {ntk.model} {_ci(*b, 2)}; residual "
                        f"component {_ci(std.residual, std.residual_lo, std.residual_hi)} vs "
                        f"{_ci(ntk.residual, ntk.residual_lo, ntk.residual_hi)}"
                    )
                    rows.append(
                        _row(
                            tn,
                            f"{tn['label']} ({ntk.model} vs {std.model}, {dataset})",
                            measured,
                            positive(diff[1:], float(tn["threshold"])),
                            src,
                            note="CIs of two models combined as independent samples",
                        )
                    )
                    n_pairs += 1
        if not n_pairs:
            why = (
                "no NTK-scaled and standard-RoPE model (trained here: `positional`; the papers': "
                "targets.yaml claim3_ntk.architectures) decomposed on the same dataset"
            )
            rows.append(_not_run(tn, tn["label"], src, why))
    src = "results/stats/paper2_depth_trend.csv"
    if trend is None:
        why = "no depth-trend table (aggregate_leakage's paper2_depth_trend.csv)"
        return rows + [_not_run(ts, ts["label"], src, why)]
    sel = trend[
        (trend["variant"] == "bidirectional")
        & (trend["target"] == "logattn")
        & (trend["trend"] == ts["trend"])
    ]
    sel = sel.assign(arch_=_architectures(sel, T), init_=_col(sel, "init_of"))
    swa = sel[(sel["arch_"] == "swa") & (sel["init_"] == "")]
    if swa.empty:
        why = (
            "no sliding-window model (trained here: `positional: swa`; the papers': targets.yaml "
            "claim3_ntk.architectures) with a bidirectional run"
        )
        return rows + [_not_run(ts, ts["label"], src, why)]
    for r in swa.itertuples():
        same = sel[sel["dataset"] == r.dataset]
        ctx = [
            f"{o.model} ({'init of ' + o.init_ if o.init_ else o.arch_}) "
            f"{_ci(o.estimate, o.lo, o.hi)}"
            for o in same.itertuples()
            if o.model != r.model and (o.arch_ == "rope" or o.init_ == r.model)
        ]
        measured = f"slope {_ci(r.estimate, r.lo, r.hi)} per layer" + (
            "; " + ", ".join(ctx) if ctx else ""
        )
        pid = paper_model_id(r.model, T)
        rows.append(
            _row(
                ts,
                f"{ts['label']} ({r.model}, {r.dataset})",
                measured,
                positive((r.lo, r.hi), float(ts["threshold"])),
                src,
                note=_text(notes, pid) if pid in notes else "",
            )
        )
    return rows


def _claim6_rows(base: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 6: the linear-in-offset baseline's leakage above the saturated one's (paired)."""
    src = "results/stats/paper2_baseline_comparison.csv"
    t = T["claim6_linear"]
    if base is None:
        why = "no baseline-comparison table (the reducer fits no linear+query, or no leakage)"
        return [_not_run(t, t["label"], src, why)]
    sel = base[(base["variant"] == t["variant"]) & (base["target"] == t["target"])]
    if sel.empty:
        return [_not_run(t, t["label"], src, f"no {t['target']} leakage of a {t['variant']} run")]
    rows = []
    init = _col(sel, "init_of")
    for (model, dataset), g in sel.groupby(["model", "dataset"], sort=False):
        g = g.set_index(["baseline", "measure"])

        def ci(b, m, g=g):
            r = g.loc[(b, m)]
            return _ci(r["estimate"], r["lo"], r["hi"])

        d = g.loc[("linear_minus_saturated", t["measure"])]
        measured = (
            f"linear - saturated {ci('linear_minus_saturated', t['measure'])} "
            f"({t['measure']}); saturated {ci('saturated', t['measure'])}, linear "
            f"{ci('linear', t['measure'])}; null-corrected difference "
            f"{ci('linear_minus_saturated', 'corrected')}"
        )
        target = f"{t['label']} ({model}, {dataset})"
        twin = init[(sel["model"] == model) & (sel["dataset"] == dataset)].iloc[0]
        if twin:
            why = f"init weights of {twin}: no learned offset profile for a baseline to underfit"
            rows.append(_measured(t, target, measured, src, why))
            continue
        verdict = positive((d["lo"], d["hi"]), float(t["threshold"]))
        rows.append(_row(t, target, measured, verdict, src))
    return rows


def _claim8_rows(pr: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 8: the sink heads' values at key 0 decode no prompt content. Scored where token 0
    varies; with a fixed token 0 the probe is at chance by construction (not applicable)."""
    src = "results/stats/paper2_position0_probes.csv"
    t = T["claim8_content"]
    if pr is None:
        return [_not_run(t, t["label"], src, "the config has no position-0 experiment")]
    need = {"token0_fixed", "sink_probe_accuracy_lo", "sink_probe_accuracy_hi"}
    if not need <= set(pr.columns):
        why = (
            "the probe table has no token0_fixed / accuracy CI columns (made before claim 8 was "
            "scored; rerun aggregate_leakage)"
        )
        return [_not_run(t, t["label"], src, why)]
    margin = float(t["margin"])
    rows = []
    for r in pr.to_dict("records"):
        target = f"{t['label']} ({r['model']}, {r['dataset']})"
        acc, null = r.get("sink_probe_accuracy", math.nan), r.get("sink_probe_null_mean", math.nan)
        parts = []
        if np.isfinite(acc):
            parts.append(
                f"sink-value probe {_ci(acc, r['sink_probe_accuracy_lo'], r['sink_probe_accuracy_hi'], 2)}"
                f" vs null mean {_fmt(null, 2)} (p = {_fmt(r.get('sink_probe_p_value'), 2)}, "
                f"chance {_fmt(r.get('sink_probe_chance'), 2)}; {_fmt(r.get('n_sink_heads'))} heads)"
            )
        for pre, name in (
            ("best_layer", "position 0 best layer"),
            ("embedding", "token-0 embedding"),
        ):
            if np.isfinite(r.get(f"{pre}_accuracy", math.nan)):
                where = f" L{int(r['best_layer'])}" if pre == "best_layer" else ""
                parts.append(
                    f"{name}{where} {_fmt(r[f'{pre}_accuracy'], 2)} "
                    f"(p = {_fmt(r.get(f'{pre}_p_value'), 2)})"
                )
        parts.append(
            f"{_fmt(r.get('probe_n_prompts'))} prompts, {_fmt(r.get('probe_n_classes'))} classes"
        )
        measured = "; ".join(parts)
        fixed = r.get("token0_fixed")
        if fixed is None or not np.isfinite(float(fixed)):
            rows.append(_not_run(t, target, src, "the table does not say whether token 0 is fixed"))
        elif int(fixed) == 1:
            why = (
                "token 0 is a fixed BOS: the position-0 state is identical across prompts, so the "
                "probe is at chance by construction and cannot fail"
            )
            rows.append(_row(t, target, measured, NOT_APPLICABLE, src, note=why))
        elif not np.isfinite(acc):
            why = " ".join(
                x
                for x in (
                    str(r.get("sink_probe_note") or ""),
                    str(r.get("probe_note") or ""),
                    f"({_fmt(r.get('n_sink_heads'))} sink heads)",
                )
                if x and x != "nan"
            )
            rows.append(_not_run(t, target, src, f"no sink-value probe: {why}"))
        else:
            lo, hi = r["sink_probe_accuracy_lo"] - null, r["sink_probe_accuracy_hi"] - null
            rows.append(_row(t, target, measured, at_most((lo, hi), margin), src))
    return rows


def _sink_rows(sk: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Sink-reading heads exist: trained model minus its random-init / init twin, number of heads
    at tau (bootstrap CIs over prompts)."""
    src = "results/stats/paper2_sink_heads.csv"
    t = T["sink_heads"]
    if sk is None:
        return [_not_run(t, t["label"], src, "no sink-head table (no SinkReducer output)")]
    if not {"n_sink_heads_lo", "n_sink_heads_hi", "init_of"} <= set(sk.columns):
        why = "the sink-head table has no CI / init_of columns (rerun aggregate_leakage)"
        return [_not_run(t, t["label"], src, why)]
    tau = float(t["tau"])
    sel = sk[(sk["variant"] == t["variant"]) & np.isclose(sk["tau"].astype(float), tau)]
    sel = sel.assign(init_=_col(sel, "init_of"))
    rows = []
    cols = ("n_sink_heads", "n_sink_heads_lo", "n_sink_heads_hi")
    for r in sel[sel["init_"] == ""].itertuples():
        target = f"{t['label']} ({r.model}, {r.dataset}, tau {tau:g})"
        twin = sel[(sel["init_"] == r.model) & (sel["dataset"] == r.dataset)]
        a = tuple(float(getattr(r, c)) for c in cols)
        if twin.empty:
            why = f"no random-init / init twin of {r.model} on {r.dataset} in the table"
            rows.append(_not_run(t, target, src, why))
            continue
        w = twin.iloc[0]
        b = tuple(float(w[c]) for c in cols)
        diff = difference_ci(a, b)
        measured = (
            f"{_ci(*diff)} heads; {r.model} {_ci(*a)} of {int(getattr(r, 'n_heads', 0)) or '?'}, "
            f"{w['model']} {_ci(*b)}"
        )
        rows.append(_row(t, target, measured, positive(diff[1:], float(t["threshold"])), src))
    return rows or [_not_run(t, t["label"], src, f"no {t['variant']} run of a trained model")]


def _unscored_rows(T: Mapping) -> list[Row]:
    return [
        Row(
            u["paper"],
            u["label"],
            _text(u, "claim"),
            _text(u, "paper_value"),
            "",
            NOT_RUN,
            _text(u, "falsified_if"),
            _text(u, "why"),
            "",
        )
        for u in T.get("unscored", [])
    ]


# --------------------------------------------------------------------------------------------


def build_scorecard(
    paths: Mapping[str, PathLike],
    extra: Callable[[Mapping[str, PathLike]], list[Row]] | None = None,
    targets: PathLike | Mapping = None,
) -> pd.DataFrame:
    """The scorecard from the pipeline's tables.

    ``paths`` keys: ``theory`` (results/sim/theory.csv), ``sim_index``
    (results/stats/simulation_index.csv), ``llm_index`` (results/stats/llm_index.csv),
    ``train_comparison`` (results/stats/train_comparison.csv), paper 2's ``leakage_by_model``,
    ``decomposition``, ``rope_controls``, ``bos_effects``, ``position0``
    (results/stats/paper2_*.csv), and optionally ``targets`` (the targets YAML; overridden by the
    ``targets`` argument, default the packaged file). Missing or ``None`` paths make their rows
    "not run". ``extra`` adds rows built from ``paths``.
    """
    spec = load_targets(targets if targets is not None else paths.get("targets"))
    T = dict(spec["targets"])
    T["paper_models"] = spec.get("paper_models", {})
    p0 = _read(paths.get("position0"), ("model", "dataset", "condition", "std"))
    rows = _paper1_theory(_read(paths.get("theory")), T)
    rows += _sim_rows(
        _read(paths.get("sim_index"), ("setting", "layer", "index", "ci_lo", "ci_hi")), T
    )
    rows += _llm_rows(
        _read(paths.get("llm_index"), ("model", "dataset", "layer", "index", "ci_lo", "ci_hi")), T
    )
    rows += _trained_rows(
        _read(
            paths.get("train_comparison"),
            ("variant", "minus_init", "minus_init_lo", "minus_init_hi"),
        ),
        T,
    )
    rows += _llm_layer1_share_rows(_read(paths.get("llm_index"), _LAYER1_COLUMNS), T)
    rows += _llm_first_keys_rows(_read(paths.get("llm_index"), _BAND_COLUMNS), T)
    rows += _trained_share_rows(_read(paths.get("train_comparison"), _SHARE_INIT_COLUMNS), T)
    rows += _llm_twin_share_rows(_read(paths.get("llm_index"), _TWIN_COLUMNS), T)
    rows += _claim1_rows(
        _read(paths.get("leakage_by_model"), ("model", "dataset", "variant", "target", "lo")), T
    )
    rows += _decomposition_rows(
        _read(
            paths.get("decomposition"),
            ("model", "dataset", "total", "share_causal_mask", "share_causal_mask_lo"),
        ),
        T,
    )
    rows += _controls_rows(
        _read(paths.get("rope_controls"), ("model", "dataset", "condition", "share_causal_mask")),
        T,
    )
    rows += _bos_rows(
        _read(
            paths.get("bos_effects"),
            ("model", "dataset", "intervention", "bos_window", "effect", "effect_lo"),
        ),
        _token0_fixed(p0),
        T,
    )
    rows += _position0_rows(p0, T)
    rows += _claim3_rows(_read(paths.get("decomposition"), ("model", "dataset")), _read(paths.get("depth_trend"), ("model", "dataset", "variant", "trend")), T)  # fmt: skip
    rows += _claim6_rows(_read(paths.get("baseline_comparison"), ("model", "dataset", "baseline")), T)  # fmt: skip
    rows += _claim8_rows(_read(paths.get("position0_probes"), ("model", "dataset")), T)
    rows += _sink_rows(_read(paths.get("sink_heads"), ("model", "dataset", "tau", "variant")), T)
    rows += _unscored_rows(T)
    if extra is not None:
        rows += extra(paths)
    return pd.DataFrame([r.as_dict() for r in rows])


def _summary(card: pd.DataFrame) -> list[str]:
    """Per paper: how many rows are tests (could have failed) and how they came out."""
    lines = []
    for paper, g in card.groupby("paper", sort=True):
        counts = g["verdict"].value_counts()
        tested = int(g["verdict"].isin(TESTED).sum())
        got = ", ".join(f"{int(counts.get(v, 0))} {v}" for v in TESTED)
        rest = ", ".join(f"{int(n)} {v}" for v, n in counts.items() if v not in TESTED)
        lines.append(
            f"- **{paper}**: {len(g)} rows; {tested} could have failed ({got})"
            + (f"; {len(g) - tested} are not tests ({rest})" if rest else "")
        )
    return lines


LEGEND = (
    "Verdicts: **reproduced** / **differs** / **inconclusive** come from the rules of "
    "`causalpos.verdicts` (equivalence within a margin, positive beyond a threshold, exact within a "
    "tolerance, a fraction above a threshold, nearly identical across conditions, increasing "
    "across layers), each judged on the measurement's CI; each such row could have come out "
    "*differs*, and its *falsified if* column says which measurement would have made it so. "
    "**not run**, **not applicable** and **measured** rows are not tests; their note says why. "
    "Targets, margins and thresholds: `src/causalpos/targets.yaml`."
)


def to_markdown(card: pd.DataFrame) -> str:
    """A Markdown table (no tabulate dependency), with per-paper counts of falsifiable rows."""
    cols = ["paper", "target", "claim", "paper_value", "measured", "verdict", "falsified_if"]
    head = ["paper", "target", "claim", "paper value", "measured", "verdict", "falsified if"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(cols)]
    for _, r in card.iterrows():
        cells = [str(r[c]) for c in cols]
        if r.get("note") and isinstance(r["note"], str):
            cells[5] = f"{cells[5]}: {r['note']}"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return (
        "# Reproduction scorecard\n\n"
        + "\n".join(_summary(card))
        + "\n\n"
        + LEGEND
        + "\n\n"
        + "\n".join(lines)
        + "\n"
    )


#: Markers of the README block :func:`readme_summary` writes (``causalpos summary --update``).
SUMMARY_BEGIN = "<!-- scorecard-summary: generated by `causalpos summary` -->"
SUMMARY_END = "<!-- /scorecard-summary -->"


def readme_summary(card: pd.DataFrame, *, source: str = "results/report/scorecard.csv") -> str:
    """The README's "what was reproduced" digest of a scorecard: per paper, how many rows could
    have failed and how they came out, then every *differs* and *inconclusive* row by name (the
    findings a reader should see first), between :data:`SUMMARY_BEGIN` / :data:`SUMMARY_END`."""
    tested = card["verdict"].isin(TESTED)
    got = ", ".join(f"{int((card['verdict'] == v).sum())} {v}" for v in TESTED)
    lines = [
        SUMMARY_BEGIN,
        f"From `{source}`: {len(card)} rows, of which {int(tested.sum())} are tests that could "
        f"have come out *differs* ({got}); the other {int((~tested).sum())} say why they are not "
        "tests.",
        "",
        *_summary(card),
    ]
    for verdict in ("differs", "inconclusive"):
        rows = card[card["verdict"] == verdict]
        if len(rows):
            lines += ["", f"*{verdict.capitalize()}* ({len(rows)}):", ""]
            lines += [
                f"- {r['paper']}, {r['target']}: measured {r['measured']}"
                + (f" (paper: {r['paper_value']})" if str(r["paper_value"]) else "")
                for _, r in rows.iterrows()
            ]
    lines.append(SUMMARY_END)
    return "\n".join(lines) + "\n"


def update_readme(readme: str, block: str) -> str:
    """``readme`` with the text between the summary markers (inclusive) replaced by ``block``."""
    try:
        i = readme.index(SUMMARY_BEGIN)
        j = readme.index(SUMMARY_END, i) + len(SUMMARY_END)
    except ValueError:
        raise ValueError(
            f"the README has no summary block: put the lines {SUMMARY_BEGIN!r} and "
            f"{SUMMARY_END!r} where it belongs"
        ) from None
    return readme[:i] + block.rstrip("\n") + readme[j:]
