"""``causalpos verify``: every store of a results tree checked against its manifest.

Snakemake judges a ``directory()`` output by its existence, so a store that lost a chunk after it
was written looks finished to it; this walk finds such stores, the tables whose provenance record
(``<table>.provenance.json``) contradicts their path, content or config, the temporaries that
killed jobs left behind and the outputs Snakemake still marks incomplete.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from causalpos.io.atomic import INCOMPLETE_DIR, final_of, incomplete_outputs, is_temporary
from causalpos.io.integrity import (
    MODEL_RECORD,
    PROVENANCE_ATTR,
    SIDECAR_SUFFIX,
    StoreError,
    display_path,
    rebuild_command,
    root_attributes,
    table_record,
)
from causalpos.io.modeldir import verify_model_dir
from causalpos.io.progress import is_terminal, progress_bar
from causalpos.io.provenance import config_words
from causalpos.io.provenance import record_problems as provenance_check
from causalpos.io.store import verify_store

#: ``record -> the record its config expects of its path`` (None: not known, not compared): what
#: ``causalpos verify`` compares a store's provenance record with (the config it names with
#: --configfile, else the config file the store records it was built with).
Expected = Callable[[Mapping], "Mapping | None"]

#: Directories with this suffix (or holding a root ``zarr.json``) are stores.
STORE_SUFFIX = ".zarr"

#: Exit status of ``causalpos verify``: every store verified, nothing stale.
EXIT_OK = 0
#: A store is damaged (a manifest folder missing included) or a temporary was left behind.
EXIT_DAMAGED = 1
#: No damage found, but some stores have no manifest (written by older code): unverified.
EXIT_UNVERIFIED = 3


@dataclass
class TreeReport:
    """What :func:`verify_tree` found under ``root``."""

    root: Path
    verified: list[Path] = field(default_factory=list)
    unverified: list[Path] = field(default_factory=list)  # no manifest (older causalpos)
    damaged: dict[Path, StoreError] = field(default_factory=dict)
    stale: list[Path] = field(default_factory=list)
    #: model directories whose weights match the sha256 their causalpos_source.json records
    models: list[Path] = field(default_factory=list)
    #: those of ``damaged`` that are model directories
    damaged_models: list[Path] = field(default_factory=list)
    #: stores whose provenance record contradicts their path or their config: what is wrong
    mismatched: dict[Path, list[str]] = field(default_factory=dict)
    #: the provenance record of each store of ``mismatched``
    records: dict[Path, dict] = field(default_factory=dict)
    #: stores whose settings could not be compared with a config, and why (one line each)
    unchecked: dict[Path, str] = field(default_factory=dict)
    #: tables with a provenance record (``<table>.provenance.json``); those at odds with it are
    #: also in ``mismatched``
    tables: list[Path] = field(default_factory=list)
    #: outputs under ``root`` that Snakemake marks incomplete (``.snakemake/incomplete``)
    incomplete: list[Path] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No damaged store, no stale temporary, no store or table at odds with its path, content
        or config, no output Snakemake marks incomplete."""
        return not (self.damaged or self.stale or self.mismatched or self.incomplete)

    @property
    def exit_code(self) -> int:
        """:data:`EXIT_DAMAGED` if anything is damaged or stale, else :data:`EXIT_UNVERIFIED` if
        a store could not be verified, else :data:`EXIT_OK`."""
        if not self.clean:
            return EXIT_DAMAGED
        return EXIT_UNVERIFIED if self.unverified else EXIT_OK

    def report(self) -> str:
        bad = len(self.damaged) - len(self.damaged_models)
        n = len(self.verified) + len(self.unverified) + bad
        tables = set(self.tables)
        bad_tables = sum(p in tables for p in self.mismatched)
        lines = [
            f"{display_path(self.root)}: {n} stores: {len(self.verified)} verified, "
            f"{bad} damaged, {len(self.unverified)} without a manifest, "
            f"{len(self.mismatched) - bad_tables} not what their path and config say; "
            f"{len(self.stale)} stale temporaries"
        ]
        if self.tables:
            lines[0] += (
                f"; {len(self.tables)} tables with a provenance record: {bad_tables} not what "
                "their path, content and config say"
            )
        if self.incomplete:
            lines[0] += f"; {len(self.incomplete)} outputs Snakemake marks incomplete"
        if self.models or self.damaged_models:
            lines[0] += (
                f"; {len(self.models) + len(self.damaged_models)} model directories: "
                f"{len(self.models)} verified, {len(self.damaged_models)} damaged"
            )
        for path, err in sorted(self.damaged.items()):
            lines.append(f"DAMAGED {display_path(path)}")
            lines += [f"  {p}" for p in err.problems]
            lines.append(f"  rebuild: {rebuild_command(path)}")
        for path, problems in sorted(self.mismatched.items()):
            record = self.records.get(path) or {}
            lines.append(f"MISMATCHED {display_path(path)} (written by a run with "
                         f"{config_words(record)})")  # fmt: skip
            lines += [f"  {p}" for p in problems]
            lines.append(f"  rebuild: {rebuild_command(path)}")
        for path, why in sorted(self.unchecked.items()):
            lines.append(f"  (settings of {display_path(path)} not compared: {why})")
        for path in self.incomplete:
            lines.append(f"INCOMPLETE {display_path(path)}")
            lines.append(
                f"  Snakemake marks it incomplete ({INCOMPLETE_DIR}): its job started and did not "
                "finish (killed, or running now), so what is there may be partial; rerun it: "
                f"{rebuild_command(path, flag='--rerun-incomplete')}"
            )
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
                "  no manifest and no store-format marker (written by an older causalpos): it "
                "opens, but lost or truncated chunks cannot be detected; rebuild to add one: "
                f"{rebuild_command(path)}"
            )
        if not self.clean:
            lines.append("PROBLEMS FOUND")
        elif self.unverified:
            lines.append(f"UNVERIFIED STORES ({len(self.unverified)}): rebuild them to verify them")
        else:
            lines.append("OK")
        return "\n".join(lines)


def _is_store(path: Path) -> bool:
    return path.name.endswith(STORE_SUFFIX) or (path / "zarr.json").is_file()


def _walk(
    root: Path,
) -> tuple[list[tuple[bool, Path]], list[Path], list[tuple[Path, list[str]]]]:
    """``(is_model, path)`` of every store and model directory under ``root`` (``root`` itself
    when it is one), in the walk's order (sorted within each directory), the stale temporaries,
    and ``(directory, its files, sorted)`` of every other directory visited (where tables and
    their provenance records lie); symbolic links inside the tree are followed, each directory
    visited once, so a link back up the tree ends the walk there."""
    if _is_store(root):
        return [(False, root)], [], []
    if (root / MODEL_RECORD).is_file():
        return [(True, root)], [], []
    found, stale, listed = [], [], []
    seen = {root.resolve()}
    for dirpath, dirnames, files in os.walk(root, followlinks=True):
        here = Path(dirpath)
        listed.append((here, sorted(files)))
        descend = []
        for name in sorted(dirnames):
            path = here / name
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            if is_temporary(path):
                stale.append(path)
            elif _is_store(path):
                found.append((False, path))
            elif (path / MODEL_RECORD).is_file():  # a model directory: its weights' sha256
                found.append((True, path))
            else:
                descend.append(name)
        dirnames[:] = descend
    return found, stale, listed


def _incomplete_under(root: Path, pipelines: list[Path]) -> list[Path]:
    """The existing outputs under ``root`` that Snakemake marks incomplete in any of the
    pipeline directories ``pipelines`` (each once)."""
    real_root, out = root.resolve(), {}
    for pipeline in dict.fromkeys(p.resolve() for p in pipelines):
        for name in incomplete_outputs(pipeline):
            path = pipeline / name
            real = path.resolve()
            if (real == real_root or real_root in real.parents) and path.exists():
                out.setdefault(real, path)
    return sorted(out.values())


def verify_tree(
    root: str | os.PathLike,
    *,
    checksums: bool = True,
    expected: Expected | None = None,
    progress: TextIO | None = None,
) -> TreeReport:
    """Verify every store under ``root`` (manifest, metadata, counts; its provenance record
    against its path and, where ``expected`` gives one, the record its config expects), every
    table with a provenance record (``<table>.provenance.json``: its content's sha256, its path
    and its config's record, likewise) and every model directory (the sha256 of its weights
    files, as its ``causalpos_source.json`` records them, and the model name it records against
    the directory's), and list stale temporaries and the outputs under ``root`` that Snakemake
    marks incomplete in the pipeline directories (the working directory and the one above
    ``root``), following symbolic links inside the tree (each directory once).

    ``checksums=False`` compares file sizes only (deleted and truncated files are still found).
    ``progress``: a stream for the progress of the checks (stores and model directories checked
    of all found, the one being checked; :func:`causalpos.io.progress.progress_bar`: redrawn on
    a terminal, plain lines elsewhere); None: none.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"causalpos verify: no directory {root}")
    out = TreeReport(root)
    out.incomplete = _incomplete_under(root, [Path.cwd(), Path(os.path.abspath(root)).parent])

    def compare(path: Path, record: dict) -> None:
        want = None
        if expected is not None:
            try:
                want = expected(record)
            except (LookupError, OSError, ValueError) as exc:  # the config cannot be read
                out.unchecked[path] = str(exc)
        problems = provenance_check(path, record, want)
        if problems:
            out.mismatched[path] = problems
            out.records[path] = record

    def check(store: Path) -> None:
        try:
            ok = verify_store(store, checksums=checksums)
        except StoreError as e:
            out.damaged[store] = e
            return
        (out.verified if ok else out.unverified).append(store)
        record = (root_attributes(store) or {}).get(PROVENANCE_ATTR)
        if isinstance(record, dict):
            compare(store, record)

    def check_tables(directory: Path, files: list[str]) -> None:
        for name in files:
            table = directory / name.removesuffix(SIDECAR_SUFFIX)
            if name.endswith(SIDECAR_SUFFIX) and table.is_file():
                out.tables.append(table)
                compare(table, table_record(table) or {})

    def check_model(model: Path) -> None:
        try:
            if verify_model_dir(model):
                out.models.append(model)
        except StoreError as e:
            out.damaged[model] = e
            out.damaged_models.append(model)

    # Symbolic links inside the tree are followed (`results/normalized` may live on another disk)
    items, out.stale, listed = _walk(root)
    for directory, files in listed:
        check_tables(directory, files)
    bar = progress_bar(
        total=len(items),
        desc=f"verify {display_path(root)}",
        unit="store",
        file=progress,
        disable=progress is None,
    )
    for is_model, path in items:
        bar.set_postfix_str(display_path(path), refresh=is_terminal(progress))
        (check_model if is_model else check)(path)
        bar.update(1)
    bar.close()
    return out
