"""The table reshapes a declarative target declares (:mod:`causalpos.scorecard.engine`) before its
rows are judged: ``wide`` (a long table's readings of one (model, dataset) made one row),
``join`` (a row's matching row of the same table read beside it, e.g. its random-init twin) and
``difference`` (an estimate minus another, CIs combined as independent samples).

Each function takes the target's table and the target's field, and returns a table whose columns
the target's templates and rule read."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

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
    for _, g in table.groupby(by, sort=False, dropna=False):
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
