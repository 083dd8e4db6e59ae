"""Declarative targets judged over groups of a table's rows (a target with ``each``, e.g. one
model's layers): one scorecard row per group, each of its items judged by one interval rule and
counted by the target's ``rule: fraction``. Fields beside the engine's ``table``, ``select``,
``where``, ``measured``, ``note``, ``not_run``, ``empty`` and ``column_text``:

``group``
    the columns whose values make a group (default ``[model, dataset]``), in first-seen order;
``order``
    the column the group's rows are sorted by (``layer``); ``where`` and ``measured`` read the
    group's first row in that order;
``each``
    ``rule`` (an interval rule of :data:`~causalpos.scorecard.targets.PARAMS`), ``lo``, ``hi``,
    the rule's parameters (a number, or the name of the target's field holding it), which rows
    are items (``skip_first: true``, ``select: {column: value}``) and ``text``, a template of
    one item (the items' texts joined by "; " as ``{each}``);
``rule``, ``threshold``
    ``fraction``: at least ``threshold`` of the items reproduced (an undecided item counts as
    either, :func:`causalpos.verdicts.fraction`);
``measured``
    as the engine's, with the counts ``{n_items}``, ``{n_yes}``, ``{n_undecided}``, ``{n_no}``,
    ``{column:median}`` over the items and ``{first_item.column}``;
``tally``
    ``{columns: [lo, hi], at}`` (``skip_first``, ``select`` as ``each``'s): the group's
    intervals below / above / around ``at`` as ``{tally_below}``, ``{tally_above}``,
    ``{tally_between}`` of ``{tally_n}`` (a reading beside the test);
``pieces``
    ``{name: template}`` read as ``{name}``, "" unless the table has its columns and its first
    field's cell is finite;
``twin_column``, ``twin``
    a group whose model some row names in that column is measured, its note ``twin``
    (``{init_of}``: the model naming it);
``differs_note``, ``no_items``
    the note of a group some of whose items differ (``{differs}``: their ``order`` values), and
    of one without items (``inconclusive``).
"""

from __future__ import annotations

import string
from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.catalogue import SCORECARD_TABLES
from causalpos.scorecard.engine import WHERE, _Text, column_texts, select_rows, template_columns
from causalpos.scorecard.rows import Row, field_text, fill, fmt, measured_row, not_run, target_row
from causalpos.scorecard.targets import PARAMS, RULES
from causalpos.verdicts import DIFFERS, INCONCLUSIVE, REPRODUCED, fraction

#: The group of a target without ``group``.
GROUP = ("model", "dataset")
#: The names a grouped target's ``measured`` reads that are counts, not columns.
COUNTS = ("n_items", "n_yes", "n_undecided", "n_no")
#: The names of a ``tally``'s counts.
TALLY = ("tally_n", "tally_below", "tally_above", "tally_between")
#: The prefix of a cell of the group's first item in a template (``{first_item.layer:d}``).
FIRST_ITEM = "first_item."


class _GroupText(_Text):
    """A grouped target's ``measured`` template: the engine's on the group's first row, the
    ``names`` (counts, ``each``, pieces), ``{column:median}`` over the items and
    ``{first_item.column}`` on the group's first item."""

    def __init__(self, row: pd.Series, items: pd.DataFrame, names: Mapping[str, object]):
        super().__init__(row)
        self.items, self.names = items, names

    def get_field(self, field_name, args, kwargs):
        return field_name, field_name

    def format_field(self, value, format_spec):
        if value in self.names:
            return str(self.names[value])
        if value.startswith(FIRST_ITEM):
            return _Text(self.items.iloc[0]).format_field(value[len(FIRST_ITEM) :], format_spec)
        if format_spec == "median":
            return fmt(float(self.items[value].median()) if len(self.items) else float("nan"))
        return super().format_field(value, format_spec)


def _names(template: str) -> set[str]:
    """The columns a grouped template reads (``first_item.`` taken off)."""
    return {c.removeprefix(FIRST_ITEM) for c in template_columns(template)}


def group_columns(t: Mapping) -> str:
    """The columns grouped target ``t`` needs of its table, space-separated (a table without one
    of them reaches the engine as None: its row reads ``not_run``; ``pieces`` read optional
    columns)."""
    each = t["each"]
    need = {*t.get("group", GROUP), t["order"], each["lo"], each["hi"], *(each.get("select") or {})}
    need |= {*(t.get("select") or {})} | _names(each.get("text", ""))
    need |= {*(t.get("tally") or {}).get("columns", ())}
    need |= _names(t["measured"]) | template_columns(t.get("where", WHERE))
    return " ".join(sorted(need - {*COUNTS, *TALLY, "each", *(t.get("pieces") or {})}))


def items(g: pd.DataFrame, each: Mapping) -> pd.DataFrame:
    """The items of one group (its rows sorted by ``order``): ``skip_first``, ``select``."""
    out = g.iloc[1:] if each.get("skip_first") else g
    for col, value in (each.get("select") or {}).items():
        out = out[out[col].isin(value if isinstance(value, list) else [value])]
    return out


def item_verdicts(t: Mapping, sel: pd.DataFrame) -> list[str]:
    """The verdict of ``each``'s rule on every item of ``sel``, in order."""
    each = t["each"]
    name = str(each["rule"])
    params = [float(t[v] if isinstance(v, str) else v) for v in (each[p] for p in PARAMS[name])]
    return [RULES[name]((lo, hi), *params) for lo, hi in zip(sel[each["lo"]], sel[each["hi"]])]


def tally(g: pd.DataFrame, t: Mapping) -> dict[str, int]:
    """Target ``t``'s ``tally`` of one group: its intervals ``columns`` (lo, hi) below, above
    and around the value ``at`` (:data:`TALLY`); none without a ``tally``."""
    spec = t.get("tally")
    if not spec:
        return {}
    rows = items(g, spec)
    lo, hi = (rows[c].astype(float) for c in spec["columns"])
    below, above = int((hi < float(spec["at"])).sum()), int((lo > float(spec["at"])).sum())
    n = len(rows)
    return dict(zip(TALLY, (n, below, above, n - below - above)))


def pieces(first: pd.Series, its: pd.DataFrame, table: pd.DataFrame, t: Mapping) -> dict:
    """Target ``t``'s ``pieces`` on one group: each template's text where the table has the
    columns it reads and its first field's cell is finite (an item's: the group has one), else
    ""."""
    out = {}
    for name, template in (t.get("pieces") or {}).items():
        field = next(n for _, n, _, _ in string.Formatter().parse(template) if n)
        item = field.startswith(FIRST_ITEM)
        row = its.iloc[0] if item and len(its) else None if item else first
        ok = _names(template) <= set(table.columns) and row is not None
        ok = ok and np.isfinite(float(row[field.removeprefix(FIRST_ITEM)]))
        out[name] = _GroupText(first, its, {}).format(template) if ok else ""
    return out


def twins_of(table: pd.DataFrame, t: Mapping) -> dict[str, str]:
    """Twin -> the model that names it in target ``t``'s ``twin_column`` (none without one, or
    where the table lacks the column)."""
    col = t.get("twin_column")
    if not col or col not in table:
        return {}
    pairs = table[table[col].notna()][["model", col]].drop_duplicates()
    return {str(tw): str(m) for m, tw in zip(pairs["model"], pairs[col]) if str(tw)}


def _note(t: Mapping, g: pd.DataFrame, per: list[str]) -> str:
    """The note of a group: ``no_items`` without items, ``differs_note`` where some differ
    (``{differs}``: their ``order`` values), else the target's ``note``."""
    if not per:
        return fill(t.get("no_items", ""), t)
    order = items(g, t["each"])[t["order"]]
    differs = [str(int(v)) for v, verdict in zip(order, per) if verdict == DIFFERS]
    if differs and t.get("differs_note"):
        return fill(t["differs_note"], t, differs=", ".join(differs))
    return field_text(t, "note")


def grouped_rows(table: pd.DataFrame | None, t: Mapping) -> list[Row]:
    """The rows of grouped target ``t`` on its table (None: absent, empty or without a column
    :func:`group_columns` names): one per group, the fraction of its items its rule holds."""
    src = SCORECARD_TABLES[t["table"]]
    if table is None:
        return [not_run(t, t["label"], src, fill(t["not_run"], t))]
    sel = select_rows(table, t)
    if sel.empty:
        return [not_run(t, t["label"], src, fill(t.get("empty", t["not_run"]), t))]
    rows, twins = [], twins_of(table, t)
    for _, g in sel.groupby(list(t.get("group", GROUP)), sort=False):
        g = g.sort_values(t["order"], kind="stable")
        its = items(g, t["each"])
        per = item_verdicts(t, its)
        n_yes, n_und = per.count(REPRODUCED), per.count(INCONCLUSIVE)
        names = {"n_items": len(per), "n_yes": n_yes, "n_undecided": n_und}
        names["n_no"] = len(per) - n_yes - n_und
        each = t["each"].get("text")
        names["each"] = "; ".join(_Text(r).format(each) for _, r in its.iterrows()) if each else ""
        first = g.iloc[0]
        names |= tally(g, t) | pieces(first, its, table, t)
        measured = _GroupText(first, its, names).format(t["measured"])
        measured += column_texts(table, t)
        label = f"{t['label']} ({_Text(first).format(t.get('where', WHERE))})"
        if str(first.get("model")) in twins:
            why = fill(t["twin"], t, init_of=twins[str(first["model"])])
            rows.append(measured_row(t, label, measured, src, why))
            continue
        verdict = fraction(n_yes, n_und, len(per), float(t["threshold"]))
        rows.append(target_row(t, label, measured, verdict, src, note=_note(t, g, per)))
    return rows
