"""The stores and tables on disk checked against the provenance records the config expects of their
paths (:func:`causalpos.config.provenance.expected_records`), and the refusal naming those that
differ with the command that rebuilds them. Torch-free; reads only records and root metadata."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import causalpos.paths as paths
from causalpos.io.integrity import MODEL_RECORD, display_path, recorded_record
from causalpos.io.provenance import config_words, record_problems

#: The rules that write each kind of store (a ``--forcerun`` of one skips its stores' check).
KIND_RULES = {
    "sim": ("simulate",),
    "data": ("sample_sequences",),
    "scores": ("extract_scores", "merge_scores", "extract_scores_shard"),
    "normalized": ("diagonal_normalize",),
    "leakage": ("leakage",),
    "position0": ("position0",),
    "gram": ("gram_panels",),
    "lengthgen": ("length_generalization",),
}
#: The kind of a table's record (a table rule's outputs: ``Resolved.table_jobs``).
TABLE_KIND = "table"
#: Stores listed in one refusal before "and N more".
_LISTED = 12


def store_problems(
    records: dict[str, dict],
    *,
    checkout: str,
    forced: Iterable[str] = (),
    forceall: bool = False,
    incomplete: Iterable[str] = (),
) -> dict[str, tuple[list[str], dict]]:
    """``{store: (problems, its record)}`` of the existing stores and tables of ``records`` that
    are not what their paths and the config say: at another's path, a table edited after it was
    written, or made with other settings by another checkout (one made here is left to
    Snakemake's params trigger). Skipped: those the command line rebuilds, and ``incomplete``."""
    if forceall:
        return {}
    forced = {display_path(f) for f in forced} | set(incomplete)
    jobs: dict[str, set] = {}  # a table job's outputs and rule, by output
    for r in records.values():
        for p in r.get("outputs", ()):
            jobs.setdefault(p, set()).update(r["outputs"], [r["rule"]])
    out = {}
    for path, expected in records.items():
        # --forcerun rebuilds it: it, its job's output, its rule or a table job's others is forced
        kind = expected["kind"]
        job_output = str(Path(path).parent) if kind == "scores" else path
        if {path, job_output, *jobs.get(path, ()), *KIND_RULES.get(kind, ())} & forced:
            continue
        recorded = recorded_record(path)  # a store's root metadata, a table's sidecar
        if not isinstance(recorded, dict):
            continue  # written by an older causalpos: no record to compare
        ours = bool(checkout) and recorded.get("checkout") == checkout
        problems = record_problems(path, recorded, None if ours else expected)
        if problems:
            out[path] = (problems, recorded)
    return out


def model_dir_problems(
    model_names: Iterable[str], forced: Iterable[str] = ()
) -> dict[str, tuple[list[str], dict]]:
    """Prepared model directories whose record names another model (copied under this name)."""
    forced = {display_path(f) for f in forced}
    out = {}
    for name in model_names:
        d = Path(paths.MODEL_DIR.format(model=name))
        if str(d) in forced or "prepare_model" in forced:
            continue
        try:
            record = json.loads((d / MODEL_RECORD).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("name") not in (None, name):
            out[str(d)] = (
                [f"its {MODEL_RECORD} records model {record.get('name')!r}: another model's "
                 "directory copied or moved here"],
                {},
            )  # fmt: skip
    return out


def refusal(
    found: dict[str, tuple[list[str], dict]],
    run_configfiles: list[str],
    run_config_args: list[str] = (),
) -> str:
    """The message of :func:`check_existing_stores`: each store or table, what it records, what
    is expected, and one command rebuilding them all for this config."""
    import shlex

    from causalpos.io.integrity import config_options

    run = {"configfiles": run_configfiles, "config_args": list(run_config_args)}
    lines = [
        f"causalpos: {len(found)} existing output(s) are not what their paths and this config "
        f"({config_words(run)}) say (Snakemake, which judges them by this checkout's records, "
        "would use them as they are):"
    ]
    for path, (problems, recorded) in list(found.items())[:_LISTED]:
        origin = f" (written by a run with {config_words(recorded)})" if recorded else ""
        lines.append(f"  {path}{origin}: " + "; ".join(problems))
    if len(found) > _LISTED:
        lines.append(f"  ... and {len(found) - _LISTED} more")

    def target(p: str, recorded: dict) -> str:  # the job's output a --forcerun names (one per job)
        if "/scores/" in p and p.endswith(".zarr"):
            return str(Path(p).parent)
        return (recorded.get("outputs") or [p])[0] if recorded.get("kind") == TABLE_KIND else p

    targets = " ".join(
        shlex.quote(t) for t in dict.fromkeys(target(p, r) for p, (_, r) in found.items())
    )
    config = config_options(run_configfiles, list(run_config_args))
    lines.append(
        "Fix: rebuild them for this config (each is replaced), then everything built from "
        f"them: `snakemake --forcerun {targets}{config} --cores N`; or, where another checkout "
        "or config shares this results tree, give each checkout a results tree of its own (and a "
        "models directory of its own, for model directories)"
    )
    return "\n".join(lines)
