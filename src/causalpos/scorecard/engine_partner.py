"""A declarative target's rows read beside another row of their table, and the text a table's
columns add: the fields of :mod:`causalpos.scorecard.engine` (and
:mod:`~causalpos.scorecard.engine_groups`) that look past one row.

``required``
    columns whose cell must be non-empty (not NaN, not ""): the rows without are not judged
    (e.g. ``[twin]``: only the models that have a random-init twin);
``partner``
    ``{column, key, on, prefix, measured}``: each row's partner is the first row of the table
    whose ``key`` column (default ``model``) equals the row's ``column`` cell and whose ``on``
    columns (default ``[dataset]``) equal the row's; its cells are read as ``{<prefix><column>}``
    in the templates, and ``measured`` (a template) is appended where the row has a partner
    (e.g. a model beside its random-init twin);
``column_text``
    ``{column: [with, without]}``: text appended to ``measured`` where the table has the
    column, and where it has not (a table made before it).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

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


def partner_needs(t: Mapping, need: set[str]) -> set[str]:
    """The columns target ``t`` needs of its table, from ``need`` (its templates' columns): its
    ``partner``'s and ``required`` columns added, the partner's own (``<prefix>...``, which the
    engine adds) taken out."""
    p = t.get("partner")
    need = need | partner_columns(t) | {*(t.get("required") or ())}
    return {c for c in need if not (p and c.startswith(p["prefix"]))}


def has_partner(r: pd.Series) -> bool:
    """Whether table row ``r`` (of :func:`with_partner`) has a partner."""
    return bool(r.get("_has_partner", False))


def column_texts(columns, t: Mapping) -> str:
    """Target ``t``'s ``column_text``: per column, its text where ``columns`` hold it, else the
    other."""
    return "".join(
        with_ if col in columns else without
        for col, (with_, without) in (t.get("column_text") or {}).items()
    )
