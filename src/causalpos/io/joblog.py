"""What a job's log records of the job: its last line (:func:`done_line`, written by
:func:`causalpos.io.runlog.logged`), read back for every job of a run by :func:`read_job_logs`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import NamedTuple


def process_cpu_s() -> float:
    """CPU seconds (user + system, every thread) this process has used since it started: the
    interpreter, Snakemake's script preamble and the imports included."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB (2**20 bytes, as Snakemake's ``max_rss``).

    On Linux ``VmHWM`` of ``/proc/self/status``: ``ru_maxrss`` there keeps the peak of the image
    before ``exec``, so a child started by ``vfork`` reads its parent's (measured: 510 MiB for
    a 9 MiB child). Elsewhere ``ru_maxrss`` (bytes on macOS, KiB on the BSDs)."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmHWM:"):
                        return int(line.split()[1]) / 1024  # kB
        except (OSError, ValueError, IndexError):
            pass
    import resource

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024


def done_line(
    wall_s: float,
    cpu_s: float,
    startup_cpu_s: float,
    torch_note: str,
    peak_rss_mib: float | None = None,
) -> str:
    """The last line of a job's log: the block's wall time, the process's CPU in all and the
    part of it spent before the block began (its start-up), its peak resident memory in MiB
    (:func:`peak_rss_mib`), and whether torch was loaded, e.g. ``done in 41.2 s; CPU 40.87 s,
    start-up 1.62 s, peak RSS 2,310 MiB (torch loaded)``."""
    rss = "" if peak_rss_mib is None else f", peak RSS {peak_rss_mib:,.0f} MiB"
    return (
        f"done in {wall_s:.1f} s; CPU {cpu_s:.2f} s, start-up {startup_cpu_s:.2f} s{rss}"
        f" ({torch_note})"
    )


_DONE = re.compile(
    r"^done in (?P<wall>[0-9.]+) s(?:; CPU (?P<cpu>[0-9.]+) s, start-up (?P<startup>[0-9.]+) s"
    r"(?:, peak RSS (?P<rss>[0-9,]+) MiB)?)? \((?P<torch>[^)]*)\)$"
)


def parse_done_line(line: str) -> dict | None:
    """``{"wall_s", "cpu_s", "startup_cpu_s", "peak_rss_mib", "torch"}`` of a :func:`done_line`
    (CPU figures and peak RSS None in a log written before they were recorded); None when
    ``line`` is not one."""
    m = _DONE.match(line.strip())
    if m is None:
        return None
    figures = {"wall_s": "wall", "cpu_s": "cpu", "startup_cpu_s": "startup", "peak_rss_mib": "rss"}
    out = {k: None if m[g] is None else float(m[g].replace(",", "")) for k, g in figures.items()}
    return {**out, "torch": m["torch"]}


class JobLog(NamedTuple):
    """One job's log under a run's ``logs/``: its rule (the first part of the path), the job (the
    path below ``logs/`` without ``.log``, e.g. ``extract_scores/m/d/shard-0000``) and the
    figures of its last :func:`done_line`; those are None where the log has none (a failed or
    running job) or was written before they were recorded."""

    rule: str
    job: str
    log: Path
    wall_s: float | None
    cpu_s: float | None
    startup_cpu_s: float | None
    peak_rss_mib: float | None
    torch: str | None


def read_job_logs(logs_dir: str | os.PathLike) -> list[JobLog]:
    """Every ``*.log`` under ``logs_dir`` (a run's ``logs/``), sorted by path, as a
    :class:`JobLog`: what each job recorded in its last line (:func:`causalpos.io.runlog.logged`)."""
    root = Path(logs_dir)
    out = []
    for log in sorted(root.rglob("*.log")):
        done = None
        for line in reversed(log.read_text(errors="replace").splitlines()):
            done = parse_done_line(line)
            if done is not None:
                break
        job = log.relative_to(root).with_suffix("").as_posix()
        figures = done or dict.fromkeys(JobLog._fields[3:])
        out.append(JobLog(rule=job.split("/", 1)[0], job=job, log=log, **figures))
    return out
