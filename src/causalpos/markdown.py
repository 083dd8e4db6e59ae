"""The one Markdown renderer: pipe tables, number cells, values beside their intervals, generated
blocks between marker lines. Paper 2's digest, the scorecard, the README's overview and digest
(``causalpos summary``) and the findings page (``causalpos findings``) write through it. A leaf.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

#: The cell of a number that is not finite (NaN, ±inf) or of a value without an estimate.
MISSING = "–"
#: What a table without rows renders as.
NO_ROWS = "_(none)_"


def escape(text) -> str:
    """``text`` (any value, as text) with each ``|`` escaped, so it stays in its column."""
    return str(text).replace("|", "\\|")


def table(header: Sequence, rows: Iterable[Sequence]) -> str:
    """A pipe table (no trailing newline): the header, a ``---`` rule per column, one line per
    row; every cell escaped (:func:`escape`). A row with another number of cells than the header
    is refused."""
    head = [escape(h) for h in header]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, row in enumerate(rows):
        cells = [escape(c) for c in row]
        if len(cells) != len(head):
            raise ValueError(
                f"table row {k} has {len(cells)} cells for {len(head)} columns "
                f"({', '.join(head)}): give one cell per column"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell(x, spec: str = ".4g") -> str:
    """A cell: a float formatted with ``spec`` (:data:`MISSING` where it is not finite), any
    other value as text."""
    if isinstance(x, (float, np.floating)):
        return format(x, spec) if np.isfinite(x) else MISSING
    return str(x)


def frame(df) -> str:
    """A DataFrame as a pipe table with a newline, its columns the header and each cell a
    :func:`cell` (read row by row, as ``DataFrame.iterrows`` gives them); :data:`NO_ROWS` for
    a frame without rows."""
    if df.empty:
        return NO_ROWS + "\n"
    rows = ([cell(r[c]) for c in df.columns] for _, r in df.iterrows())
    return table([str(c) for c in df.columns], rows) + "\n"


def with_interval(value: str, lo: str, hi: str) -> str:
    """A value beside its interval, each already formatted: ``value [lo, hi]``."""
    return f"{value} [{lo}, {hi}]"


def interval_cell(est, lo, hi, *, percent: bool = False) -> str:
    """An estimate with its interval (:func:`with_interval`): four significant digits, or
    ``percent`` times 100 with one decimal and " %" after the estimate; :data:`MISSING` where the
    estimate is not finite."""
    if not np.isfinite(est):
        return MISSING
    if percent:
        return with_interval(f"{100 * est:.1f} %", f"{100 * lo:.1f}", f"{100 * hi:.1f}")
    return with_interval(f"{est:.4g}", f"{lo:.4g}", f"{hi:.4g}")


def replace_block(
    text: str, block: str, markers: tuple[str, str], what: str, where: str = ""
) -> str:
    """``text`` with the part between ``markers`` (begin, end; inclusive) replaced by ``block``;
    a text without them is refused naming ``what`` block and ``where`` it goes."""
    begin, end = markers
    try:
        i = text.index(begin)
        j = text.index(end, i) + len(end)
    except ValueError:
        raise ValueError(
            f"the README has no {what} block: put the lines {begin!r} and "
            f"{end!r} where it belongs{where}"
        ) from None
    return text[:i] + block.rstrip("\n") + text[j:]
