"""A job's own record of its cost (CPU time, peak memory at its end), for another rule to read.
The leakage summaries write one (``causalpos.paths.LEAKAGE_COST``), which prices the scorecard's
power notes: Snakemake's benchmark table samples a 15-45 s job's CPU at about 15 s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from causalpos.io.atomic import replace_json
from causalpos.io.joblog import peak_rss_mib, process_cpu_s


def write_job_cost(path: str | os.PathLike) -> dict:
    """Write this process's ``cpu_s`` (start-up included) and ``peak_rss_mib`` so far to ``path``
    (JSON, renamed into place); returns the record."""
    record = {"cpu_s": round(process_cpu_s(), 3), "peak_rss_mib": round(peak_rss_mib(), 1)}
    if not replace_json(path, record):
        raise OSError(f"cannot write the job's cost record {path}")
    return record


def read_job_cost(path: str | os.PathLike) -> tuple[float, float | None]:
    """``(cpu_s, peak_rss_mib)`` of a :func:`write_job_cost` record; ValueError naming the file
    for one that is not (a missing peak reads None)."""
    try:
        record = json.loads(Path(path).read_text())
        cpu, rss = float(record["cpu_s"]), record.get("peak_rss_mib")
        return cpu, None if rss is None else float(rss)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{path}: not a job cost record ({type(e).__name__}: {e})") from None
