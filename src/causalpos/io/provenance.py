"""Provenance: what a store or table is (its path's fields, the settings that made it, the config
and checkout of the run that wrote it), recorded with it and checked where it is read.

A store written by another checkout or config (a shared ``results/``, a copy), or copied in under
another model's path, would look finished to Snakemake. So a store records, in its root
attributes (:data:`PROVENANCE_ATTR`; its keys: docs/troubleshooting.md), the record the running
config expects of its path; a table keeps it, with the ``sha256`` of its content, in
``<table>.provenance.json``. The expected records are computed once per Snakemake start into the
JSON file :data:`TABLE_ENV` names; a reader compares its record with that entry and its path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from causalpos.io.atomic import replace_json
from causalpos.io.fingerprint import sha256_file
from causalpos.io.integrity import PROVENANCE_ATTR, SIDECAR_SUFFIX, sidecar, table_record
from causalpos.io.runconfig import (
    config_args,
    config_options,
    config_values,
    configfiles,
    display_path,
    run_configfiles,
)

#: Environment variable naming the JSON table of the records the running config expects.
TABLE_ENV = "CAUSALPOS_PROVENANCE"
#: Environment variable holding the identity of the checkout running the pipeline.
CHECKOUT_ENV = "CAUSALPOS_CHECKOUT"
#: Differences spelled out in one message.
_SHOWN = 6
#: The key of a table's params holding the params sha256 of each input
#: (:meth:`causalpos.config.targets.TargetsSection.table_jobs`).
INPUTS_KEY = "inputs"


def params_sha256(params: Mapping) -> str:
    """The sha256 of ``params`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def make_record(path: str, kind: str, fields: Mapping[str, str], params: Mapping) -> dict:
    """The record a store at ``path`` (relative to the pipeline directory) is expected to carry."""
    return {
        "path": path,
        "kind": kind,
        "fields": dict(fields),
        "params": json.loads(json.dumps(params, sort_keys=True, default=str)),
        "params_sha256": params_sha256(params),
    }


_TABLE: dict[str, object] = {}


def running_table() -> dict[str, dict] | None:
    """``{store path: record}`` the running config expects (:data:`TABLE_ENV`'s file, read once
    per file version); None outside the pipeline."""
    name = os.environ.get(TABLE_ENV)
    if not name:
        return None
    try:
        stat = os.stat(name)
    except OSError:
        return None
    key = (name, stat.st_mtime_ns, stat.st_size)
    if _TABLE.get("key") != key:
        try:
            records = json.loads(Path(name).read_text())["records"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        _TABLE.update(key=key, records=records)
    return _TABLE["records"]  # type: ignore[return-value]


def expected_record(store: str | os.PathLike) -> dict | None:
    """The record the running config expects of ``store``; None where none is known (outside the
    pipeline, a path it does not write such as a shard)."""
    table = running_table()
    return None if table is None else table.get(display_path(store))


def record_to_write(store: str | os.PathLike) -> dict | None:
    """The record a job writing ``store`` (or a table) gives it: the expected one with the run's
    config files, ``--config`` overrides and checkout; None where none is expected."""
    expected = expected_record(store)
    if expected is None:
        return None
    return {
        **expected,
        "configfiles": run_configfiles() or [],
        "config_args": config_args(),
        "config_values": config_values(),
        "checkout": os.environ.get(CHECKOUT_ENV, ""),
    }


def config_words(record: Mapping) -> str:
    """How the run that wrote a store or table was configured, in words."""
    files = record.get("configfiles")
    if files is None:
        return "an unknown config"
    words = "--configfile " + " ".join(map(str, files)) if files else "the default config.yaml"
    args = record.get("config_args") or []
    return words + (" --config " + " ".join(map(shlex.quote, map(str, args))) if args else "")


def _noun(path: str | os.PathLike) -> str:
    """ "store" for a store (a directory), "table" for a table (a file)."""
    return "table" if Path(path).is_file() or Path(path).suffix in (".csv", ".md") else "store"


def path_problem(store: str | os.PathLike, recorded: Mapping) -> str | None:
    """Why ``store`` (or a table) is not where its record says it was written, or None. The
    results root's own name is not compared (a moved ``results/`` is the same tree)."""
    written = Path(str(recorded.get("path", ""))).parts[1:]
    if not written:
        return None
    here = Path(os.path.abspath(store)).parts[-len(written) :]
    if tuple(here) == tuple(written):
        return None
    fields = ", ".join(f"{k} {v!r}" for k, v in (recorded.get("fields") or {}).items())
    noun = _noun(store)
    return (
        f"it records that it was written as {recorded.get('path')} ({fields}), not as the "
        f"{noun} at this path: another {noun} copied or moved here"
    )


def _flat(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, Mapping) and value:
        out: dict[str, object] = {}
        for k in sorted(value, key=str):
            out.update(_flat(value[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix or "(params)": value}


def params_differences(recorded: Mapping, expected: Mapping, noun: str = "store") -> list[str]:
    """``key: the store has A, this config B`` for every setting that differs (dotted keys); a
    table's changed :data:`INPUTS_KEY` in one item naming them."""
    recorded, expected = dict(recorded), dict(expected)
    inputs = (recorded.pop(INPUTS_KEY, None) or {}), (expected.pop(INPUTS_KEY, None) or {})
    a, b = _flat(recorded), _flat(expected)
    missing = object()
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, missing), b.get(key, missing)
        if x != y:
            xs, ys = ("nothing" if v is missing else json.dumps(v, default=str) for v in (x, y))
            out.append(f"{key}: the {noun} has {xs}, this config {ys}")
    changed = sorted(
        k for k in set(inputs[0]) | set(inputs[1]) if inputs[0].get(k) != inputs[1].get(k)
    )
    if changed:
        shown = ", ".join(changed[:_SHOWN]) + (
            f" and {len(changed) - _SHOWN} more" if len(changed) > _SHOWN else ""
        )
        out.append(
            f"{INPUTS_KEY}: the {noun} was computed from other versions of {shown} (made with "
            "other settings, or not inputs of it under this config)"
        )
    return out


def params_problem(recorded: Mapping, expected: Mapping, noun: str = "store") -> str | None:
    """Why a store's or table's recorded params are not the ones the config expects, or None."""
    if recorded.get("params_sha256") == expected.get("params_sha256"):
        return None
    diffs = params_differences(
        recorded.get("params") or {}, expected.get("params") or {}, noun=noun
    )
    shown = "; ".join(diffs[:_SHOWN]) or (
        f"params sha256 {str(recorded.get('params_sha256'))[:12]}..., this config's "
        f"{str(expected.get('params_sha256'))[:12]}..."
    )
    more = f"; and {len(diffs) - _SHOWN} more" if len(diffs) > _SHOWN else ""
    return f"it was made with other settings than this config's ({shown}{more})"


def content_problem(table: str | os.PathLike, recorded: Mapping) -> str | None:
    """Why ``table``'s content is not the one its record's sha256 was written for, or None."""
    if "unreadable" in recorded:
        side = display_path(sidecar(table))
        return f"its provenance record {side} does not parse ({recorded['unreadable']})"
    want = recorded.get("sha256")
    if not want or not Path(table).is_file() or sha256_file(table) == want:
        return None
    return (
        "its content is not the one its provenance record was written for (the table was edited "
        f"or replaced after it was written, e.g. copied in without its {SIDECAR_SUFFIX})"
    )


def record_problems(
    store: str | os.PathLike, recorded: Mapping | None, expected: Mapping | None
) -> list[str]:
    """What is wrong with the store or table ``store`` given its record and the expected one:
    content, path, params; [] where nothing is, or it records nothing (an older causalpos)."""
    if not isinstance(recorded, Mapping):
        return []
    problems = [content_problem(store, recorded)]
    if "unreadable" not in recorded:
        problems.append(path_problem(store, recorded))
        if expected is not None:
            problems.append(params_problem(recorded, expected, noun=_noun(store)))
    return [p for p in problems if p]


def fix_words(store: str | os.PathLike) -> str:
    """What to do about a store or table that is not what its path and the config say."""
    target = Path(store)  # a score store is written by its pair directory's job
    if target.suffix == ".zarr" and len(target.parts) >= 4 and target.parts[-4] == "scores":
        target = target.parent
    return (
        f"Fix: rebuild it for this config (it replaces the {_noun(store)}): `snakemake --forcerun "
        f"{shlex.quote(display_path(target))}{config_options(configfiles(), config_args())} "
        "--cores 1`; or, where another checkout or config shares this results tree, give each "
        "checkout a results tree of its own"
    )


class ProvenanceError(OSError):
    """A store or table that is not what its path and the running config say (copied in under
    its path, made with other settings, edited after it was written); says what to do."""

    def __init__(self, path: str | os.PathLike, problems: list[str], recorded: Mapping):
        self.path, self.problems, self.recorded = Path(path), list(problems), dict(recorded)
        origin = f"written by a run with {config_words(recorded)}"
        if recorded.get("checkout") and recorded.get("checkout") != os.environ.get(CHECKOUT_ENV):
            origin += " in another checkout"
        super().__init__(
            f"{_noun(path)} {display_path(path)} is not what its path and the config say "
            f"({origin}): " + "; ".join(self.problems) + f". {fix_words(path)}"
        )

    def __reduce__(self):
        return (type(self), (self.path, self.problems, self.recorded))

    #: :func:`causalpos.io.runlog.logged` ends a job on it with the message alone.
    explained = True


def stamp(attrs: dict, store: str | os.PathLike) -> None:
    """Put :func:`record_to_write` into the dataset attributes ``attrs``, or take out one
    carried over from a store that was read."""
    record = record_to_write(store)
    if record is None:
        attrs.pop(PROVENANCE_ATTR, None)
    else:
        attrs[PROVENANCE_ATTR] = record


def _check(path: str | os.PathLike, recorded: Mapping | None) -> None:
    """:class:`ProvenanceError` where :func:`record_problems` finds any in ``path``'s record."""
    problems = record_problems(path, recorded, expected_record(path))
    if problems:
        raise ProvenanceError(path, problems, recorded)


def check_opened(store: str | os.PathLike, attrs: dict) -> None:
    """Take the record out of an opened store's ``attrs`` (readers never see it) and check it."""
    _check(store, attrs.pop(PROVENANCE_ATTR, None))


def stamp_table(*tables: str | os.PathLike) -> None:
    """After a job wrote each table of ``tables``: :func:`record_to_write` with the sha256 of
    its content, written beside it (:func:`causalpos.io.integrity.sidecar`); an old sidecar
    removed where none is expected."""
    for table in tables:
        record = record_to_write(table)
        side = sidecar(table)
        if record is None:
            side.unlink(missing_ok=True)
            continue
        record["sha256"] = sha256_file(table)
        if not replace_json(side, record):
            raise OSError(f"could not write the provenance record {display_path(side)} of {table}")


def check_table(*tables: str | os.PathLike) -> None:
    """Before a job reads each table of ``tables``: :class:`ProvenanceError` where its record
    shows problems (:func:`record_problems`); a table without a record passes."""
    for table in tables:
        _check(table, table_record(table))
