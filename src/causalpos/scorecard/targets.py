"""The targets' rules, checked when ``causalpos/targets.yaml`` loads (:func:`check_targets`):
every ``rule`` names rules of :mod:`causalpos.verdicts` (:data:`RULES`) or is ``measured``, and
a declarative target names every field the engine needs; anything else is refused, naming the
target, the allowed values and the fix."""

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
    "exact": ("value", "tolerance"),
}
#: The rules the engine applies to the estimate's cell (a value computed exactly), not to an
#: interval: a target with one names no ``lo`` / ``hi``.
POINT_RULES = ("exact",)
REQUIRED_POINT = ("table", "estimate", "measured", "not_run")

#: The fields a declarative target must have: one judged by a rule, one that is measured.
REQUIRED = ("table", "estimate", "lo", "hi", "measured", "not_run")
REQUIRED_MEASURED = ("table", "measured", "not_run", "measured_why")


def rule_names(t: Mapping) -> list[str]:
    """The rules target ``t`` names (its ``rule``: one name or a list)."""
    rule = t.get("rule")
    return [str(r) for r in rule] if isinstance(rule, list) else [str(rule)]


def rule_input(t: Mapping, r: Mapping):
    """What target ``t``'s rule judges on row ``r``: the estimate's cell for a rule of a value
    (:data:`POINT_RULES`, e.g. ``exact``), else the interval."""
    if rule_names(t)[0] in POINT_RULES:
        return float(r[t["estimate"]])
    return (float(r[t["lo"]]), float(r[t["hi"]]))


def with_default_interval(t):
    """Declarative target ``t`` with an interval rule, its ``lo`` / ``hi`` defaulting to
    ``<estimate>_lo`` / ``<estimate>_hi``; any other entry as it is."""
    rules = rule_names(t) if isinstance(t, Mapping) else [MEASURED_RULE]
    if (
        rules[0] in (*POINT_RULES, MEASURED_RULE)
        or not {"table", "estimate"} <= set(t)
        or "each" in t
    ):
        return t
    e = t["estimate"]
    return {**t, "lo": t.get("lo", f"{e}_lo"), "hi": t.get("hi", f"{e}_hi")}


def check_target(name: str, t: Mapping) -> None:
    """Raise ValueError, naming target ``name``, for a rule no module defines and for a
    declarative target (one with a ``table``) the engine cannot judge."""
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
    required = REQUIRED_POINT if rules[0] in POINT_RULES else required
    missing = [k for k in required if k not in t]
    if missing:
        raise ValueError(
            f"{where} reads a table (table: {t['table']!r}) but lacks {', '.join(missing)}: a "
            f"declarative target with rule {t['rule']} names {', '.join(required)} "
            "(causalpos.scorecard.engine)"
        )
    _check_table(where, t)
    check_reshape(where, t)
    check_own_fields(where, t)
    check_texts(where, t)
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


def _check_table(where: str, t: Mapping) -> None:
    """Raise ValueError for a target whose ``table`` is no scorecard input."""
    if t["table"] not in SCORECARD_TABLES:
        raise ValueError(
            f"{where} reads table {t['table']!r}, which is no scorecard input; use one of "
            f"{', '.join(SCORECARD_TABLES)}"
        )


#: The fields a target judged over groups of rows must have (causalpos.scorecard.engine_groups).
REQUIRED_EACH = ("table", "order", "measured", "not_run", "threshold")


def check_each(where: str, t: Mapping) -> None:
    """Raise ValueError, naming the target (``where``), for a malformed target judged over
    groups of rows (its ``each``: :mod:`causalpos.scorecard.engine_groups`)."""
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
    _check_table(where, t)
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


#: The fields of a target's ``partner`` (causalpos.scorecard.engine).
PARTNER = ("column", "prefix", "measured")


def check_partner(where: str, t: Mapping) -> None:
    """Raise ValueError, naming the target (``where``), for a ``partner`` without a field of
    :data:`PARTNER`, a ``required`` that is no list of columns, or a ``column_text`` entry other
    than [with, without] (:mod:`causalpos.scorecard.engine`)."""
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


def _columns(v) -> bool:
    """Whether ``v`` is a non-empty list of column names."""
    return isinstance(v, list) and len(v) > 0 and all(isinstance(x, str) and x for x in v)


def _text(v) -> bool:
    """Whether ``v`` is a non-empty text."""
    return isinstance(v, str) and bool(v)


def _match(v) -> bool:
    """Whether ``v`` is a list of column names or a mapping of column names to column names."""
    if isinstance(v, Mapping):
        return len(v) > 0 and all(_text(k) and _text(x) for k, x in v.items())
    return _columns(v)


#: A reshape field's keys (:mod:`causalpos.scorecard.reshape`): each key's check and what it
#: must be, and the keys it must name.
RESHAPES: dict[str, tuple[dict[str, tuple[Callable, str]], tuple[str, ...]]] = {
    "wide": (
        {k: (_columns, "[column, ...]") for k in ("columns", "values", "by")},
        ("columns", "values"),
    ),
    "reduce": (
        {
            k: (_columns, "[column, ...]")
            for k in ("by", "max", "min", "mean", "sum", "first", "last")
        },
        ("by",),
    ),
    "join": (
        {
            "match": (_match, "[column, ...] or {column: its column, ...}"),
            "prefix": (_text, "a text"),
            "select": (lambda v: isinstance(v, Mapping), "{column: value, ...}"),
            "missing": (_text, "a text"),
            "table": (lambda v: v in SCORECARD_TABLES, "a scorecard input (catalogue)"),
        },
        ("match", "prefix"),
    ),
    "several": (
        {
            "of": (_text, "a column"),
            "by": (_columns, "[column, ...]"),
            "ignore": (lambda v: isinstance(v, Mapping) and len(v) > 0, "{column: value, ...}"),
        },
        ("of",),
    ),
    "difference": (
        {
            "name": (_text, "a column"),
            "of": (_text, "a column"),
            "minus": (_text, "a column"),
            "point": (lambda v: isinstance(v, bool), "true or false"),
        },
        ("name", "of", "minus"),
    ),
}


def check_reshape(where: str, t: Mapping) -> None:
    """Raise ValueError for a reshape field of target ``t`` (:data:`RESHAPES`) that is not a
    mapping, lacks a key it must name, names an unknown key or a malformed value."""
    for field, (keys, required) in RESHAPES.items():
        if field not in t:
            continue
        w = t[field]
        if not isinstance(w, Mapping):
            problem = "it is not a mapping"
        else:
            missing = [k for k in required if k not in w]
            unknown = sorted(set(w) - set(keys))
            bad = [k for k in w if k in keys and not keys[k][0](w[k])]
            problem = "; ".join(
                filter(
                    None,
                    (
                        f"it lacks {', '.join(missing)}" if missing else "",
                        f"{', '.join(unknown)} is no key of it" if unknown else "",
                        ", ".join(f"{k} must be {keys[k][1]}" for k in bad),
                    ),
                )
            )
        if problem:
            shape = "; ".join(f"{k}: {keys[k][1]}" for k in keys)
            raise ValueError(
                f"{where} has {field}: {w!r}: {problem}; declare {field}: {{{shape}}} "
                f"({', '.join(required)} required; causalpos.scorecard.engine)"
            )


def check_own_fields(where: str, t: Mapping) -> None:
    """Raise ValueError for ``trained_only``, ``check`` or ``power`` that is not true / false,
    an ``exclude`` or ``keep`` that is not a mapping, a ``requires`` that is no list of columns, and for a ``select``
    value ``"{name}"`` (its own ``select`` or its ``join``'s) naming no field of target ``t``."""
    for field, what in (("exclude", "left out"), ("keep", "kept")):
        if field in t and not (isinstance(t[field], Mapping) and t[field]):
            raise ValueError(
                f"{where} has {field}: {t[field]!r}; set it to {{column: value}} (the rows "
                f"matching every one are {what}; a text with * is a glob)"
            )
    if "requires" in t and not _columns(t["requires"]):
        raise ValueError(
            f"{where} has requires: {t['requires']!r}; set it to [column, ...] (the columns its "
            "table must have beyond those its fields name)"
        )
    for flag in ("trained_only", "check", "power"):
        if flag in t and not isinstance(t[flag], bool):
            raise ValueError(f"{where} has {flag}: {t[flag]!r}; set it to true or false")
    join = t.get("join") if isinstance(t.get("join"), Mapping) else {}
    for sel in (t.get("select"), join.get("select")):
        for col, v in (sel or {}).items() if isinstance(sel, Mapping) else ():
            if isinstance(v, str) and v.startswith("{") and v.endswith("}") and v[1:-1] not in t:
                raise ValueError(
                    f"{where} selects {col}: {v!r}, but the target has no field {v[1:-1]!r}; "
                    f"declare {v[1:-1]}: <value> (a select value {{name}} reads the target's field)"
                )


#: The verdicts a premise may give (:func:`causalpos.scorecard.reshape.premise`).
PREMISE_VERDICTS = ("not run", "not applicable")
#: The shared reasons a premise may name: functions of :mod:`causalpos.scorecard.rows`
#: (:data:`causalpos.scorecard.reshape.REASONS`).
PREMISE_REASONS = ("ring_missing", "openings")


def check_texts(where: str, t: Mapping) -> None:
    """Raise ValueError for a malformed ``measured``, ``decided_note``, ``measured_sep``,
    ``measured_judged`` or ``premises`` (each as :mod:`causalpos.scorecard.engine` reads it)."""
    parts = t["measured"] if isinstance(t.get("measured"), list) else []
    for part in parts:
        ok = _text(part) or (
            isinstance(part, Mapping)
            and _text(part.get("text"))
            and set(part) <= {"text", "when", "else"}
            and (part.get("when") is None or _text(part.get("when")))
            and (part.get("else") is None or _text(part.get("else")))
        )
        if not ok:
            raise ValueError(
                f"{where} has measured part {part!r}; a part is a template or "
                "{text: template, when: column, else: template} (kept where that column's cell "
                "is finite, else the else template where given)"
            )
    if "decided_note" in t and not (_text(t["decided_note"]) and "{" in t["decided_note"]):
        raise ValueError(
            f"{where} has decided_note: {t['decided_note']!r}; set it to a template of the "
            'row\'s cells (e.g. "{n_sequences:d} prompts, paired replicates")'
        )
    if "measured_sep" in t and not isinstance(t["measured_sep"], str):
        raise ValueError(
            f"{where} has measured_sep: {t['measured_sep']!r}; set it to the text between the "
            'measured parts (e.g. "; ")'
        )
    judged = t.get("measured_judged", [])
    if not isinstance(judged, list) or not all(_text(p) or isinstance(p, Mapping) for p in judged):
        raise ValueError(
            f"{where} has measured_judged: {judged!r}; set it to a list of measured parts (a "
            "template or {text, when, else}), shown after the own control's text on a judged row"
        )
    premises = t.get("premises")
    if premises is None:
        return
    for p in premises if isinstance(premises, list) else [premises]:
        ok = (
            isinstance(p, Mapping)
            and p.get("verdict") in PREMISE_VERDICTS
            and isinstance(p.get("measured", False), bool)
            and (
                (
                    p.get("reason") in PREMISE_REASONS
                    and set(p) <= {"reason", "unless", "verdict", "measured", "falsified_if"}
                    and isinstance(p.get("unless", {}), Mapping)
                )
                or (
                    isinstance(p.get("if"), Mapping)
                    and len(p["if"]) > 0
                    and isinstance(p.get("unless", {}), Mapping)
                    and _text(p.get("why"))
                    and set(p) <= {"if", "unless", "verdict", "why", "measured", "falsified_if"}
                )
            )
        )
        if not ok or not isinstance(premises, list):
            raise ValueError(
                f"{where} has premise {p!r}; premises is a list of {{if: {{column: value}}, "
                f"verdict: {' | '.join(PREMISE_VERDICTS)}, why: template}} (optionally unless: "
                "{column: value}, measured: true | false, falsified_if: text), or of {reason: "
                f"{' | '.join(PREMISE_REASONS)}, verdict: ...}} (optionally unless, measured, "
                "falsified_if)"
            )


def check_targets(spec: Mapping) -> None:
    """:func:`check_target` for every target of a targets file's ``targets`` (``unscored``, a
    list of claims no table measures, has no rule)."""
    for name, t in (spec.get("targets") or {}).items():
        if isinstance(t, Mapping):
            check_target(name, t)
