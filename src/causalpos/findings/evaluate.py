"""A parsed reference filled from the run's tables (:func:`fill_reference`): its rows selected,
the value read (one cell, or an aggregate), printed in the reference's format.

Cells are read as the CSV's text; a condition compares numbers where both sides are numbers and
text otherwise. A single-cell reference must match exactly one row: none, or several, is a
:class:`~causalpos.findings.refs.RefError` naming the condition that left no row, or the columns
in which the matched rows differ. Negative numbers print with a minus sign (U+2212), and a value
that rounds to zero prints without a sign.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pandas as pd

from causalpos import markdown
from causalpos.findings.refs import EXTREMES, Condition, Format, Literal, Ref, RefError, Rows

MINUS = "\u2212"
#: How many of a column's values an error lists.
SHOWN_VALUES = 8


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


def _compare(cell: str, c: Condition, row: pd.Series) -> bool:
    operand = row[c.operand] if c.operand_column else c.operand
    if c.op == "~":
        return operand in cell
    a, b = _number(cell), _number(operand)
    if c.op in ("=", "!="):
        same = (a == b) if (a is not None and b is not None) else (cell == operand)
        return same if c.op == "=" else not same
    if a is None or b is None:
        if c.operand_column or _number(c.operand) is not None:
            return False  # an empty or non-numeric cell is never above or below a number
        raise RefError(f"{c}: {c.op} compares numbers; {c.operand!r} is not one")
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[c.op]


def _present(df: pd.DataFrame, column: str) -> str:
    vals = list(dict.fromkeys(df[column].tolist()))
    more = f", ... ({len(vals)} values)" if len(vals) > SHOWN_VALUES else ""
    return ", ".join(repr(v) for v in vals[:SHOWN_VALUES]) + more


def _need_column(df: pd.DataFrame, column: str, where: str) -> None:
    if column not in df.columns:
        raise RefError(f"{where} has no column {column!r}", missing=True)


def expand(rows: Rows, aliases: Mapping[str, Rows]) -> Rows:
    """``rows`` with its alias expanded: the alias's table and conditions, then its own."""
    seen = []
    while rows.name in aliases:
        if rows.name in seen:
            raise RefError(f"alias {rows.name!r} refers to itself")
        seen.append(rows.name)
        base = aliases[rows.name]
        rows = Rows(base.name, base.conditions + rows.conditions)
    return rows


def select(rows: Rows, table: Callable[[str], pd.DataFrame]) -> pd.DataFrame:
    """The rows of ``rows`` (aliases expanded), its conditions applied in order."""
    df = table(rows.name)
    for c in rows.conditions:
        _need_column(df, c.column, rows.name)
        if c.operand_column:
            _need_column(df, c.operand, rows.name)
        before = df
        if c.op in EXTREMES:
            vals = pd.to_numeric(df[c.column], errors="coerce")
            best = vals.max() if c.op == "max" else vals.min()
            df = df[vals == best]
        else:
            keep = [_compare(cell, c, r) for cell, (_, r) in zip(df[c.column], df.iterrows())]
            df = df[keep]
        if df.empty:
            raise RefError(
                f"{rows} matches no row: none of its {len(before)} rows so far meets {c} "
                f"({c.column} holds {_present(before, c.column)})",
                missing=True,
            )
    return df


def _one(df: pd.DataFrame, rows: Rows) -> pd.Series:
    if len(df) == 1:
        return df.iloc[0]
    differ = [c for c in df.columns if df[c].nunique(dropna=False) > 1]
    # columns that name things (text) before measurements
    differ = sorted(differ, key=lambda c: pd.to_numeric(df[c], errors="coerce").notna().all())[:4]
    detail = "; ".join(f"{c}: {_present(df, c)}" for c in differ)
    raise RefError(
        f"{rows} matches {len(df)} rows; add a condition on a column in which they differ "
        f"({detail})",
        missing=True,
    )


def _cell_number(row: pd.Series, column: str, where: str) -> float:
    x = _number(row[column])
    if x is None or math.isnan(x):
        raise RefError(f"{where}.{column} is {row[column]!r}, not a number", missing=True)
    return x


def _bounds(row: pd.Series, column: str) -> tuple[str, str]:
    """The columns of ``column``'s interval, the first present of: ``c_lo`` / ``c_hi``; ``c``
    less its last ``_word`` (``excess_mean`` -> ``excess_lo``); ``lo`` / ``hi`` (tables whose
    value column is ``estimate``); ``ci_lo`` / ``ci_hi`` (the index tables)."""
    stem = column.rsplit("_", 1)[0] if "_" in column else column
    for lo, hi in (
        (f"{column}_lo", f"{column}_hi"),
        (f"{stem}_lo", f"{stem}_hi"),
        ("lo", "hi"),
        ("ci_lo", "ci_hi"),
    ):
        if lo in row.index and hi in row.index:
            return lo, hi
    raise RefError(f"'ci': no interval columns for {column!r} ({column}_lo/_hi, lo/hi, ci_lo/hi)")


def number(x: float, fmt: Format, *, sign: bool = True) -> str:
    """``x`` printed with ``fmt``'s scale and spec (the unit is the caller's); ``sign`` False
    drops a ``+`` flag (an interval's bounds)."""
    spec = fmt.spec if sign else fmt.spec.replace("+", "", 1)
    x = x * 100 if fmt.scale else x
    if not spec:
        if not float(x).is_integer():
            raise RefError(f"{x!r} is not an integer: give a format (e.g. '.3f')")
        spec = "d"
    s = format(int(round(x)) if spec.endswith("d") else x, spec)
    mantissa = s.lower().split("e")[0]
    if not any(ch in "123456789" for ch in mantissa):
        s = s.replace("-", "", 1)  # rounds to 0: no sign
    return MINUS + s[1:] if s.startswith("-") else s


def _unit(fmt: Format) -> str:
    return " %" if fmt.scale == "%" else ""


def _aggregate(df: pd.DataFrame, agg: str, column: str | None, rows: Rows, fmt: Format) -> str:
    if agg == "count":
        return number(float(len(df)), fmt)
    _need_column(df, column, rows.name)
    if agg == "list":  # "a, b and c"
        items = [number(_cell_number(r, column, str(rows)), fmt) for _, r in df.iterrows()]
        if len(items) < 2:
            return items[0] if items else "none"
        return ", ".join(items[:-1]) + " and " + items[-1]
    vals = pd.to_numeric(df[column], errors="coerce").dropna()
    if vals.empty:
        raise RefError(f"{rows}.{column}: no numeric value to take the {agg} of", missing=True)
    x = float(getattr(vals, agg)())
    return number(x, fmt) + _unit(fmt)


def fill_reference(
    ref: Ref, table: Callable[[str], pd.DataFrame], aliases: Mapping[str, Rows]
) -> str:
    """The text ``ref`` stands for in this run."""
    if isinstance(ref.body, Literal):
        return ref.body.text
    v, fmt = ref.body, ref.fmt
    rows = expand(v.rows, aliases)
    df = select(rows, table)
    if v.agg is not None:
        return _aggregate(df, v.agg, v.column, rows, fmt)
    row = _one(df, rows)
    _need_column(df, v.column, rows.name)
    cell = row[v.column]
    x = _number(cell)
    if x is None and not (fmt.ci or fmt.scale or fmt.spec):
        if cell == "":
            raise RefError(f"{rows}.{v.column} is empty", missing=True)
        return str(cell)  # text: a verdict, a name
    x = _cell_number(row, v.column, str(rows))
    text = number(x, fmt) + _unit(fmt)
    if fmt.ci:
        lo, hi = _bounds(row, v.column)
        bounds = [number(_cell_number(row, c, str(rows)), fmt, sign=False) for c in (lo, hi)]
        text = markdown.with_interval(text, *bounds)
    return text
