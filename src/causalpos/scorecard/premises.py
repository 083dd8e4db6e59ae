"""A declarative target's row premises and cell formats (:mod:`causalpos.scorecard.engine`):
``premises``, the rows a target does not judge because a column says the claim's premise does
not hold (``not applicable``) or is not known (``not run``), and the format specs of its
templates beyond ``ci`` and ``d``."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.rows import fmt, fmt_ci


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


def premise(r: pd.Series, t: Mapping) -> Mapping | None:
    """The first of target ``t``'s ``premises`` whose ``if`` row ``r`` matches (a column the
    table lacks reads as empty), or None."""
    for p in t.get("premises") or ():
        if all(cell_matches(r.get(c), v) for c, v in p["if"].items()):
            return p
    return None


def spec_text(r: pd.Series, column: str, spec: str) -> str:
    """Cell ``column`` of row ``r`` under a template's format ``spec``: ``ci<n>`` its estimate
    and interval at ``n`` significant digits, ``<n>`` the cell at ``n``, ``text`` a text cell
    ("" where empty), any other spec Python's format of the number (e.g. ``.2e``)."""
    v = r[column]
    if spec.startswith("ci") and spec[2:].isdigit():
        return fmt_ci(v, r[f"{column}_lo"], r[f"{column}_hi"], int(spec[2:]))
    if spec.isdigit():
        return fmt(v, int(spec))
    if spec == "text":
        return "" if is_null(v) else str(v)
    return format(float(v), spec)
