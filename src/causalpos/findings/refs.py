"""What a ``{{ ... }}`` of the findings template holds, parsed (:func:`parse`).

A reference names a table cell (or an aggregate over rows) and how to print it; a literal span
carries text that is not a run output, named by where it comes from::

    reference := literal | value [format]
    literal   := ("paper" | "setting" | "term" | "from" PATH) ":" text
    value     := rows "." column | AGG "(" rows ["." column] ")"
    rows      := name selector*               name: a table (file stem) or a ``let`` alias
    selector  := "[" condition ("," condition)* "]"
    condition := column OP operand | ("max" | "min") "(" column ")"
    operand   := "." column | '"' text '"' | bare word
    format    := ["ci"] ["%" | "pp"] spec      spec: a Python format spec (".4f", "+.0f", ",.0f")

``OP`` is one of ``= != < <= > >=`` and ``~`` (the cell's text contains the operand's); ``AGG`` one of :data:`AGGREGATES`. Examples:
``{{paper2_headline[model=smollm2-135m, target=logit].leakage ci.4f}}`` (one row's value with its
interval), ``{{count(llm_index[model=smollm2-135m][layer>=2][share_minus_l1_lo>0])}}``,
``{{paper: 64–82 %}}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Aggregates over the rows a selection matches (``count`` takes rows, the others a column).
AGGREGATES = ("count", "min", "max", "median", "mean", "list")
#: Kinds of literal span: the papers' own values, the run's settings (config, model shapes, data
#: sizes), a verdict word used as a term (not as a verdict), and a number measured elsewhere
#: (``from PATH``: a test module or a document of the repository that holds the measurement).
LITERALS = ("paper", "setting", "term", "from")
OPS = ("!=", "<=", ">=", "~", "=", "<", ">")
EXTREMES = ("max", "min")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BARE = re.compile(r'[^\s,\]"\[]+')
_FORMAT = re.compile(r"(?P<ci>ci)?(?P<scale>%|pp)?(?P<spec>[-+ ]?,?(?:\.\d+)?[defg]?)")
_LITERAL = re.compile(
    rf"(?P<kind>{'|'.join(LITERALS)})(?:\s+(?P<source>[^:\s]+))?\s*:(?P<text>.*)", re.S
)


class RefError(Exception):
    """A reference that cannot be filled: ``reason`` says why. ``missing``: the run lacks what
    it names (a table, a column, a row) — rendered as a marker where a partial run is allowed —
    rather than the template being wrong (a syntax error, an unknown table: always an error)."""

    def __init__(self, reason: str, *, missing: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


@dataclass(frozen=True)
class Condition:
    """``column op operand`` (``operand_column``: the operand names a column), or ``op`` in
    :data:`EXTREMES` with no operand (the rows holding the column's largest / smallest value)."""

    column: str
    op: str
    operand: str = ""
    operand_column: bool = False

    def __str__(self) -> str:
        if self.op in EXTREMES:
            return f"{self.op}({self.column})"
        rhs = f".{self.operand}" if self.operand_column else _quote(self.operand)
        return f"{self.column}{self.op}{rhs}"


@dataclass(frozen=True)
class Rows:
    """A table (or alias) and the conditions its rows must meet, in order."""

    name: str
    conditions: tuple[Condition, ...] = ()

    def __str__(self) -> str:
        return self.name + "".join(f"[{c}]" for c in self.conditions)


@dataclass(frozen=True)
class Value:
    """One cell (``agg`` None: the rows must be exactly one) or an aggregate over the rows."""

    rows: Rows
    column: str | None
    agg: str | None = None


@dataclass(frozen=True)
class Format:
    """``ci``: the value with its interval (``<column>_lo`` / ``_hi``); ``scale``: ``%`` (times
    100, " %" after the value) or ``pp`` (times 100, no unit); ``spec``: Python's format spec."""

    ci: bool = False
    scale: str = ""
    spec: str = ""


@dataclass(frozen=True)
class Literal:
    kind: str
    text: str
    source: str = ""


@dataclass(frozen=True)
class Ref:
    body: Value | Literal
    fmt: Format = Format()


def _quote(s: str) -> str:
    return s if _BARE.fullmatch(s) else '"' + s + '"'


class _Scanner:
    def __init__(self, text: str):
        self.text, self.i = text, 0

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1

    def take(self, s: str) -> bool:
        """Whether the text continues with ``s`` (after blanks), consumed if so."""
        self.skip()
        if not self.text.startswith(s, self.i):
            return False
        self.i += len(s)
        return True

    def expect(self, s: str, what: str) -> None:
        if not self.take(s):
            raise self.error(f"expected {s!r} {what}")

    def match(self, pattern: re.Pattern, what: str) -> str:
        self.skip()
        m = pattern.match(self.text, self.i)
        if not m:
            raise self.error(f"expected {what}")
        self.i = m.end()
        return m.group(0)

    def error(self, msg: str) -> RefError:
        rest = self.text[self.i :].strip()
        return RefError(f"{msg} at {rest[:30]!r}" if rest else f"{msg} at the end")


def _condition(s: _Scanner) -> Condition:
    start = s.i
    name = s.match(_NAME, "a column name")
    if name in EXTREMES and s.take("("):
        column = s.match(_NAME, "a column name")
        s.expect(")", f"after {name}(column")
        return Condition(column, name)
    op = next((o for o in OPS if s.take(o)), None)
    if op is None:
        s.i = start
        raise s.error("expected a condition (column=value, column>.other, max(column))")
    if s.take("."):
        return Condition(name, op, s.match(_NAME, "a column name after '.'"), True)
    if s.take('"'):
        end = s.text.find('"', s.i)
        if end < 0:
            raise s.error("unterminated quoted value")
        value, s.i = s.text[s.i : end], end + 1
        return Condition(name, op, value)
    return Condition(name, op, s.match(_BARE, "a value"))


def _rows(s: _Scanner) -> Rows:
    name = s.match(_NAME, "a table name")
    conds: list[Condition] = []
    while s.take("["):
        conds.append(_condition(s))
        while s.take(","):
            conds.append(_condition(s))
        s.expect("]", "to close the selector")
    return Rows(name, tuple(conds))


def _value(s: _Scanner) -> Value:
    start = s.i
    name = s.match(_NAME, "a table name or an aggregate")
    if name in AGGREGATES and s.take("("):
        rows = _rows(s)
        column = s.match(_NAME, "a column name") if s.take(".") else None
        s.expect(")", f"to close {name}(")
        if (column is None) != (name == "count"):
            raise RefError(
                "count(rows) takes rows; "
                f"{', '.join(a for a in AGGREGATES if a != 'count')} take rows.column"
            )
        return Value(rows, column, name)
    s.i = start
    rows = _rows(s)
    s.expect(".", "and a column name after the rows (rows.column)")
    return Value(rows, s.match(_NAME, "a column name"))


def parse_format(text: str) -> Format:
    """A format token (``ci.4f``, ``ci%.0f``, ``+.3f``, ``,.0f``; empty: the default)."""
    m = _FORMAT.fullmatch(text.strip())
    if not m:
        raise RefError(
            f"format {text.strip()!r} is not [ci][%|pp]SPEC (SPEC a Python format spec such as "
            "'.4f', '+.2f', ',.0f', '.2e', 'd')"
        )
    return Format(bool(m["ci"]), m["scale"] or "", m["spec"])


def parse(body: str) -> Ref:
    """The reference ``{{body}}``; a RefError says what is wrong and where."""
    lit = _LITERAL.fullmatch(body.strip())
    if lit:
        kind, source = lit["kind"], lit["source"] or ""
        if (kind == "from") != bool(source):
            raise RefError(
                "a literal span is 'paper: text', 'setting: text', 'term: text' or "
                "'from PATH: text' (PATH: the test or document that holds the number)"
            )
        return Ref(Literal(kind, lit["text"].strip(), source))
    s = _Scanner(body)
    value = _value(s)
    fmt = parse_format(s.text[s.i :])
    if fmt.ci and value.agg is not None:
        raise RefError("'ci' prints one row's interval; an aggregate has none")
    return Ref(value, fmt)


def parse_rows(text: str) -> Rows:
    """The rows of a ``let NAME = rows`` line."""
    s = _Scanner(text)
    rows = _rows(s)
    s.skip()
    if s.i != len(s.text):
        raise s.error("unexpected text after the rows")
    return rows
