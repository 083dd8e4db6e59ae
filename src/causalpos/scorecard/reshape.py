"""The rows a declarative target (:mod:`causalpos.scorecard.engine`) judges: the table reshapes
it declares, applied before its rows are judged (:func:`reshaped`: ``wide``, ``reduce``,
``exclude`` / ``several`` / ``keep`` / ``trained_only``, ``join`` and ``difference``), and its
``premises``, the rows it does not judge because a column or a shared reason (:data:`REASONS`)
says the claim's premise does not hold or is not known (:func:`premise`); beside them its
templates' format specs beyond ``ci`` and ``d`` and an inconclusive row's power note."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

import causalpos.scorecard.rows as rows
from causalpos.scorecard.paper2_kinds import power_note
from causalpos.scorecard.rows import fmt, fmt_ci, text_column
from causalpos.scorecard.targets import PREMISE_REASONS
from causalpos.verdicts import difference_ci

#: The reasons a premise may name (``reason``): functions of :mod:`causalpos.scorecard.rows`,
#: each saying why a row cannot be judged ("" where it can), shared with the row builders that
#: read the same tables.
REASONS = {name: getattr(rows, name) for name in PREMISE_REASONS}


def is_null(v) -> bool:
    """Whether a cell holds nothing: absent (None), NaN or an empty text."""
    if v is None:
        return True
    if isinstance(v, str):
        return v == "" or v == "nan"
    try:
        return not np.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def cell_matches(have, want) -> bool:
    """Whether a cell matches a premise's value: null (None) an empty cell, a bool the cell's
    truth (an empty cell matches neither), a text with ``*`` a glob, else equality."""
    if want is None:
        return is_null(have)
    if is_null(have):
        return False
    if isinstance(want, bool):
        return bool(have) == want
    if isinstance(want, str) and "*" in want:
        return fnmatch.fnmatchcase(str(have), want)
    if isinstance(want, int | float) and not isinstance(have, str):
        return float(have) == float(want)
    return str(have) == str(want)


def matches(r: pd.Series, cond: Mapping) -> bool:
    """Whether row ``r`` matches every ``{column: value}`` of ``cond`` (:func:`cell_matches`; a
    list of values: any of them; a column the row lacks reads as empty)."""

    return all(
        any(cell_matches(r.get(c), w) for w in (v if isinstance(v, list) else [v]))
        for c, v in cond.items()
    )


def premise(r: pd.Series, t: Mapping) -> Mapping | None:
    """The first of target ``t``'s ``premises`` that decides row ``r``: one whose ``reason``
    (:data:`REASONS`) gives a text (then its ``why``), or whose ``if`` the row matches, and
    whose ``unless`` (optional, either kind) it does not (:func:`matches`); None where none
    does."""
    for p in t.get("premises") or ():
        if p.get("unless") and matches(r, p["unless"]):
            continue
        if "reason" not in p and matches(r, p["if"]):
            return p
        if "reason" in p and (why := REASONS[p["reason"]](r)):
            return {**p, "why_text": why}
    return None


def spec_text(r: pd.Series, column: str, spec: str) -> str:
    """Cell ``column`` of row ``r`` under a template's format ``spec``: ``ci<n>`` its estimate
    and interval at ``n`` significant digits, ``<n>`` the cell at ``n``, ``text`` a text cell
    ("" where empty), ``word`` a text cell's first word (e.g. the kind of ``sliding512 minus
    global``), any other spec Python's format of the number (e.g. ``.2e``)."""
    v = r[column]
    if spec.startswith("ci") and spec[2:].isdigit():
        return fmt_ci(v, r[f"{column}_lo"], r[f"{column}_hi"], int(spec[2:]))
    if spec.isdigit():
        return fmt(v, int(spec))
    if spec == "text":
        return "" if is_null(v) else str(v)
    if spec == "word":
        return str(v).split()[0]
    return format(float(v), spec)


def power(t: Mapping, r: pd.Series, verdict: str) -> str:
    """An inconclusive row's power note (:func:`causalpos.scorecard.paper2_kinds.power_note`):
    the prompts (of ``n_sequences``) its estimate's interval would need to clear target ``t``'s
    threshold (a ``negative`` rule's: the negated interval's above it); "" for a decided row."""
    n = float(r.get("n_sequences", np.nan))
    vals = (float(r[t["estimate"]]), float(r[t["lo"]]), float(r[t["hi"]]))
    if t.get("rule") == "negative":  # below -threshold: the negated interval above it
        vals = (-vals[0], -vals[2], -vals[1])
    where = (str(r.get("model", "")), str(r.get("dataset", "")))
    return power_note(verdict, vals, float(t["threshold"]), int(n) if np.isfinite(n) else 0, where)


#: The rows a ``wide`` target makes one of, by default.
WIDE_BY = ("model", "dataset")


def widen(table: pd.DataFrame, w: Mapping) -> pd.DataFrame:
    """One row per ``w["by"]`` group (default model, dataset; first-seen order) of a long table:
    each row of the group gives columns named by its ``w["columns"]`` cells joined by ``_``: the
    first of ``w["values"]`` under that name, the others with ``_<value>`` appended (values
    ``[estimate, lo, hi]``: ``<name>``, ``<name>_lo``, ``<name>_hi``, a ``{<name>:ci}``). The
    group's other columns keep its first row's cells."""
    keys, values = list(w["columns"]), list(w["values"])
    by = list(w.get("by", WIDE_BY))
    out = []
    for _, g in table.groupby(by, sort=False):
        row = g.iloc[0].drop(keys + values).to_dict()
        for _, r in g.iterrows():
            name = "_".join(str(r[k]) for k in keys)
            for i, v in enumerate(values):
                row[name + ("" if i == 0 else f"_{v}")] = r[v]
        out.append(row)
    return pd.DataFrame(out)


def wide_columns(w: Mapping) -> set[str]:
    """The columns of the long table ``widen`` reads."""
    return {*w["columns"], *w["values"], *w.get("by", WIDE_BY)}


#: The column :func:`join` marks the rows that found their match in.
JOINED = "_joined"


def own_fields(select: Mapping | None, t: Mapping) -> dict:
    """``select`` with each ``"{name}"`` value replaced by target ``t``'s field ``name`` (e.g.
    ``tau: "{tau}"``: the rows at the target's own tau)."""
    out = {}
    for col, value in (select or {}).items():
        if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
            value = t[value[1:-1]]
        out[col] = value
    return out


def join_pairs(j: Mapping) -> list[tuple[str, str]]:
    """(this row's column, the matching row's column) of a ``join``'s ``match`` (a list: the
    same column on both sides)."""
    on = j["match"]
    return list(on.items()) if isinstance(on, Mapping) else [(c, c) for c in on]


def join(sel: pd.DataFrame, table: pd.DataFrame, j: Mapping, t: Mapping) -> pd.DataFrame:
    """``sel`` with the columns of each row's first match in ``table`` (the rows of ``j``'s
    ``select``, equal on ``j["match"]``; a mapping ``{this: other}`` matches this row's cell of
    ``this`` with the other's of ``other``), each named ``j["prefix"]`` + its name; cells are
    compared as text. Rows without a match keep NaN there; :data:`JOINED` says which found one."""
    pairs = join_pairs(j)
    other = table[_matches(table, own_fields(j.get("select"), t))]
    keys = [f"_key{i}" for i in range(len(pairs))]
    left = sel.assign(**{k: text_column(sel, a) for k, (a, _) in zip(keys, pairs)})
    right = other.assign(**{k: text_column(other, b) for k, (_, b) in zip(keys, pairs)})
    right = right.drop_duplicates(keys, keep="first")
    right = right.rename(columns={c: j["prefix"] + c for c in other.columns})
    merged = left.reset_index(drop=True).merge(right.assign(**{JOINED: True}), how="left", on=keys)
    return merged.drop(columns=keys).assign(**{JOINED: lambda d: d[JOINED].eq(True)})


def _matches(table: pd.DataFrame, select: Mapping) -> pd.Series:
    keep = pd.Series(True, index=table.index)
    for col, value in select.items():
        keep &= table[col].isin(value if isinstance(value, list) else [value])
    return keep


def difference(sel: pd.DataFrame, d: Mapping) -> pd.DataFrame:
    """``sel`` with ``d["name"]`` (and ``_lo``, ``_hi``): each row's ``d["of"]`` minus its
    ``d["minus"]`` (each an estimate with ``_lo``, ``_hi`` columns), CIs combined as independent
    samples (:func:`causalpos.verdicts.difference_ci`); ``point``: true, ``minus`` is a number
    without an interval (e.g. a permutation null's mean), by which ``of``'s interval shifts."""
    triple = lambda r, c: (r[c], r[f"{c}_lo"], r[f"{c}_hi"])  # noqa: E731
    if d.get("point"):  # a number without an interval: the interval shifts by it
        m = sel[d["minus"]].astype(float).to_numpy()
        of = sel[[d["of"], f"{d['of']}_lo", f"{d['of']}_hi"]].astype(float).to_numpy()
        values = of - m[:, None]
    else:
        diffs = [
            difference_ci(triple(r, d["of"]), triple(r, d["minus"])) for _, r in sel.iterrows()
        ]
        values = np.array(diffs, dtype=float).reshape(len(sel), 3)
    name = d["name"]
    return sel.assign(
        **{name: values[:, 0], f"{name}_lo": values[:, 1], f"{name}_hi": values[:, 2]}
    )


def raw_columns(t: Mapping, need: set[str]) -> set[str]:
    """The columns of its table target ``t`` needs, from those its templates and rule name
    (``need``): a ``wide`` target's long table's; a ``difference``'s inputs for its result; a
    ``join``ed column's own name, and the columns it selects and matches on; those it
    ``requires``."""
    if rd := t.get("reduce"):  # the columns it aggregates are read where the table has them
        need = (need - {c for op in REDUCTIONS for c in rd.get(op) or ()}) | set(rd["by"])
        need |= {t["estimate"]} if "estimate" in t else set()
    if t.get("wide"):
        keys = (
            *(t.get("select") or {}),
            *(t.get("measured_if") or {}),
            *(t.get("judged_if") or {}),
        )
        return {*keys, *wide_columns(t["wide"])} | ({"model"} if t.get("materiality") else set())
    if d := t.get("difference"):
        need = need - {d["name"], f"{d['name']}_lo", f"{d['name']}_hi"}
        need |= {d["of"] + s for s in ("", "_lo", "_hi")}
        need |= {d["minus"]} if d.get("point") else {d["minus"] + s for s in ("", "_lo", "_hi")}
    if (j := t.get("join")) and j.get("table"):  # the joined columns are the other table's
        need = {c for c in need if not c.startswith(j["prefix"])}
        need |= {a for a, _ in join_pairs(j)}
    elif j:
        need = {c.removeprefix(j["prefix"]) for c in need}
        need |= {c for pair in join_pairs(j) for c in pair} | set(j.get("select") or {})
    if s := t.get("several"):
        need |= {s["of"], *s.get("by", WIDE_BY), *(s.get("ignore") or {})}
    need |= set(t.get("keep") or {})
    need |= set(t.get("requires") or ())
    return need | ({"init_of"} if t.get("trained_only") else set())


def joined_columns(t: Mapping, need: set[str]) -> set[str]:
    """The columns of the other table a ``join`` with a ``table`` reads, from those target
    ``t``'s templates and rule name (``need``): each one named with the join's ``prefix``,
    without it, and the columns it matches on and selects."""
    j = t["join"]
    own = {c.removeprefix(j["prefix"]) for c in need if c.startswith(j["prefix"])}
    return own | {b for _, b in join_pairs(j)} | set(j.get("select") or {})


#: The aggregations ``reduce`` may name.
REDUCTIONS = ("max", "min", "mean", "sum", "first", "last")


def reduce(sel: pd.DataFrame, r: Mapping) -> pd.DataFrame:
    """One row per ``r["by"]`` group (first-seen order): its ``by`` cells and, for each of
    :data:`REDUCTIONS` that ``r`` names, the columns it lists aggregated so (pandas'; NaN
    skipped, e.g. ``first``: the first non-empty cell); a listed column the table lacks is left
    out (a template part that reads it is then left out too)."""
    by = list(r["by"])
    how = {c: op for op in REDUCTIONS for c in r.get(op) or () if c in sel.columns}
    return sel.groupby(by, sort=False).agg(how).reset_index()


def several(sel: pd.DataFrame, s: Mapping) -> pd.DataFrame:
    """The rows of ``sel`` whose ``s["by"]`` group (default model, dataset) holds more than one
    value of column ``s["of"]`` (e.g. a model with several layer kinds), counted over its rows
    that do not match ``s["ignore"]`` (optional ``{column: value}``, e.g. a kind's contrast
    rows ``"* minus global"``)."""
    by = list(s.get("by", WIDE_BY))
    counted = (
        sel[[not matches(r, s["ignore"]) for _, r in sel.iterrows()]] if s.get("ignore") else sel
    )
    n = counted.groupby(by, sort=False)[s["of"]].nunique().rename("_n")
    return sel[sel.join(n, on=by)["_n"].fillna(0).to_numpy() > 1]


#: The fields that reshape a target's table (:func:`reshaped`).
FIELDS = ("wide", "reduce", "join", "difference", "trained_only", "exclude", "several", "keep")


def reshaped(
    table: pd.DataFrame,
    t: Mapping,
    select_rows: Callable,
    other: pd.DataFrame | None = None,
    other_columns: set[str] = frozenset(),
) -> pd.DataFrame:
    """The rows target ``t`` judges (``select_rows``: the engine's), after its reshapes in the
    order below; ``other``: the table a join's ``table`` names (None where it is absent or lacks
    one of ``other_columns``: no row finds a match). The estimate's finiteness is read last."""
    t = {**t, "select": own_fields(t.get("select"), t)}
    if not any(t.get(k) for k in FIELDS):
        return select_rows(table, t)
    sel = select_rows(table, {k: t[k] for k in ("select", "first") if k in t})
    if t.get("wide") and not sel.empty:
        sel = widen(sel, t["wide"])
    if t.get("reduce"):
        sel = reduce(sel, t["reduce"])
    if t.get("exclude"):
        sel = sel[[not matches(r, t["exclude"]) for _, r in sel.iterrows()]]
    if t.get("several"):
        sel = several(sel, t["several"])
    if t.get("keep"):
        sel = sel[[matches(r, t["keep"]) for _, r in sel.iterrows()]]
    if t.get("trained_only"):
        sel = sel[text_column(sel, "init_of") == ""]
    if t.get("join") and t["join"].get("table"):
        none = pd.DataFrame(columns=sorted(other_columns))  # absent: no row has a match
        sel = join(sel, other if other is not None else none, t["join"], t)
    elif t.get("join"):
        sel = join(sel, table, t["join"], t)
    if t.get("difference"):
        sel = difference(sel, t["difference"])
    if sel.empty:
        return sel
    return select_rows(sel, {k: t[k] for k in ("estimate", "finite") if k in t})
