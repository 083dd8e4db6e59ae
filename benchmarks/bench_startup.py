"""Start-up CPU of every rule's job: what its script imports before the work starts.

For each ``workflow/scripts/<rule>.py``, a fresh interpreter runs what the job runs before
``causalpos.io.runlog.logged`` starts its clock: Snakemake's script preamble imports
(``snakemake.logging``, ``snakemake.iocontainers``), ``causalpos.io.runlog``, the call that holds
the cyclic collector off where the script makes it (:func:`collector_of`) and the rule's stage
function; user + system CPU of the process at that point (the ``start-up`` of the job's ``done``
line, less the unpickling of the job's parameters), the median of ``--repeats`` runs. Beside it:
the same plus ``causalpos.io.store`` (xarray), what a job that opens a store pays in all before
its first read, and the libraries loaded at start-up.

    python benchmarks/bench_startup.py                     # this checkout, Markdown table
    python benchmarks/bench_startup.py --repo OTHER_CLONE  # another checkout's library and scripts
    python benchmarks/bench_startup.py --rules plot_fig1 scorecard --repeats 9

With ``--yardstick`` the single-thread sgemm rate is measured before and after
(:mod:`yardstick`) and each figure is also given at the reference speed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Libraries reported when a job's start-up loaded them.
LIBRARIES = ("torch", "transformers", "scipy", "pandas", "xarray", "matplotlib")

_CODE = """
import resource, sys, json
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
from snakemake.logging import logger
from snakemake.iocontainers import Snakemake
from causalpos.io.runlog import logged
{collector}
from {module} import {function}
startup = cpu()
loaded = [m for m in {libraries!r} if m in sys.modules]
import gc; gc.enable()  # as logged() turns it back on
import causalpos.io.store
print(json.dumps([startup, cpu(), loaded]))
"""


def stage_of(script: Path) -> tuple[str, str]:
    """(stage module, function) that ``script`` imports."""
    m = re.search(r"^from (causalpos\.stages\.\w+) import (\w+)", script.read_text(), re.M)
    if m is None:
        raise ValueError(f"{script}: no 'from causalpos.stages.<family> import <rule>' line")
    return m[1], m[2]


#: What a script calls before it imports its stage: the collector held off until its block.
COLLECTOR_CALL = "collector_off_until_logged()"


def collector_of(script: Path) -> str:
    """The statement ``script`` runs between the job glue's import and its stage's: the call that
    holds the cyclic collector off (:func:`causalpos.io.runlog.collector_off_until_logged`) where
    the script makes it (an older checkout's do not), else nothing."""
    if re.search(rf"^{re.escape(COLLECTOR_CALL)}", script.read_text(), re.M):
        return f"from causalpos.io.runlog import collector_off_until_logged\n{COLLECTOR_CALL}"
    return ""


def measure(repo: Path, script: Path, repeats: int) -> dict:
    """Median start-up CPU-s of ``script``'s job over ``repeats`` fresh interpreters, with and
    without the store reader, and the libraries its start-up loads."""
    module, function = stage_of(script)
    code = _CODE.format(
        module=module, function=function, libraries=LIBRARIES, collector=collector_of(script)
    )
    startup, with_reader, loaded = [], [], []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=repo,
            env={"PYTHONPATH": str(repo / "src"), "PATH": "/usr/bin:/bin"},
            check=True,
        )
        s, r, loaded = json.loads(out.stdout)
        startup.append(s)
        with_reader.append(r)
    return {
        "rule": script.stem,
        "startup_cpu_s": statistics.median(startup),
        "with_reader_cpu_s": statistics.median(with_reader),
        "libraries": loaded,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout to measure")
    ap.add_argument("--rules", nargs="*", help="these rules only (default: every script)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--yardstick", action="store_true", help="measure sgemm before and after")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    scripts = sorted((args.repo / "workflow" / "scripts").glob("*.py"))
    if args.rules:
        unknown = set(args.rules) - {s.stem for s in scripts}
        if unknown:
            ap.error(f"no script for rule(s) {sorted(unknown)} in {args.repo}/workflow/scripts")
        scripts = [s for s in scripts if s.stem in args.rules]
    rate = []
    if args.yardstick:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from yardstick import at_reference, sgemm_gflops

        rate.append(sgemm_gflops())
    rows = [measure(args.repo, s, args.repeats) for s in scripts]
    scale = None
    if args.yardstick:
        rate.append(sgemm_gflops())
        scale = at_reference(1.0, statistics.mean(rate))
    if args.json:
        print(json.dumps({"rows": rows, "yardstick_gflops": rate}, indent=1))
        return 0
    ref = " | start-up at the reference speed" if scale else ""
    print(f"| rule | start-up CPU-s | with the store reader{ref} | libraries at start-up |")
    print("|---|---|---|" + ("---|" if scale else "") + "---|")
    for r in rows:
        at_ref = f" | {r['startup_cpu_s'] * scale:.2f}" if scale else ""
        print(
            f"| `{r['rule']}` | {r['startup_cpu_s']:.2f} | {r['with_reader_cpu_s']:.2f}{at_ref} | "
            f"{', '.join(r['libraries']) or '—'} |"
        )
    if rate:
        print(f"\nyardstick {rate[0]:.1f} / {rate[1]:.1f} GFLOP/s (before / after)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
