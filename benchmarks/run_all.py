"""Benchmarks of the heavy stages on the current machine, as one Markdown report.

    python benchmarks/run_all.py                      # simulation + extraction
    python benchmarks/run_all.py --pipeline           # + the default pipeline and its budget
    python benchmarks/run_all.py --out benchmarks.md  # also write the report to a file
    python benchmarks/run_all.py --tests              # + wall time of the test suite (pytest)
    python benchmarks/run_all.py --breakdown DIR      # per-rule time / memory of a finished run

Runs ``bench_simulate.py`` (one paper-scale simulation setting, median of repeats, peak RSS) and
``bench_extract.py`` (extraction throughput vs a plain forward pass of SmolLM2-135M, peak memory
of each mode) as subprocesses, and with ``--pipeline`` times ``snakemake --cores N`` on the
embedded default config in a fresh copy of the pipeline, then its per-stage budget (``budget.py``)
(``--tests``: ``pytest`` in this checkout).
The header records date, hardware, commit and the **yardstick** (``yardstick.py``: single-thread
sgemm GFLOP/s, measured before and after the timed work); each wall time is also given at the
reference speed (95 GFLOP/s), so figures from a slower or faster day can be compared.
Each job's log ends with its wall time, CPU time and peak RSS (``causalpos.io.runlog``);
``--breakdown DIR`` sums them per rule.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import budget  # noqa: E402
from yardstick import REFERENCE_GFLOPS, at_reference, sgemm_gflops  # noqa: E402


def commit() -> str:
    """Short hash of the checkout's HEAD (``+dirty`` with uncommitted changes), or "unknown"."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def timed(cmd: list[str], **kw) -> dict:
    """Run ``cmd``; wall seconds, the CPU seconds (user + sys) of it and its children, and the
    yardstick before and after (their mean is the rate the time is scaled by)."""
    import resource

    before = sgemm_gflops()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    _, wall = run(cmd, **kw)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = sgemm_gflops()
    rate = (before + after) / 2
    return {
        "wall_s": wall,
        "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
        "gflops_before": before,
        "gflops_after": after,
        "wall_at_reference_s": at_reference(wall, rate),
    }


def timing_line(what: str, t: dict) -> str:
    """One Markdown table row: what, wall, CPU, yardstick, wall at the reference speed."""
    return (
        f"| {what} | {t['wall_s'] / 60:.1f} min | {t['cpu_s']:.0f} s | "
        f"{t['gflops_before']:.0f} / {t['gflops_after']:.0f} GFLOP/s | "
        f"{t['wall_at_reference_s'] / 60:.1f} min |"
    )


TIMING_HEADER = [
    "| what | wall | CPU (user + sys) | yardstick before / after | wall at "
    f"{REFERENCE_GFLOPS:.0f} GFLOP/s |",
    "|---|---|---|---|---|",
]


def hardware() -> str:
    import psutil
    import torch

    cpu, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not cpu:
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    cpu = cpu or platform.processor() or platform.machine()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    mem = psutil.virtual_memory().total / 2**30
    kind = torch.backends.cpu.get_cpu_capability()  # the yardstick's kind (yardstick.py)
    # native bfloat16 matmuls or emulated ones (~5x slower: Gemma-3's extraction runs in bf16)
    bf16 = "native" if flags & {"avx512_bf16", "amx_bf16"} else "emulated" if flags else "?"
    return (
        f"{cpu} ({kind} kernels, bfloat16 {bf16}), {os.cpu_count()} cores, {mem:.0f} GiB, {gpu}; "
        f"torch {torch.__version__}"
    )


def run(cmd: list[str], **kw) -> tuple[str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout, wall


def rule_breakdown(workdir: Path) -> str:
    """Markdown table of the per-job figures each job's log ends with
    (``causalpos.io.joblog.read_job_logs`` on ``workdir/logs``): per rule, jobs, summed and
    longest wall time (of the logged block: the interpreter's start before it is not counted),
    summed CPU time (the whole process), largest peak RSS; most wall time first."""
    from causalpos.io.joblog import read_job_logs

    stats: dict[str, list] = {}
    for job in read_job_logs(workdir / "logs"):
        if job.wall_s is not None:
            stats.setdefault(job.rule, []).append(job)
    if not stats:
        return f"no job logs with a done line under {workdir / 'logs'}\n"

    def num(values, how, fmt="{:,.0f}"):
        values = [v for v in values if v is not None]
        return fmt.format(how(values)) if values else "—"

    lines = [
        "| rule | jobs | total wall s | longest wall s | total CPU s | largest peak RSS MiB |",
        "|---|---|---|---|---|---|",
    ]
    for rule, jobs in sorted(stats.items(), key=lambda kv: -sum(j.wall_s for j in kv[1])):
        walls = [j.wall_s for j in jobs]
        lines.append(
            f"| {rule} | {len(jobs)} | {sum(walls):.0f} | {max(walls):.0f} | "
            f"{num([j.cpu_s for j in jobs], sum)} | {num([j.peak_rss_mib for j in jobs], max)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=5, help="simulation repeats (median)")
    ap.add_argument(
        "--model-dir",
        default=str(REPO / "resources" / "models" / "smollm2-135m"),
        help="prepared SmolLM2 directory (run `snakemake resources/models/smollm2-135m` first)",
    )
    ap.add_argument("--skip-extract", action="store_true")
    ap.add_argument(
        "--pipeline", action="store_true", help="also time the default pipeline (minutes)"
    )
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument(
        "--workdir", help="run the pipeline here and keep its outputs (default: a temporary copy)"
    )
    ap.add_argument(
        "--breakdown",
        metavar="DIR",
        help="only print the per-rule table of a finished run in DIR (from DIR/logs)",
    )
    ap.add_argument("--tests", action="store_true", help="also time the test suite (minutes)")
    ap.add_argument("--out", help="write the Markdown report here too")
    args = ap.parse_args(argv)
    if args.breakdown:
        print(rule_breakdown(Path(args.breakdown)))
        return 0

    parts = [
        f"# causalpos benchmarks — {dt.date.today().isoformat()}",
        "",
        f"Hardware: {hardware()}",
        "",
        f"Commit: {commit()}",
        "",
        f"Yardstick: single-thread sgemm {sgemm_gflops():.1f} GFLOP/s "
        f"(reference {REFERENCE_GFLOPS:.0f})",
        "",
    ]
    timings: list[str] = []
    out, _ = run([sys.executable, str(HERE / "bench_simulate.py"), "--repeats", str(args.repeats)])
    parts += ["## Simulation (one paper-scale setting)", "", "```", out.strip(), "```", ""]
    if not args.skip_extract:
        if not Path(args.model_dir, "config.json").is_file():
            parts += ["## Extraction", "", f"skipped: no prepared model at {args.model_dir}", ""]
        else:
            out, _ = run(
                [sys.executable, str(HERE / "bench_extract.py"), "--model-dir", args.model_dir]
            )
            parts += [
                "## Extraction vs plain forward (SmolLM2-135M)",
                "",
                "```",
                out.strip(),
                "```",
                "",
            ]
    if args.pipeline:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(args.workdir) if args.workdir else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            for name in (
                "Snakefile",
                "config.yaml",
                "configs",
                "workflow",
                "envs",
                "profiles",
                "src",
            ):
                src = REPO / name
                (shutil.copytree if src.is_dir() else shutil.copy2)(src, work / name)
            t = timed([sys.executable, "-m", "snakemake", "--cores", str(args.cores)], cwd=work)
            breakdown = rule_breakdown(work)
            rate = (t["gflops_before"] + t["gflops_after"]) / 2
            table = budget.budget_table(
                work, budget.load_config(work / "config.yaml"), rate, t["cpu_s"]
            )
        timings.append(timing_line(f"`snakemake --cores {args.cores}` (config.yaml)", t))
        parts += ["## Budget per stage", "", table, "## Default pipeline, per rule", "", breakdown]
    if args.tests:
        t = timed([sys.executable, "-m", "pytest", "-q"], cwd=REPO)
        timings.append(timing_line("`pytest` (the test suite)", t))
    if timings:
        parts += ["## Wall times with the yardstick", "", *TIMING_HEADER, *timings, ""]
    report = "\n".join(parts)
    print(report)
    if args.out:
        Path(args.out).write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
