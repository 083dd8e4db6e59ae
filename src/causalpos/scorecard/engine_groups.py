"""Declarative targets judged over a group of a table's rows (e.g. one model's layers): the engine
of :mod:`causalpos.scorecard.engine` for a target with an ``each`` field. One scorecard row per
group; each of the group's items (some of its rows) is judged by one interval rule, and the
target's ``rule`` (``fraction``) counts them.

Fields, beside the engine's ``table``, ``select``, ``where``, ``measured``, ``note``,
``not_run`` and ``empty``:

``group``
    the columns whose values make a group (default ``[model, dataset]``), in the order the
    table first shows them;
``order``
    the column the group's rows are sorted by (``layer``); the group's first row in that order
    is the one ``where`` and the ``measured`` cells read;
``each``
    the items and their rule: ``rule`` (one interval rule of
    :data:`~causalpos.scorecard.targets.PARAMS`), ``lo`` and ``hi`` (the interval's columns),
    the rule's parameters (a number, or the name of the target's field that holds it:
    ``threshold: margin``), and which of the group's rows are items: ``skip_first: true``
    leaves out its first row, ``select: {column: value}`` keeps the rows with those values;
``rule``
    ``fraction``, with ``threshold``: at least that fraction of the items reproduced
    (:func:`causalpos.verdicts.fraction`; an undecided item counts as either);
``measured``
    as the engine's, on the group's first row, and with the counts ``{n_items}``,
    ``{n_yes}`` (reproduced), ``{n_undecided}`` (inconclusive), ``{n_no}`` (the rest) and
    ``{column:median}``: the median of the column over the items (``nan`` for none);
``column_text``
    as the engine's (:mod:`causalpos.scorecard.engine_partner`);
``no_items``
    the note of a group without any item (its rule decides nothing: ``inconclusive``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from causalpos.catalogue import SCORECARD_TABLES
from causalpos.scorecard.engine import WHERE, _Text, select_rows, template_columns
from causalpos.scorecard.engine_partner import column_texts
from causalpos.scorecard.rows import Row, field_text, fill, fmt, not_run, target_row
from causalpos.scorecard.targets import PARAMS, RULES
from causalpos.verdicts import INCONCLUSIVE, REPRODUCED, fraction

#: The group of a target without ``group``.
GROUP = ("model", "dataset")
#: The names a grouped target's ``measured`` reads that are counts, not columns.
COUNTS = ("n_items", "n_yes", "n_undecided", "n_no")


class _GroupText(_Text):
    """A grouped target's ``measured`` template: the engine's on the group's first row, the
    counts of :data:`COUNTS` and ``{column:median}`` over the items."""

    def __init__(self, row: pd.Series, items: pd.DataFrame, counts: Mapping[str, int]):
        super().__init__(row)
        self.items, self.counts = items, counts

    def format_field(self, value, format_spec):
        if value in self.counts:
            return str(self.counts[value])
        if format_spec == "median":
            return fmt(float(self.items[value].median()) if len(self.items) else float("nan"))
        return super().format_field(value, format_spec)


def group_columns(t: Mapping) -> str:
    """The columns grouped target ``t`` needs of its table, space-separated (a table without one
    of them reaches the engine as None: its row reads ``not_run``)."""
    each = t["each"]
    need = {*t.get("group", GROUP), t["order"], each["lo"], each["hi"], *(each.get("select") or {})}
    need |= {*(t.get("select") or {})}
    need |= template_columns(t["measured"]) | template_columns(t.get("where", WHERE))
    return " ".join(sorted(need - set(COUNTS)))


def _param(t: Mapping, value) -> float:
    """A rule parameter of ``each``: a number, or the name of the target's field holding it."""
    return float(t[value]) if isinstance(value, str) else float(value)


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
    params = [_param(t, each[p]) for p in PARAMS[name]]
    return [RULES[name]((lo, hi), *params) for lo, hi in zip(sel[each["lo"]], sel[each["hi"]])]


def grouped_rows(table: pd.DataFrame | None, t: Mapping) -> list[Row]:
    """The rows of grouped target ``t`` on its table (None: absent, empty or without a column
    :func:`group_columns` names): one per group, the fraction of its items its rule holds."""
    src = SCORECARD_TABLES[t["table"]]
    if table is None:
        return [not_run(t, t["label"], src, fill(t["not_run"], t))]
    sel = select_rows(table, t)
    if sel.empty:
        return [not_run(t, t["label"], src, fill(t.get("empty", t["not_run"]), t))]
    rows = []
    for _, g in sel.groupby(list(t.get("group", GROUP)), sort=False):
        g = g.sort_values(t["order"], kind="stable")
        its = items(g, t["each"])
        per = item_verdicts(t, its)
        n_yes, n_und = per.count(REPRODUCED), per.count(INCONCLUSIVE)
        counts = {"n_items": len(per), "n_yes": n_yes, "n_undecided": n_und}
        counts["n_no"] = len(per) - n_yes - n_und
        first = g.iloc[0]
        measured = _GroupText(first, its, counts).format(t["measured"])
        measured += column_texts(table, t)
        label = f"{t['label']} ({_Text(first).format(t.get('where', WHERE))})"
        verdict = fraction(n_yes, n_und, len(per), float(t["threshold"]))
        note = field_text(t, "note") if len(per) else fill(t.get("no_items", ""), t)
        rows.append(target_row(t, label, measured, verdict, src, note=note))
    return rows


def is_grouped(t: Mapping) -> bool:
    """Whether target ``t`` is judged over groups of rows (it has ``each``)."""
    return "each" in t
