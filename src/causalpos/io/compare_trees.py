"""Compare the tables of two results trees (``results/stats``, ``results/report``...).

Used to show that a change to the code left every number as it was: CSV tables cell by cell
(numbers exactly, or within ``rtol``/``atol``), text tables line by line, code fingerprints
ignored. With :class:`~causalpos.io.renames.Renames`, the first tree's tables are compared under
the new names, so that only an unlisted rename or removal is a difference.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from causalpos.io.renames import Renames

TABLE_SUFFIXES = (".csv", ".md", ".tsv")
IGNORED_COLUMNS = ("code_fingerprint",)


@dataclass
class TreeDiff:
    """What differs between two trees of tables."""

    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    differing: dict[str, str] = field(default_factory=dict)  # relative path -> first difference
    compared: int = 0
    #: tables left out (``exclude``): how many of A's and B's under each directory
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return not (self.only_a or self.only_b or self.differing)

    def report(self) -> str:
        lines = [f"{self.compared} tables compared"]
        lines += [f"not compared: {n} tables under {d}/" for d, n in self.skipped.items() if n]
        lines += [f"only in A: {p}" for p in self.only_a]
        lines += [f"only in B: {p}" for p in self.only_b]
        lines += [f"differs: {p}: {why}" for p, why in self.differing.items()]
        lines.append("identical" if self.identical else "DIFFERENT")
        return "\n".join(lines)


def _tables(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.suffix in TABLE_SUFFIXES and ".zarr" not in p.as_posix()
    }


def _renamed(df, renames: Renames, rel: str):
    """``df`` (the first tree's table ``rel``) with its columns and text cells renamed."""
    import pandas as pd

    cols = renames.columns_of(rel)
    df = df.rename(columns=cols)

    def cell(v):
        return renames.text(cols.get(v, v)) if isinstance(v, str) else v

    for col in df.columns:
        if not pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].map(cell)
    return df


def _diff_csv(
    a: Path, b: Path, rtol: float, atol: float, renames: Renames | None = None, rel: str = ""
) -> str | None:
    import numpy as np
    import pandas as pd

    da, db = pd.read_csv(a), pd.read_csv(b)
    if renames is not None:
        da = _renamed(da, renames, rel)
        da = da.drop(columns=[c for c in da.columns if c in renames.removed_of(rel)])
        db = db.drop(columns=[c for c in db.columns if c in renames.added_of(rel)])
    da, db = (d.drop(columns=list(IGNORED_COLUMNS), errors="ignore") for d in (da, db))
    if list(da.columns) != list(db.columns):
        return f"columns {list(da.columns)} vs {list(db.columns)}"
    if da.shape != db.shape:
        return f"shape {da.shape} vs {db.shape}"
    for col in da.columns:
        x, y = da[col], db[col]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            xv, yv = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
            same = np.isclose(xv, yv, rtol=rtol, atol=atol, equal_nan=True)
            if rtol == 0 and atol == 0:
                same = (xv == yv) | (np.isnan(xv) & np.isnan(yv))
        else:
            text = lambda s: s.astype(object).where(s.notna(), "<NA>").astype(str)  # noqa: E731
            same = (text(x) == text(y)).to_numpy()
        if not same.all():
            i = int(np.flatnonzero(~same)[0])
            return f"column {col!r}, row {i}: {x.iloc[i]!r} vs {y.iloc[i]!r}"
    return None


def _without_columns(lines: list[str], names: set[str]) -> list[str]:
    """Markdown ``lines`` with each table's columns headed by one of ``names`` left out."""
    out, drop = [], None
    for ln in lines:
        if not ln.startswith("|"):
            drop = None  # not a table line: the next table line is a header
        else:
            cells = ln.split("|")
            if drop is None:
                drop = {i for i, c in enumerate(cells) if c.strip() in names}
            ln = "|".join(c for i, c in enumerate(cells) if i not in drop)
        out.append(ln)
    return out


def _diff_text(a: Path, b: Path, renames: Renames | None = None, rel: str = "") -> str | None:
    la, lb = (
        [ln for ln in p.read_text().splitlines() if not any(c in ln for c in IGNORED_COLUMNS)]
        for p in (a, b)
    )
    if renames is not None:
        la = [renames.text(ln) for ln in _without_columns(la, renames.removed_of(rel))]
        lb = _without_columns(lb, renames.added_of(rel))
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            return f"line {i + 1}: {x!r} vs {y!r}"
    if len(la) != len(lb):
        return f"{len(la)} vs {len(lb)} lines"
    return None


def compare_trees(
    a: str | os.PathLike,
    b: str | os.PathLike,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    exclude: tuple[str, ...] = (),
    renames: Renames | None = None,
) -> TreeDiff:
    """Every table (CSV, TSV, Markdown) under ``a`` against the same path under ``b``, but those
    under the directories ``exclude`` (relative to the roots; counted in ``skipped``); ``rtol``
    and ``atol`` finite and >= 0. ``renames``: ``a``'s tables are compared under their new names
    (``only_a`` / ``differing`` name them by their path in ``a``)."""
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if not math.isfinite(tol) or tol < 0:
            raise ValueError(f"compare_trees: {name}={tol!r}; a tolerance is a finite number >= 0")
    a, b = Path(a), Path(b)
    for root in (a, b):
        if not root.is_dir():
            raise FileNotFoundError(f"compare_trees: {root} is not a directory")
    ta, tb = _tables(a), _tables(b)
    skipped = {}
    for d in exclude:
        held = {p for p in ta | tb if p.startswith(d.rstrip("/") + "/")}
        skipped[d.rstrip("/")] = len(held)
        ta, tb = ta - held, tb - held
    new = {rel: renames.file(rel) if renames else rel for rel in ta}
    out = TreeDiff(
        only_a=sorted(rel for rel in ta if new[rel] not in tb),
        only_b=sorted(tb - set(new.values())),
        skipped=skipped,
    )
    for rel in sorted(rel for rel in ta if new[rel] in tb):
        out.compared += 1
        if rel.endswith(".csv"):
            why = _diff_csv(a / rel, b / new[rel], rtol, atol, renames, rel)
        else:
            why = _diff_text(a / rel, b / new[rel], renames, rel)
        if why:
            shown = rel if new[rel] == rel else f"{rel} (as {new[rel]})"
            out.differing[shown] = why
    return out
