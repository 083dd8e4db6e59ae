"""``causalpos verify``: every store of a results tree checked against its manifest.

Snakemake takes a store that lost a chunk for a finished one; this walk finds such stores, the
tables whose provenance record contradicts their path, content or config, the temporaries that
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

#: ``record -> the record its config expects of its path`` (None: not compared).
Expected = Callable[[Mapping], "Mapping | None"]

#: Exit statuses of ``causalpos verify``: all verified; something damaged, stale, mismatched or
#: incomplete; nothing is, but some stores have no manifest (older code).
EXIT_OK, EXIT_DAMAGED, EXIT_UNVERIFIED = 0, 1, 3


@dataclass
class TreeReport:
    """What :func:`verify_tree` found under ``root``: ``models``, the model directories whose
    weights match their record (those damaged are in ``damaged`` and ``damaged_models``);
    ``mismatched``, the stores and tables at odds with their provenance record (``records``:
    theirs); ``unchecked``, why a store's settings could not be compared; ``tables``, those with
    a record; ``incomplete``, what Snakemake marks incomplete."""

    root: Path
    verified: list[Path] = field(default_factory=list)
    unverified: list[Path] = field(default_factory=list)
    damaged: dict[Path, StoreError] = field(default_factory=dict)
    stale: list[Path] = field(default_factory=list)
    models: list[Path] = field(default_factory=list)
    damaged_models: list[Path] = field(default_factory=list)
    mismatched: dict[Path, list[str]] = field(default_factory=dict)
    records: dict[Path, dict] = field(default_factory=dict)
    unchecked: dict[Path, str] = field(default_factory=dict)
    tables: list[Path] = field(default_factory=list)
    incomplete: list[Path] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.damaged or self.stale or self.mismatched or self.incomplete)

    @property
    def exit_code(self) -> int:
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
        broken = [(p, "DAMAGED", "", e.problems) for p, e in sorted(self.damaged.items())]
        for p, problems in sorted(self.mismatched.items()):
            origin = f" (written by a run with {config_words(self.records.get(p) or {})})"
            broken.append((p, "MISMATCHED", origin, problems))
        for path, head, origin, problems in broken:
            lines.append(f"{head} {display_path(path)}{origin}")
            lines += [f"  {p}" for p in problems]
            lines.append(f"  rebuild: {rebuild_command(path)}")
        for path, why in sorted(self.unchecked.items()):
            lines.append(f"  (settings of {display_path(path)} not compared: {why})")
        for path in self.incomplete:
            lines += [
                f"INCOMPLETE {display_path(path)}",
                f"  Snakemake marks it incomplete ({INCOMPLETE_DIR}): its job started and did not "
                "finish (killed, or running now), so what is there may be partial; rerun it: "
                f"{rebuild_command(path, flag='--rerun-incomplete')}",
            ]
        for path in self.stale:
            lines += [
                f"STALE {display_path(path)}",
                f"  a temporary left by an interrupted write of {display_path(final_of(path))} "
                "(unless a job writing it runs now); the next write removes it, or: rm -rf "
                f"{shlex.quote(display_path(path))}",
            ]
        for path in self.unverified:
            lines += [
                f"UNVERIFIED {display_path(path)}",
                "  no manifest and no store-format marker (written by an older causalpos): it "
                "opens, but lost or truncated chunks cannot be detected; rebuild to add one: "
                f"{rebuild_command(path)}",
            ]
        if not self.clean:
            lines.append("PROBLEMS FOUND")
        elif self.unverified:
            lines.append(f"UNVERIFIED STORES ({len(self.unverified)}): rebuild them to verify them")
        else:
            lines.append("OK")
        return "\n".join(lines)


def _is_store(path: Path) -> bool:
    return path.name.endswith(".zarr") or (path / "zarr.json").is_file()


def _walk(
    root: Path,
) -> tuple[list[tuple[bool, Path]], list[Path], list[tuple[Path, list[str]]]]:
    """``(is_model, path)`` of every store and model directory under ``root`` (or ``root``
    itself), the stale temporaries, and ``(directory, sorted files)`` of every other directory
    visited; links are followed, each directory visited once (a link up the tree ends there)."""
    if _is_store(root) or (root / MODEL_RECORD).is_file():
        return [(not _is_store(root), root)], [], []
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
    """The existing outputs under ``root`` that Snakemake marks incomplete in any of
    ``pipelines``, each once."""
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
    """Verify every store under ``root`` (manifest, metadata, counts, provenance record against
    its path and ``expected``), every table with a provenance record and every model directory
    (weights' sha256, model name), and list stale temporaries and the outputs Snakemake marks
    incomplete in the working directory or the one above ``root``.

    ``checksums=False`` compares file sizes only. ``progress``: a stream for a progress bar
    (:func:`causalpos.io.progress.progress_bar`); None: none.
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

    def check_model(model: Path) -> None:
        try:
            if verify_model_dir(model):
                out.models.append(model)
        except StoreError as e:
            out.damaged[model] = e
            out.damaged_models.append(model)

    items, out.stale, listed = _walk(root)
    for directory, files in listed:
        for name in files:
            table = directory / name.removesuffix(SIDECAR_SUFFIX)
            if name.endswith(SIDECAR_SUFFIX) and table.is_file():
                out.tables.append(table)
                compare(table, table_record(table) or {})
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
