"""A declarative target's row premises (``premises``: the rows it does not judge because a
column or a shared reason, :data:`REASONS`, says the claim's premise does not hold or is not
known), its templates' format specs beyond ``ci`` and ``d``, and an inconclusive row's power
note (``power``)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

import numpy as np
import pandas as pd

import causalpos.scorecard.rows as rows
from causalpos.scorecard.paper2_kinds import power_note
from causalpos.scorecard.rows import fmt, fmt_ci
from causalpos.scorecard.targets import PREMISE_REASONS

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
