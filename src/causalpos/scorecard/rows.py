"""A scorecard row and what every row family shares: the labels of rows that are not tests,
the paths rows cite as their source, the targets (``causalpos/targets.yaml``), the formatting
of values and CIs and the text of the rule that decided a row (:func:`rule_text`).

Every row sits in one ``section`` (:data:`SECTIONS`): ``paper 1`` and ``paper 2`` hold the tests
of the papers' claims (``reproduced`` / ``differs`` / ``inconclusive``) and the rows of those
claims that are not tests, which say why: ``not run`` (the config or the tables do not measure
it), ``not applicable`` (the claim's premise does not hold for this model, e.g. no fixed BOS),
``measured`` (the paper gives no value to compare with); ``controls`` the negative (``passed`` /
``reads position`` / ``underpowered``) and positive controls (``recovered`` / ``not
recovered``); ``checks`` the identities that hold by construction (``holds`` / ``fails``). A
row's section is its target's ``section`` (default: its ``paper``) unless its builder names one.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from causalpos.catalogue import SCORECARD_TABLES
from causalpos.scorecard.controls import negative_verdict
from causalpos.scorecard.targets import check_targets, with_default_interval
from causalpos.verdicts import CHECK, CONTROL, TESTED, equivalent

#: A paper-2 table row's ``status`` when its runs were all made (causalpos.paper2.tables.assemble).
TABLE_MEASURED = "measured"
#: A BOS-effects row measured on the residual-stream component (causalpos.paper2.summary.assemble).
RESIDUAL_STREAM = "residual_stream"

NOT_RUN = "not run"
NOT_APPLICABLE = "not applicable"
MEASURED = "measured"
#: The verdicts of rows that are not tests, controls or checks: each says why in its note.
NOT_TESTS = (NOT_RUN, NOT_APPLICABLE, MEASURED)

PAPER1, PAPER2, CONTROLS, CHECKS = "paper 1", "paper 2", "controls", "checks"
#: The scorecard's sections, in order, each with the verdicts its rows may carry.
SECTIONS = {
    PAPER1: (*TESTED, *NOT_TESTS),
    PAPER2: (*TESTED, *NOT_TESTS),
    CONTROLS: (*CONTROL, NOT_RUN),
    CHECKS: (*CHECK, NOT_RUN),
}

#: ``falsified_if`` of a row that is not a test.
NO_TEST = "none: a measurement, not a test"

PathLike = str | os.PathLike | None

#: Input key in ``build_scorecard``'s ``paths`` -> the path a row built from it names as source.
SOURCES = SCORECARD_TABLES

#: The headline table's negative control in the model's units (the control's numerator over the
#: model's denominator), on a causal run's rows where the model has a position-free run.
CONTROL_MODEL_UNITS = ("control_model_units", "control_model_units_lo", "control_model_units_hi")
#: The same control's (1 − 2α) interval and the margin declared for its reading
#: (``leakage.controls``): what :func:`causalpos.verdicts.negative_control` judges.
CONTROL_TOST = ("control_tost_lo", "control_tost_hi", "control_margin")

#: ``reading`` of a row: the quantity its verdict uses (paper 2's leakage: these two).
EXPECTED_MAP = "expected-map"
PER_PROMPT = "per-prompt"


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
    reading: str = ""
    section: str = ""
    #: The rule that decided the row, rendered from its definition with the values it was
    #: applied with (:func:`rule_text`); "" for a row no rule decides.
    rule: str = ""


def check_sections(card: pd.DataFrame) -> None:
    """Raise ValueError when a row has no known section or a verdict its section does not
    allow (e.g. a control that says "reproduced"): the counts per section rely on it."""
    bad = [
        f"{r.target!r}: section {r.section!r}, verdict {r.verdict!r}"
        for r in card.itertuples()
        if r.section not in SECTIONS or r.verdict not in SECTIONS[r.section]
    ]
    if bad:
        raise ValueError(
            "scorecard rows with a verdict their section does not allow (negative controls read "
            "passed / reads position / underpowered, positive controls recovered / not recovered, "
            "checks holds / fails, the papers' sections reproduced / differs / "
            "inconclusive or a reason for not being a test); fix the row builder: " + "; ".join(bad)
        )


def load_targets(source: PathLike | Mapping = None) -> dict:
    """The targets: a mapping as given, the YAML file at ``source``, or the packaged
    ``causalpos/targets.yaml``, an interval rule's ``lo`` / ``hi`` defaulting to its estimate's
    (:func:`~causalpos.scorecard.targets.with_default_interval`), checked
    (:func:`causalpos.scorecard.targets.check_targets`)."""
    if isinstance(source, Mapping):
        spec = dict(source)
    elif source is None:
        spec = yaml.safe_load(resources.files("causalpos").joinpath("targets.yaml").read_text())
    else:
        spec = yaml.safe_load(Path(source).read_text())
    if isinstance(spec.get("targets"), Mapping):
        spec["targets"] = {k: with_default_interval(t) for k, t in spec["targets"].items()}
    check_targets(spec)
    return spec


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


def paper_value_for(name: str, values: Mapping, targets: Mapping) -> float | None:
    """The paper's value for the model ``name`` from ``values`` keyed by the papers' ids."""
    pid = paper_model_id(name, targets)
    if pid is not None and pid in values:
        return float(values[pid])
    low = str(name).lower()
    for key, v in values.items():
        if low in (key.lower(), key.split("/")[-1].lower()):
            return float(v)
    return None


def fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float | np.floating) and not np.isfinite(x)):
        return "nan"
    return f"{float(x):.{digits}g}"


def fmt_ci(est, lo, hi, digits: int = 3) -> str:
    return f"{fmt(est, digits)} [{fmt(lo, digits)}, {fmt(hi, digits)}]"


def fill(template: str, t: Mapping, **extra) -> str:
    """``template`` with ``{name}`` fields from target ``t`` (and ``extra``), on one line."""
    return " ".join(str(template).format(**{**t, **extra}).split())


def field_text(t: Mapping, key: str) -> str:
    """Field ``key`` of target ``t`` on one line ("" if absent)."""
    return " ".join(str(t.get(key, "")).split())


def equivalence_band(t: Mapping, value: float) -> str:
    """``falsified_if`` of an equivalence target, with the band around this row's value."""
    m = float(t["margin"])
    return f"{fill(t['falsified_if'], t)}: [{value - m:.2f}, {value + m:.2f}]"


def index_column(g: pd.DataFrame) -> str:
    """The index column shown next to the CI: the debiased index where the table has it."""
    return "index_debiased" if "index_debiased" in g else "index"


def layer_cis(g: pd.DataFrame) -> str:
    """``L<layer> est [lo, hi]`` of each row of an index table, joined."""
    est = index_column(g)
    return "; ".join(
        f"L{int(r.layer)} {fmt_ci(getattr(r, est), r.ci_lo, r.ci_hi)}" for r in g.itertuples()
    )


def text_column(df: pd.DataFrame, name: str) -> pd.Series:
    """A text column of a table, "" where absent or empty (older tables lack the model columns)."""
    if name not in df:
        return pd.Series([""] * len(df), index=df.index)
    return df[name].fillna("").astype(str)


# The text of the rule that decided a row, rendered from the rule itself (its docstring in
# causalpos.verdicts and the values the row judged it with), so the scorecard's ``rule`` column
# and the findings page that quotes it cannot drift from the rule.

#: A Sphinx role (``:func:`~causalpos.verdicts.decides```): rendered as its last name, in code.
ROLE = re.compile(r":(?:func|data|class|meth|mod|attr):`~?([^`]+)`")


def docstring_text(rule: Callable) -> str:
    """``rule``'s docstring on one line, as Markdown: roles and ````literals```` as inline
    code."""
    doc = inspect.getdoc(rule) or ""
    doc = ROLE.sub(lambda m: f"`{m[1].rsplit('.', 1)[-1]}`", doc)
    doc = re.sub(r"``([^`]+)``", r"`\1`", doc)
    return " ".join(doc.split())


def value_text(x) -> str:
    """A rule's value as the text states it: a number to four significant digits."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    return f"{float(x):.4g}"


def rule_text(rule: Callable, **values) -> str:
    """The rule ``rule`` (a function of :mod:`causalpos.verdicts`) as a row states it: its name,
    the values it was applied with (``name = value``, in the order given) and its docstring.
    ``rule_text(positive, threshold=0.002)`` -> "`positive` (threshold = 0.002): An effect
    larger than `threshold` ..."."""
    given = ", ".join(f"{k} = {value_text(v)}" for k, v in values.items())
    head = f"`{rule.__name__}`" + (f" ({given})" if given else "")
    return f"{head}: {docstring_text(rule)}"


def rules_text(*rules: str) -> str:
    """Several rules applied in turn (a test's rule, then its control's), as one text."""
    return " Then ".join(r for r in rules if r)


def target_row(t: Mapping, target: str, measured: str, verdict: str, source: str, **kw) -> Row:
    """A row of target ``t``; ``kw`` overrides claim, paper_value, falsified_if, note."""
    return Row(
        paper=t["paper"],
        target=target,
        claim=kw.get("claim", field_text(t, "claim")),
        paper_value=kw.get("paper_value", field_text(t, "paper_value")),
        measured=measured,
        verdict=verdict,
        falsified_if=kw.get("falsified_if") or fill(t["falsified_if"], t),
        note=kw.get("note", ""),
        source=source,
        reading=kw.get("reading", field_text(t, "reading")),
        section=kw.get("section") or t.get("section") or t["paper"],
        rule=kw.get("rule", ""),
    )


def equivalence_row(
    t: Mapping, target: str, measured: str, ci, value: float, source: str, paper_value: str, **kw
) -> Row:
    """A row of an equivalence target: ``ci`` (lo, hi) within ±``t["margin"]`` of the paper's
    ``value``, the band named in ``falsified_if``; ``kw`` as :func:`target_row` (e.g. note)."""
    verdict = equivalent(tuple(ci), float(value), float(t["margin"]))
    rule = rule_text(equivalent, paper_value=float(value), margin=float(t["margin"]))
    kw = dict(kw, paper_value=paper_value, falsified_if=equivalence_band(t, value), rule=rule)
    return target_row(t, target, measured, verdict, source, **kw)


def not_run(t: Mapping, target: str, source: str, why: str, **kw) -> Row:
    """A row of target ``t`` that this run did not measure; ``why`` says what would."""
    return target_row(t, target, "", NOT_RUN, source, note=why, **kw)


def measured_row(t: Mapping, target: str, measured: str, source: str, why: str) -> Row:
    """A value reported without a test: the paper gives none for this model or condition."""
    return target_row(
        t, target, measured, MEASURED, source, paper_value="n/a", falsified_if=NO_TEST, note=why
    )


def _getter(r):
    """``r.get`` of a table row given as a Series or a namedtuple."""
    return r.get if isinstance(r, pd.Series) else lambda k, d=None: getattr(r, k, d)


def own_control(r) -> tuple[str, str]:
    """(verdict, text) of the negative control a causal run's headline row ``r`` (a namedtuple or
    Series) carries: its estimate and CI in the model's units and its verdict against the
    declared margin; ("", "no negative control ...") where there is none or a bound is not
    finite."""
    get = _getter(r)
    c = [float(get(k, np.nan)) for k in CONTROL_MODEL_UNITS]
    lo, hi, margin = (float(get(k, np.nan)) for k in CONTROL_TOST)
    if not np.isfinite([*c[1:], lo, hi, margin]).all():
        return "", "no negative control of this model on these prompts"
    verdict = negative_verdict(lo, hi, margin)
    text = f"negative control in the model's units {fmt_ci(*c)} ({verdict}, margin {fmt(margin)})"
    return verdict, text


#: Why claims 1 and 2 are not run on prompts that are not chunks at random offsets.
OPENINGS = (
    "the prompts are document openings (data_mode {mode!r}): their content depends on position, "
    "so the expected map reads the data's own position; the claim needs chunks at random offsets"
)


def openings(r) -> str:
    """The reason a row's prompts cannot carry claims 1 and 2 ("" where they can, or where the
    table does not say how they were drawn)."""
    get = _getter(r)
    mode = get("data_mode", "")
    mode = "" if not isinstance(mode, str) else mode
    return OPENINGS.format(mode=mode) if mode not in ("", "chunks") else ""


def ring_missing(r) -> str:
    """Why a headline decomposition row has no ring components (residual stream, causal mask =
    total minus it, their shares): "" where its ring run was made (a ``ring_run`` cell; without
    that column: ``status`` measured or absent), else the reason, naming the run and the fix.
    Never a verdict on its NaN."""
    get = _getter(r)
    ring = get("ring_run", None)
    status = get("status", TABLE_MEASURED)
    status = status if isinstance(status, str) and status else TABLE_MEASURED
    if (isinstance(ring, str) and ring) or (ring is None and status == TABLE_MEASURED):
        return ""
    what = status.removeprefix(f"{NOT_RUN}: ") if status != TABLE_MEASURED else "no ring run"
    return (
        f"{what}: the residual-stream component is read on the ring run's logits (no mask at "
        "all) and the causal-mask component is the total minus it; add the ring run to the "
        "experiment's variants (leakage.experiments.<name>.variants)"
    )


def control_note(rule: str, verdict: str) -> str:
    """The note of a test row whose own negative control reads position."""
    if rule == verdict:
        return ""
    return (
        f"its rule says {rule}, but the model's own negative control reads position (the "
        "estimator reads an effect where there is none): inconclusive"
    )
