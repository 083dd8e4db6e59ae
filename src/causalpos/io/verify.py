"""``causalpos verify``: every store of a results tree checked against its manifest.

Snakemake judges a ``directory()`` output by its existence, so a store that lost a chunk after it
was written looks finished to it; this walk finds such stores, and the temporaries that killed
jobs left behind.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from causalpos.io.atomic import final_of, is_temporary
from causalpos.io.integrity import StoreError, display_path, rebuild_command
from causalpos.io.store import verify_store

#: Directories with this suffix (or holding a root ``zarr.json``) are stores.
STORE_SUFFIX = ".zarr"


@dataclass
class TreeReport:
    """What :func:`verify_tree` found under ``root``."""

    root: Path
    verified: list[Path] = field(default_factory=list)
    unverified: list[Path] = field(default_factory=list)  # no manifest (older causalpos)
    damaged: dict[Path, StoreError] = field(default_factory=dict)
    stale: list[Path] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No damaged store and no stale temporary."""
        return not self.damaged and not self.stale

    def report(self, configfile: str | None = None) -> str:
        """The findings, with rebuild commands for the config the tree was built with."""
        n = len(self.verified) + len(self.unverified) + len(self.damaged)
        lines = [
            f"{display_path(self.root)}: {n} stores: {len(self.verified)} verified, "
            f"{len(self.damaged)} damaged, {len(self.unverified)} without a manifest; "
            f"{len(self.stale)} stale temporaries"
        ]
        for path, err in sorted(self.damaged.items()):
            lines.append(f"DAMAGED {display_path(path)}")
            lines += [f"  {p}" for p in err.problems]
            lines.append(f"  rebuild: {rebuild_command(path, configfile)}")
        for path in self.stale:
            lines.append(f"STALE {display_path(path)}")
            lines.append(
                f"  a temporary left by an interrupted write of {display_path(final_of(path))} (unless "
                f"a job writing it runs now); the next write removes it, or: rm -rf "
                f"{shlex.quote(display_path(path))}"
            )
        for path in self.unverified:
            lines.append(f"UNVERIFIED {display_path(path)}")
            lines.append(
                "  no manifest (written by an older causalpos): it opens, but lost or truncated "
                f"chunks cannot be detected; rebuild to add one: {rebuild_command(path, configfile)}"
            )
        lines.append("OK" if self.clean else "PROBLEMS FOUND")
        return "\n".join(lines)


def _is_store(path: Path) -> bool:
    return path.name.endswith(STORE_SUFFIX) or (path / "zarr.json").is_file()


def verify_tree(root: str | os.PathLike, *, checksums: bool = True) -> TreeReport:
    """Verify every store under ``root`` (manifest, metadata, counts) and list stale temporaries.

    ``checksums=False`` compares file sizes only (deleted and truncated files are still found).
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"causalpos verify: no directory {root}")
    out = TreeReport(root)

    def check(store: Path) -> None:
        try:
            (out.verified if verify_store(store, checksums=checksums) else out.unverified).append(
                store
            )
        except StoreError as e:
            out.damaged[store] = e

    if _is_store(root):
        check(root)
        return out
    for dirpath, dirnames, _files in os.walk(root):
        here = Path(dirpath)
        descend = []
        for name in sorted(dirnames):
            path = here / name
            if is_temporary(path):
                out.stale.append(path)
            elif _is_store(path):
                check(path)
            else:
                descend.append(name)
        dirnames[:] = descend
    return out
