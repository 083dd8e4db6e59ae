"""Listed renames of outputs, so that two results trees written before and after a rename compare
modulo it (``causalpos diff-results --renames docs/outputs.md``).

The renames are a Markdown table between :data:`BEGIN` and :data:`END`, one row per rename:
``| `old` | `new` | kind |``; the kinds and what each renames: docs/outputs.md's renames section.
A ``column in T1, T2`` rename also renames a cell that is exactly ``old`` in those tables (``T``
an old or new file stem; no ``in``: every table). Renames apply to the old tree in one pass
(``a -> b`` and ``b -> c`` map ``a`` to ``b``, never on to ``c``).
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
REMOVED_COLUMN = "removed column"
ADDED_COLUMN = "added column"
#: The other name of a removed or an added column's row.
NO_NAME = "—"

_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|\s*$")


@dataclass(frozen=True)
class Renames:
    """``files``: old table file name -> new; ``words``: old table stem -> new, as a whole cell or
    a word; ``columns``: table stem (None: every table) -> old column -> new; ``ticked``: old
    name -> new where written in backticks; ``removed`` / ``added``: table stem (None: every
    table) -> the columns only the old / only the new tree's table has."""

    files: dict[str, str] = field(default_factory=dict)
    words: dict[str, str] = field(default_factory=dict)
    columns: dict[str | None, dict[str, str]] = field(default_factory=dict)
    ticked: dict[str, str] = field(default_factory=dict)
    removed: dict[str | None, set[str]] = field(default_factory=dict)
    added: dict[str | None, set[str]] = field(default_factory=dict)

    def file(self, rel: str) -> str:
        """The relative path ``rel`` of an old tree's table under its new name."""
        head, _, name = rel.rpartition("/")
        new = self.files.get(name, name)
        return f"{head}/{new}" if head else new

    def _stems(self, rel: str) -> list[str]:
        """The stems a scope names the old tree's table ``rel`` by: its old stem, and its new
        one unless that is another renamed table's old stem (the renames may permute names)."""
        old, new = Path(rel).stem, Path(self.file(rel)).stem
        return [old] if new == old or new in self.words else [old, new]

    def columns_of(self, rel: str) -> dict[str, str]:
        """Old column -> new of the old tree's table ``rel``."""
        out = dict(self.columns.get(None, {}))
        for stem in self._stems(rel):
            out.update(self.columns.get(stem, {}))
        return out

    def _scoped(self, by_stem: dict[str | None, set[str]], rel: str) -> set[str]:
        return set().union(*(by_stem.get(s, set()) for s in [None, *self._stems(rel)]))

    def removed_of(self, rel: str) -> set[str]:
        """The columns the old tree's table ``rel`` has and its new table no longer has."""
        return self._scoped(self.removed, rel)

    def added_of(self, rel: str) -> set[str]:
        """The columns the new tree's table of the old tree's ``rel`` has and ``rel`` had not."""
        return self._scoped(self.added, rel)

    def text(self, line: str) -> str:
        """``line`` (a Markdown line or a text cell) with the renamed names in it."""
        if line in self.words:
            return self.words[line]
        words = tuple(self.words)
        if words:
            line = _names_re(r"(?<![\w.])(?:{})(?![\w])", words).sub(
                lambda m: self.words[m.group(0)], line
            )
        if self.ticked:
            line = _names_re(r"`({})`", tuple(self.ticked)).sub(
                lambda m: f"`{self.ticked[m.group(1)]}`", line
            )
        return line


@functools.lru_cache(maxsize=16)
def _names_re(template: str, names: tuple[str, ...]) -> re.Pattern:
    """``template`` with ``{}`` the alternation of ``names``, longest first, compiled."""
    alternation = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(template.format(alternation))


def _scope(kind: str) -> list[str | None]:
    """The table stems a kind ``... in T1, T2`` names; ``[None]`` (every table) for none."""
    scope = kind.partition(" in ")[2]
    return [Path(t.strip().strip("`")).stem for t in scope.split(",")] if scope else [None]


def read_renames(path: str | os.PathLike) -> Renames:
    """The renames listed in the Markdown file ``path`` (between :data:`BEGIN` and :data:`END`);
    :class:`ValueError` naming the file and the line if the block is missing, a row is not
    ``| `old` | `new` | kind |``, a removed (added) column's new (old) name is not ``—``, or a
    name is listed twice."""
    text = Path(path).read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(
            f"{path} lists no renames: it has no block between {BEGIN!r} and {END!r} "
            "(docs/outputs.md has one)"
        )
    start = text.index(BEGIN)
    first = text[:start].count("\n") + 1
    block = text[start : text.index(END, start)].splitlines()[1:]
    out = Renames()
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
        gone, other = kind.startswith(REMOVED_COLUMN), kind.startswith(ADDED_COLUMN)
        name = new if other else old
        if (gone or other) and (new if gone else old) != NO_NAME:
            raise ValueError(
                f"{path}:{i}: {line!r}: a {where} has no {'new' if gone else 'old'} name: "
                f"write `{NO_NAME}` there"
            )
        if (name, where) in seen:
            raise ValueError(f"{path}:{i}: {name!r} is listed twice as a {where}")
        seen.add((name, where))
        if kind.startswith(TABLE_FILE):
            out.files[old] = new
            out.words[Path(old).stem] = Path(new).stem
        elif gone or other:
            for t in _scope(kind):
                (out.removed if gone else out.added).setdefault(t, set()).add(name)
        elif kind.split()[0] == COLUMN:
            for t in _scope(kind):
                out.columns.setdefault(t, {})[old] = new
        else:
            out.ticked[old] = new
    return out
