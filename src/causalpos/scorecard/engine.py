"""The declarative scorecard: a target of ``causalpos/targets.yaml`` with a ``table`` field is
judged by this engine; Python row builders remain only for composite claims. Its ``rule`` is
the name of a rule of :mod:`causalpos.verdicts`, a list of them (composite) or ``measured``;
:func:`~causalpos.scorecard.targets.check_targets` refuses a malformed target at load.

The fields of a declarative target (a value ``"{name}"`` in a selection reads the target's own
field; a text with ``*`` is a glob):

``table``
    its scorecard input (a key of :data:`causalpos.catalogue.SCORECARD_TABLES`);
``select``
    ``{column: value}`` (a list: any of them): the rows it judges;
``finite``
    false: rows whose estimate is not finite are judged too (``inconclusive``); default true;
``first``
    a column (``window``) of which each (model, dataset) keeps its first value;
``estimate``, ``lo``, ``hi``
    the columns the rule judges (``lo`` / ``hi`` default ``<estimate>_lo`` / ``_hi``; a rule
    of a value, ``POINT_RULES`` such as ``exact``: the estimate's cell alone);
``check``
    true: a judged row is a check (``holds`` / ``fails``), in the ``checks`` section;
``rule``
    one interval rule of ``PARAMS``, applied with the target's fields it names (``threshold``:
    the row's model's materiality threshold, ``leakage.materiality``);
``own_control``
    true: the row's own negative control (``control_tost_lo``, ``control_tost_hi``,
    ``control_margin``) is read beside it and a ``reproduced`` becomes ``inconclusive`` where it
    reads position (:func:`causalpos.verdicts.unless_control_reads`);
``measured``
    the row's text: ``{column}`` a cell, ``{column:d}`` an integer, ``{column:ci}`` estimate and
    interval (``column``, ``column_lo``, ``column_hi``), ``{column:ci<n>}`` / ``{column:<n>}`` at
    ``n`` significant digits, ``{column:text}`` ("" where empty), ``{column:word}`` its first
    word, another spec Python's; or a list of parts joined by ``measured_sep`` (default
    ``"; "``), each kept where its first field's cell is not empty, or ``{text, when: column,
    else}`` kept where that column's is not (else ``else``); ``{threshold}`` the row's model's;
``premises``
    ``{if: {column: value}, verdict: not run | not applicable, why: template}`` (``null``: an
    empty cell; optional ``unless``) or ``{reason: ring_missing | openings, verdict}``: the
    first that matches decides the row (:func:`causalpos.scorecard.reshape.premise`); ``measured``
    keeps its text (default: on a not-applicable row), ``falsified_if`` the row's own;
``power``
    true: an inconclusive row's note says how many prompts would decide it
    (:func:`causalpos.scorecard.paper2_kinds.power_note`; a ``negative`` rule's interval negated);
``decided_note``
    a template added to the note of a row its rule decides (reproduced, differs);
``measured_extra``
    templates appended where the table has their columns and the first field's cell is finite;
``measured_judged``
    parts (as ``measured``'s) appended to a judged row's text after its own control's;
``where``
    the label's parenthesis (default ``{model}, {dataset}``); ``by_landmark``: true adds
    ``, landmark <name>`` where the selection holds several landmark readings;
``twin``
    the note of a random-init / init twin's row (``init_of``; measured, not judged);
``measured_if``, ``measured_why``
    the rows that are measured, not judged, and why (rule ``measured``: every row);
    ``judged_if`` the converse;
``not_a_test``
    true: every row reads ``measured``, its rule's verdict kept in the note;
``note``
    the note of a judged row;
``wide``, ``reduce``, ``exclude``, ``several``, ``keep``, ``trained_only``, ``join``, ``difference``
    reshapes of the table before its rows are judged (:mod:`causalpos.scorecard.reshape`): a
    long table widened to one row per ``by`` group, groups aggregated, rows left out or kept,
    each row's match read beside it (in this table or the ``join``'s ``table``; ``missing``: the
    text of a row without one), an estimate minus another;
``rule_column``
    true: the row states its rule in the ``rule`` column (:func:`~.rules.rule_text`);
``requires``
    columns the table must have beyond those the other fields name;
``not_run``, ``empty``, ``not_run_columns``
    why there is no row: the table is absent or lacks a column, no row is selected, the table
    lacks a column the target needs (e.g. made before it: what to rerun);
``required``
    columns whose cells must be non-empty (not NaN, not ""): the rows without are not judged;
``partner``
    ``{column, key, on, prefix, measured}``: each row's partner is the table's first row whose
    ``key`` column (default ``model``) equals the row's ``column`` cell and whose ``on`` columns
    (default ``[dataset]``) equal the row's; its cells read as ``{<prefix><column>}``, and
    ``measured`` is appended where the row has one (e.g. a model beside its random-init twin);
``column_text``
    ``{column: [with, without]}``: text appended where the table has the column, and where not;
``group``, ``order``, ``each``, ``tally``, ``pieces``, ``twin_column``, ``no_items``,
``differs_note``
    a target judged over groups of rows (:mod:`causalpos.scorecard.engine_groups`).
"""

from __future__ import annotations

import fnmatch
import string
from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos import verdicts as V
from causalpos.catalogue import SCORECARD_TABLES
from causalpos.scorecard.materiality import for_model
from causalpos.scorecard.reshape import (
    JOINED,
    is_null,
    joined_columns,
    power,
    premise,
    raw_columns,
    reshaped,
    spec_text,
)
from causalpos.scorecard.rows import (
    CHECKS,
    MEASURED,
    NOT_APPLICABLE,
    Row,
    control_note,
    field_text,
    fill,
    fmt,
    fmt_ci,
    measured_row,
    not_run,
    own_control,
    rule_text,
    rules_text,
    target_row,
    text_column,
)
from causalpos.scorecard.targets import MEASURED_RULE, PARAMS, RULES, rule_input, rule_names

#: A row's label after the target's, by default.
WHERE = "{model}, {dataset}"

#: The defaults of a ``partner``: the column its key is matched in, the columns it shares.
PARTNER_KEY, PARTNER_ON = "model", ("dataset",)


def required_rows(sel: pd.DataFrame, t: Mapping) -> pd.DataFrame:
    """The rows of ``sel`` whose cells of target ``t``'s ``required`` columns are non-empty."""
    for col in t.get("required") or ():
        sel = sel[sel[col].notna() & (sel[col].astype(str) != "")]
    return sel


def partner_columns(t: Mapping) -> set[str]:
    """The columns target ``t``'s ``partner`` reads of its table (none without one)."""
    p = t.get("partner")
    if not p:
        return set()
    return {p["column"], p.get("key", PARTNER_KEY), *p.get("on", PARTNER_ON)}


def with_partner(sel: pd.DataFrame, table: pd.DataFrame, t: Mapping) -> pd.DataFrame:
    """``sel`` with its rows' partners' cells as ``<prefix><column>`` (NaN without a partner)
    and ``_has_partner``; ``sel`` itself for a target without ``partner``."""
    p = t.get("partner")
    if not p:
        return sel
    key, on = p.get("key", PARTNER_KEY), list(p.get("on", PARTNER_ON))
    first = table.drop_duplicates([key, *on])
    partners = first.add_prefix(p["prefix"]).assign(_has_partner=True)
    right_on = [p["prefix"] + c for c in (key, *on)]
    out = sel.merge(partners, how="left", left_on=[p["column"], *on], right_on=right_on)
    out.index = sel.index  # one partner at most per row: the rows keep their order
    out["_has_partner"] = out["_has_partner"].eq(True)
    return out


def column_texts(columns, t: Mapping) -> str:
    """Target ``t``'s ``column_text``: per column, its text where ``columns`` hold it, else the
    other."""
    return "".join(
        with_ if col in columns else without
        for col, (with_, without) in (t.get("column_text") or {}).items()
    )


class _Text(string.Formatter):
    """A target's ``measured`` template on one table row: ``{c}`` the cell, ``{c:ci}`` the
    estimate and interval of column ``c``."""

    def __init__(self, row: pd.Series):
        super().__init__()
        self.row = row

    def get_value(self, key, args, kwargs):
        return key

    def format_field(self, value, format_spec):
        r = self.row
        if format_spec == "ci":
            return fmt_ci(r[value], r[f"{value}_lo"], r[f"{value}_hi"])
        if format_spec == "d":
            return str(int(r[value]))
        if format_spec:  # ci<n>, <n>, text, a number's format
            return spec_text(r, value, format_spec)
        return fmt(r[value]) if isinstance(r[value], float) else str(r[value])


def template_columns(template: str) -> set[str]:
    """The columns a ``measured`` template reads."""
    out = set()
    if not isinstance(template, str):  # a list of parts: each read where the table has it
        return out
    for _, name, spec, _ in string.Formatter().parse(template):
        if name:
            out |= {name, f"{name}_lo", f"{name}_hi"} if spec.startswith("ci") else {name}
    return out


def columns(t: Mapping) -> str:
    """The columns target ``t`` needs of its table, space-separated (a table without one of them
    reaches the engine as None: ``not_run``): its partner's and ``required`` columns among them,
    not the partner's own (``<prefix>...``, which the engine adds)."""
    need = raw_columns(t, _named(t)) - {"threshold"}  # a reshape's inputs; the target's threshold
    need |= partner_columns(t) | {*(t.get("required") or ())}
    p = t.get("partner")
    return " ".join(sorted(c for c in need if not (p and c.startswith(p["prefix"]))))


def join_columns(t: Mapping) -> str:
    """The columns target ``t``'s ``join`` needs of its other ``table``, space-separated (a table
    without one of them reaches the engine as None: no row finds its match)."""
    return " ".join(sorted(joined_columns(t, _named(t))))


def _named(t: Mapping) -> set[str]:
    """The columns target ``t``'s estimate, interval, selections and templates name."""
    need = {*(t[k] for k in ("estimate", "lo", "hi") if k in t)}
    need |= {"model"} if t.get("materiality") else set()
    need |= {*(t.get("select") or {}), *(t.get("measured_if") or {}), *(t.get("judged_if") or {})}
    need |= template_columns(t["measured"]) | template_columns(t.get("where", WHERE))
    need |= {t["first"], "model", "dataset"} if t.get("first") else set()
    need |= template_columns((t.get("partner") or {}).get("measured", ""))
    return need


def select_rows(table: pd.DataFrame, t: Mapping) -> pd.DataFrame:
    """The rows of ``table`` target ``t`` judges (``first``, ``select``, a finite estimate)."""
    keep = pd.Series(True, index=table.index)
    if "estimate" in t and t.get("finite", True):
        keep &= np.isfinite(table[t["estimate"]].astype(float))
    if t.get("first"):
        first = table.groupby(["model", "dataset"], sort=False)[t["first"]].transform("first")
        keep &= table[t["first"]] == first
    for col, value in (t.get("select") or {}).items():
        values = value if isinstance(value, list) else [value]
        hit = table[col].isin(values)
        for g in (v for v in values if isinstance(v, str) and "*" in v):  # a glob
            hit |= np.array([fnmatch.fnmatchcase(c, g) for c in table[col].astype(str)], bool)
        keep &= hit
    return table[keep]


def judge(t: Mapping, ci: tuple[float, float]) -> tuple[str, str]:
    """(verdict, rule text) of target ``t``'s rule on the interval ``ci``."""
    (name,) = rule_names(t)
    values = {p: float(t[p]) for p in PARAMS[name]}
    return RULES[name](ci, *values.values()), rule_text(RULES[name], **values)


def declared_rows(
    table: pd.DataFrame | None,
    t: Mapping,
    raw: pd.DataFrame | None = None,
    other: pd.DataFrame | None = None,
) -> list[Row]:
    """The rows of declarative target ``t`` on its table (None: absent, empty or without a
    column :func:`columns` names; ``raw``: the table as read, which says which); ``other``: its
    ``join``'s ``table`` (None: absent or without a column :func:`join_columns` names)."""
    src = SCORECARD_TABLES[t["table"]]
    if table is None:
        why = t["not_run_columns"] if raw is not None and "not_run_columns" in t else t["not_run"]
        return [not_run(t, t["label"], src, fill(why, t))]
    joined = set(join_columns(t).split()) if (t.get("join") or {}).get("table") else set()
    sel = required_rows(reshaped(table, t, select_rows, other, joined), t)
    if sel.empty:
        return [not_run(t, t["label"], src, fill(t.get("empty", t["not_run"]), t))]
    sel = with_partner(with_threshold(sel, t), table, t)
    landmarks = text_column(sel, "landmark")
    several = landmarks.nunique() > 1
    rows = []
    for (_, r), twin, lm in zip(sel.iterrows(), text_column(sel, "init_of"), landmarks):
        where = _Text(r).format(t.get("where", WHERE))
        by_landmark = several and t.get("by_landmark")
        label = f"{t['label']} ({where}" + (f", landmark {lm})" if by_landmark else ")")
        measured = measured_text(r, t) + _extra(r, t) + column_texts(table, t)
        measured += (
            _Text(r).format(t["partner"]["measured"]) if r.get("_has_partner", False) else ""
        )
        if not r.get(JOINED, True) and t["join"].get("missing"):
            rows.append(not_run(t, label, src, _Text(r).format(t["join"]["missing"])))
        elif p := premise(r, t):
            rows.append(premise_row(t, r, p, label, measured, src))
        elif twin:
            rows.append(measured_row(t, label, measured, src, fill(t["twin"], t, init_of=twin)))
        elif rule_names(t) == [MEASURED_RULE] or _measured_only(r, t):
            rows.append(measured_row(t, label, measured, src, fill(t["measured_why"], t)))
        else:
            rows.append(_judged(t, r, label, measured, src))
    return rows


def with_threshold(sel: pd.DataFrame, t: Mapping) -> pd.DataFrame:
    """``sel`` with each row's model's ``threshold`` (what ``{threshold}`` reads), where target
    ``t`` has a threshold and the table no such column."""
    if "threshold" not in t or "threshold" in sel:
        return sel
    models = sel["model"] if "model" in sel else [None] * len(sel)
    own = [float(for_model(t, m)["threshold"] if m is not None else t["threshold"]) for m in models]
    return sel.copy().assign(threshold=own)  # copy: one block, not a fragmented frame


def _extra(r: pd.Series, t: Mapping) -> str:
    """Target ``t``'s ``measured_extra`` templates whose columns row ``r`` has, its first field
    finite."""
    out = ""
    for template in t.get("measured_extra") or ():
        first = next(name for _, name, _, _ in string.Formatter().parse(template) if name)
        if template_columns(template) <= set(r.index) and np.isfinite(float(r[first])):
            out += _Text(r).format(template)
    return out


def _matches(r: pd.Series, cond: Mapping) -> bool:
    """Whether row ``r`` has every ``{column: value}`` of ``cond`` (a text with ``*``: a glob)."""

    def one(have, want) -> bool:
        if isinstance(want, bool):
            return bool(have) == want
        if isinstance(want, str) and "*" in want:
            return fnmatch.fnmatchcase(str(have), want)
        return have == want

    return all(one(r[c], v) for c, v in cond.items())


def _measured_only(r: pd.Series, t: Mapping) -> bool:
    """Whether row ``r`` is one of target ``t``'s ``measured_if`` rows (or not one of its
    ``judged_if`` rows)."""
    cond, judged = t.get("measured_if"), t.get("judged_if")
    return bool(cond) and _matches(r, cond) or bool(judged) and not _matches(r, judged)


def _judged(t: Mapping, r: pd.Series, label: str, measured: str, src: str) -> Row:
    """The row of target ``t`` on table row ``r``, judged by its rule (and its own control)."""
    tm = for_model(t, r["model"]) if "model" in r.index else dict(t)
    verdict, text = judge(tm, rule_input(t, r))
    note = field_text(t, "note")
    if t.get("power"):  # an inconclusive row's prompts to decide it
        note = "; ".join(filter(None, (note, power(tm, r, verdict))))
    if t.get("decided_note") and verdict in (V.REPRODUCED, V.DIFFERS):
        note = "; ".join(filter(None, (note, measured_text(r, {"measured": [t["decided_note"]]}))))
    if t.get("own_control"):
        ctl, ctl_text = own_control(r)
        tested, verdict = verdict, V.unless_control_reads(verdict, ctl)
        measured += f"; {ctl_text}"
        note = "; ".join(filter(None, (note, control_note(tested, verdict))))
        text = rules_text(text, rule_text(V.unless_control_reads) if ctl else "")
    if t.get("measured_judged"):
        measured += "; " + measured_text(r, {**t, "measured": t["measured_judged"]})
    if t.get("not_a_test"):
        note, verdict = f"{note}; its rule says {verdict}", MEASURED
    text = text if t.get("rule_column") else ""
    if t.get("check"):  # holds / fails, counted with the checks
        verdict = V.check(verdict)
        return target_row(tm, label, measured, verdict, src, note=note, rule=text, section=CHECKS)
    return target_row(tm, label, measured, verdict, src, note=note, rule=text)


def measured_text(r: pd.Series, t: Mapping) -> str:
    """Target ``t``'s ``measured`` on row ``r`` (a template or a list of parts, as the module
    says; a column the table lacks reads as empty: "nan" in a kept part)."""
    if isinstance(t["measured"], str):
        return _Text(r).format(t["measured"])
    out = []
    for part in t["measured"]:
        text = part["text"] if isinstance(part, Mapping) else part
        names = [name for _, name, _, _ in string.Formatter().parse(text) if name]
        when = part.get("when") if isinstance(part, Mapping) else (names[0] if names else None)
        cells = r.reindex(r.index.union(sorted(template_columns(text) - set(r.index))))
        if when is None or not is_null(cells.get(when)):
            out.append(_Text(cells).format(text))
        elif isinstance(part, Mapping) and "else" in part:
            out.append(_Text(cells).format(part["else"]))
    return str(t.get("measured_sep", "; ")).join(out)


def premise_row(t: Mapping, r: pd.Series, p: Mapping, label: str, measured: str, src: str) -> Row:
    """The row of premise ``p`` of target ``t`` on row ``r``: its verdict and ``why`` (a template
    of the row's cells); the measured text kept where ``measured`` (default: not applicable)."""
    why = " ".join((p.get("why_text") or _Text(r).format(p["why"])).split())
    keep = p.get("measured", p["verdict"] == NOT_APPLICABLE)
    own = {"falsified_if": " ".join(p["falsified_if"].split())} if p.get("falsified_if") else {}
    return target_row(t, label, measured if keep else "", p["verdict"], src, note=why, **own)
