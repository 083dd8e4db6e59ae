"""The targets' rules, checked when ``causalpos/targets.yaml`` loads: every target's ``rule`` is
the name of a rule of :mod:`causalpos.verdicts` (:data:`RULES`), a list of them for a composite
claim, or ``measured``; a declarative target (one with a ``table``, judged by
:mod:`causalpos.scorecard.engine`) names every field the engine needs. :func:`check_targets`
refuses anything else, naming the target, the allowed values and the fix."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from causalpos import verdicts as V
from causalpos.catalogue import SCORECARD_TABLES

#: The rules a target may name: the verdict rules of :mod:`causalpos.verdicts`.
RULES: dict[str, Callable] = {
    f.__name__: f
    for f in (
        V.equivalent,
        V.within_range,
        V.positive,
        V.negative,
        V.at_most,
        V.exact,
        V.fraction,
        V.nearly_identical,
        V.increasing,
        V.covers,
        V.negative_control,
        V.recovered,
        V.dose_series,
    )
}
#: The ``rule`` of a target whose rows are measurements, not tests.
MEASURED_RULE = "measured"

#: The interval rules the engine dispatches, each with the target fields it is applied with.
PARAMS: dict[str, tuple[str, ...]] = {
    "positive": ("threshold",),
    "negative": ("threshold",),
    "at_most": ("threshold",),
    "equivalent": ("paper_value", "margin"),
    "negative_control": ("margin",),
    "covers": ("value",),
    "recovered": ("truth",),
}

#: The fields a declarative target must have: one judged by a rule, one that is measured.
REQUIRED = ("table", "estimate", "lo", "hi", "measured", "not_run")
REQUIRED_MEASURED = ("table", "measured", "not_run", "measured_why")


def rule_names(t: Mapping) -> list[str]:
    """The rules target ``t`` names (its ``rule``: one name or a list)."""
    rule = t.get("rule")
    return [str(r) for r in rule] if isinstance(rule, list) else [str(rule)]


def check_target(name: str, t: Mapping) -> None:
    """Raise ValueError, naming target ``name``, for a rule :data:`RULES` does not hold and for a
    declarative target (one with a ``table``) missing a field of :data:`REQUIRED`, naming an
    unknown table or a rule the engine cannot dispatch (:data:`PARAMS`) or lacking its
    parameters."""
    where = f"targets.yaml: target {name!r}"
    bad = [r for r in rule_names(t) if r not in RULES and r != MEASURED_RULE]
    if "rule" not in t or bad:
        raise ValueError(
            f"{where} has rule {t.get('rule')!r}: {', '.join(bad) or 'none'} is not a rule of "
            f"causalpos.verdicts; set rule: to one of {', '.join(RULES)} or {MEASURED_RULE} (a "
            "list for a composite claim)"
        )
    sub = t.get("range")
    if isinstance(sub, Mapping) and str(sub.get("rule")) not in RULES:
        raise ValueError(
            f"{where} has range rule {sub.get('rule')!r}, which is not a rule of "
            f"causalpos.verdicts; set range.rule: to one of {', '.join(RULES)}"
        )
    if "table" not in t:
        return
    check_partner(where, t)
    if "each" in t:
        return check_each(where, t)
    rules = rule_names(t)
    required = REQUIRED_MEASURED if rules == [MEASURED_RULE] else REQUIRED
    missing = [k for k in required if k not in t]
    if missing:
        raise ValueError(
            f"{where} reads a table (table: {t['table']!r}) but lacks {', '.join(missing)}: a "
            f"declarative target with rule {t['rule']} names {', '.join(required)} "
            "(causalpos.scorecard.engine)"
        )
    if t["table"] not in SCORECARD_TABLES:
        raise ValueError(
            f"{where} reads table {t['table']!r}, which is no scorecard input; use one of "
            f"{', '.join(SCORECARD_TABLES)}"
        )
    if rules == [MEASURED_RULE]:
        return
    if len(rules) != 1 or rules[0] not in PARAMS:
        raise ValueError(
            f"{where} reads a table with rule {t['rule']!r}; the engine dispatches one of "
            f"{', '.join(PARAMS)} (a composite claim needs a row builder)"
        )
    absent = [p for p in PARAMS[rules[0]] if p not in t and not t.get("materiality")]
    if absent:
        raise ValueError(f"{where}: rule {rules[0]} needs {', '.join(absent)}; declare it")


#: The fields a target judged over groups of rows must have (causalpos.scorecard.engine_groups).
REQUIRED_EACH = ("table", "order", "measured", "not_run", "threshold")


def check_each(where: str, t: Mapping) -> None:
    """Raise ValueError, naming the target (``where``), for a target judged over groups of rows
    (its ``each``) that lacks a field of :data:`REQUIRED_EACH`, reads an unknown table, has a
    ``rule`` other than ``fraction``, an ``each`` without an interval rule of :data:`PARAMS`,
    its ``lo`` / ``hi`` or its parameters, or a ``column_text`` entry other than [with, without]."""
    missing = [k for k in REQUIRED_EACH if k not in t]
    each = t["each"]
    if isinstance(each, Mapping):
        missing += [f"each.{k}" for k in ("rule", "lo", "hi") if k not in each]
    if missing or not isinstance(each, Mapping):
        raise ValueError(
            f"{where} is judged over groups of rows (each: ...) but lacks "
            f"{', '.join(missing) or 'each as a mapping'}: it names {', '.join(REQUIRED_EACH)} "
            "and each: {rule, lo, hi, the rule's parameters} (causalpos.scorecard.engine_groups)"
        )
    if t["table"] not in SCORECARD_TABLES:
        raise ValueError(
            f"{where} reads table {t['table']!r}, which is no scorecard input; use one of "
            f"{', '.join(SCORECARD_TABLES)}"
        )
    if rule_names(t) != ["fraction"] or str(each["rule"]) not in PARAMS:
        raise ValueError(
            f"{where} has rule {t['rule']!r} and each.rule {each['rule']!r}: a target judged over "
            f"groups of rows has rule: fraction and each.rule one of {', '.join(PARAMS)}"
        )
    for p in PARAMS[str(each["rule"])]:
        value = each.get(p)
        if not isinstance(value, int | float) and (not isinstance(value, str) or value not in t):
            raise ValueError(
                f"{where}: each.rule {each['rule']} needs {p}: a number, or the name of a field "
                f"of the target that holds it (e.g. {p}: margin); it has {value!r}"
            )
    check_group_texts(where, t)


def check_group_texts(where: str, t: Mapping) -> None:
    """Raise ValueError, naming the target, for a grouped target's ``tally`` without two
    ``columns`` and a number ``at``, ``pieces`` that are not texts each reading a field, or a
    ``twin_column`` without the ``twin`` note (:mod:`causalpos.scorecard.engine_groups`)."""
    tally = t.get("tally")
    if tally is not None and not (
        isinstance(tally, Mapping)
        and len(tally.get("columns") or ()) == 2
        and isinstance(tally.get("at"), int | float)
    ):
        raise ValueError(
            f"{where} has tally {tally!r}; give tally: {{columns: [lo, hi], at: <number>}} "
            "(optionally skip_first, select)"
        )
    for name, text in (t.get("pieces") or {}).items():
        if not isinstance(text, str) or "{" not in text:
            raise ValueError(
                f"{where}: pieces.{name} is {text!r}; give a template that reads a column "
                "(shown where the table has its columns and its first field is finite)"
            )
    if t.get("twin_column") and "twin" not in t:
        raise ValueError(
            f"{where} has twin_column {t['twin_column']!r} but no twin: give the note of a "
            "twin's row (twin: ..., {init_of} the model that names it)"
        )


#: The fields of a target's ``partner`` (causalpos.scorecard.engine_partner).
PARTNER = ("column", "prefix", "measured")


def check_partner(where: str, t: Mapping) -> None:
    """Raise ValueError, naming the target (``where``), for a ``partner`` without a field of
    :data:`PARTNER`, a ``required`` that is no list of columns, or a ``column_text`` entry other
    than [with, without] (:mod:`causalpos.scorecard.engine_partner`)."""
    p = t.get("partner")
    if p is not None and (not isinstance(p, Mapping) or any(k not in p for k in PARTNER)):
        raise ValueError(
            f"{where} has partner {p!r}: give partner: {{column, prefix, measured}} (and "
            "optionally key, default model, and on, default [dataset]): the column naming each "
            "row's partner, the prefix its cells are read with, the text they add"
        )
    if not isinstance(t.get("required", []), list):
        raise ValueError(f"{where} has required {t['required']!r}; give a list of columns")
    for col, texts in (t.get("column_text") or {}).items():
        if not isinstance(texts, list) or len(texts) != 2:
            raise ValueError(
                f"{where}: column_text.{col} is {texts!r}; give [text where the table has the "
                "column, text where it has not]"
            )


def check_targets(spec: Mapping) -> None:
    """:func:`check_target` for every target of a targets file's ``targets`` (``unscored``, a
    list of claims no table measures, has no rule)."""
    for name, t in (spec.get("targets") or {}).items():
        if isinstance(t, Mapping):
            check_target(name, t)
