"""Listed renames of outputs, so that two results trees written before and after a rename compare
modulo it (``causalpos diff-results --renames docs/outputs.md``).

The renames are a Markdown table between :data:`BEGIN` and :data:`END` (docs/outputs.md's),
one row per rename: ``| `old` | `new` | kind |``. What a kind renames in a tree's tables:

- ``table file``: the table's file name (``old`` and ``new`` are file names, e.g.
  ``paper2_decomposition.csv``) and its stem where a cell or a Markdown line names it;
- ``column in T1, T2``: a CSV column of that name in the tables ``T1``, ``T2`` (file stems, old
  or new), and there a cell that is exactly ``old`` (``column`` alone: in every table);
- every other kind (a store variable, coordinate, coordinate value or attr: not a table's
  column): ``old`` where a Markdown line or a text cell names it in backticks.

Renames apply to the old tree's side in one pass (``a -> b`` and ``b -> c`` map ``a`` to ``b``,
never on to ``c``). Pure: imports nothing of the library.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

BEGIN = "<!-- renames: old name -> new name -->"
END = "<!-- /renames -->"
TABLE_FILE = "table file"
COLUMN = "column"

_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|\s*$")


@dataclass(frozen=True)
class Renames:
    """``files``: old table file name -> new; ``words``: old table stem -> new, as a whole cell or
    a word; ``columns``: table stem (None: every table) -> old column -> new; ``ticked``: old
    name -> new where written in backticks."""

    files: dict[str, str] = field(default_factory=dict)
    words: dict[str, str] = field(default_factory=dict)
    columns: dict[str | None, dict[str, str]] = field(default_factory=dict)
    ticked: dict[str, str] = field(default_factory=dict)

    def file(self, rel: str) -> str:
        """The relative path ``rel`` of an old tree's table under its new name."""
        head, _, name = rel.rpartition("/")
        new = self.files.get(name, name)
        return f"{head}/{new}" if head else new

    def columns_of(self, rel: str) -> dict[str, str]:
        """Old column -> new of the old tree's table ``rel``."""
        stems = {Path(rel).stem, Path(self.file(rel)).stem}
        out = dict(self.columns.get(None, {}))
        for stem in stems:
            out.update(self.columns.get(stem, {}))
        return out

    def text(self, line: str) -> str:
        """``line`` (a Markdown line or a text cell) with the renamed names in it."""
        if line in self.words:
            return self.words[line]
        words = tuple(self.words)
        if words:
            line = _word_re(words).sub(lambda m: self.words[m.group(0)], line)
        if self.ticked:
            line = _tick_re(tuple(self.ticked)).sub(lambda m: f"`{self.ticked[m.group(1)]}`", line)
        return line


def _alternation(names: tuple[str, ...]) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


@functools.lru_cache(maxsize=8)
def _word_re(names: tuple[str, ...]) -> re.Pattern:
    return re.compile(rf"(?<![\w.])(?:{_alternation(names)})(?![\w])")


@functools.lru_cache(maxsize=8)
def _tick_re(names: tuple[str, ...]) -> re.Pattern:
    return re.compile(rf"`({_alternation(names)})`")


def read_renames(path: str | os.PathLike) -> Renames:
    """The renames listed in the Markdown file ``path`` (between :data:`BEGIN` and :data:`END`);
    :class:`ValueError` naming the file and the line if the block is missing, a row is not
    ``| `old` | `new` | kind |``, or an old name is listed twice."""
    text = Path(path).read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(
            f"{path} lists no renames: it has no block between {BEGIN!r} and {END!r} "
            "(docs/outputs.md has one)"
        )
    start = text.index(BEGIN)
    first = text[:start].count("\n") + 1
    block = text[start : text.index(END, start)].splitlines()[1:]
    files: dict[str, str] = {}
    words: dict[str, str] = {}
    columns: dict[str | None, dict[str, str]] = {}
    ticked: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    for i, line in enumerate(block, start=first + 1):
        line = line.strip()
        if not line or line.startswith("|---") or line.startswith("| old "):
            continue
        m = _ROW.match(line)
        if not m:
            raise ValueError(f"{path}:{i}: {line!r} is not a rename row | `old` | `new` | kind |")
        old, new, kind = m.groups()
        where = TABLE_FILE if kind.startswith(TABLE_FILE) else kind
        if (old, where) in seen:
            raise ValueError(f"{path}:{i}: {old!r} is listed twice as a {where}")
        seen.add((old, where))
        if kind.startswith(TABLE_FILE):
            files[old] = new
            words[Path(old).stem] = Path(new).stem
        elif kind.split()[0] == COLUMN:
            scope = kind.partition(" in ")[2]
            tables = [t.strip().strip("`") for t in scope.split(",")] if scope else [None]
            for t in tables:
                columns.setdefault(t and Path(t).stem, {})[old] = new
        else:
            ticked[old] = new
    return Renames(files, words, columns, ticked)
