"""The report of ``benchmarks/gpu_rehearsal.sh``: one dated Markdown file for
docs/performance.md from what the script's steps left in its output directory.

    python benchmarks/gpu_report.py OUTDIR [--commit C] [--date D]

Reads, in OUTDIR (every file optional: a step that did not run is reported "not run"):

- ``steps.tsv``: ``step <TAB> start_epoch <TAB> end_epoch <TAB> exit status`` per step;
- ``gpu-memory.csv``: ``nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,
  nounits`` sampled through the run (peak MiB per step, from the samples inside its window);
- ``bench-8b.json``: ``bench_extract_gpu.py --json`` (tokens/s of each mode, ×forward);
- ``logs-8b/<rule>/.../*.log``: the 8B stand-in's job logs (wall time and peak RSS from each
  one's last line: ``causalpos.io.joblog.read_job_logs``);
- ``diff.txt``: ``causalpos diff-results`` of the GPU run's tables against the CPU run's;
- ``env.txt``: versions and the device name.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: The steps of the script, in order, with what each one does (the report's rows).
STEPS = {
    "setup": "wheels from .whl/ installed, imports checked",
    "gpu_tests": "pytest -m gpu tests/test_gpu.py",
    "default_gpu": "config.yaml with device: auto, end to end (snakemake)",
    "default_cpu": "config.yaml with device: cpu, end to end (the reference tables)",
    "diff": "causalpos diff-results CPU vs GPU tables (--rtol/--atol)",
    "prepare_8b": "prepare_model of the Llama-3.1-8B stand-in (bf16) and the data stores",
    "extract_8b": "8B stand-in: paper 1 at 1,024 tokens (batch_size auto), paper 2 at 64 x 256",
    "bench_8b": "bench_extract_gpu.py --preset llama-3.1-8b --seq-len 1024 --batch auto",
}


def read_steps(path: Path) -> dict[str, tuple[float, float, int]]:
    """``step -> (start, end, exit status)`` from ``steps.tsv`` (the last line of a step wins)."""
    out: dict[str, tuple[float, float, int]] = {}
    if not path.is_file():
        return out
    for row in csv.reader(path.read_text().splitlines(), delimiter="\t"):
        if len(row) == 4:
            out[row[0]] = (float(row[1]), float(row[2]), int(row[3]))
    return out


def read_gpu_memory(path: Path) -> list[tuple[float, float]]:
    """``(epoch seconds, MiB used)`` samples of nvidia-smi's CSV (timestamp ``YYYY/MM/DD
    HH:MM:SS.mmm``, local time)."""
    samples = []
    if not path.is_file():
        return samples
    for row in csv.reader(path.read_text().splitlines()):
        if len(row) < 2:
            continue
        try:
            t = dt.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((t, float(row[1])))
        except ValueError:
            continue  # a header or a cut-off last line
    return samples


def peak_between(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Largest MiB sampled in ``[start, end]``; None where no sample falls inside."""
    inside = [m for t, m in samples if start <= t <= end]
    return max(inside) if inside else None


def _fmt(x: float | None, nd: int = 0) -> str:
    return "—" if x is None else f"{x:,.{nd}f}"


def build_report(out: Path, *, commit: str, date: str) -> str:
    """The Markdown report of the run whose files are in ``out``."""
    steps = read_steps(out / "steps.tsv")
    samples = read_gpu_memory(out / "gpu-memory.csv")
    env = (out / "env.txt").read_text().strip() if (out / "env.txt").is_file() else "not recorded"
    lines = [
        f"# GPU rehearsal, {date}",
        "",
        f"commit {commit}; `benchmarks/gpu_rehearsal.sh`",
        "",
        "```",
        env,
        "```",
        "",
        "| step | what | wall s | exit | peak GPU MiB (nvidia-smi) |",
        "|---|---|---|---|---|",
    ]
    for name, what in STEPS.items():
        if name not in steps:
            lines.append(f"| {name} | {what} | not run | — | — |")
            continue
        start, end, rc = steps[name]
        peak = peak_between(samples, start, end)
        lines.append(f"| {name} | {what} | {end - start:.0f} | {rc} | {_fmt(peak)} |")
    total = sum(e - s for s, e, _ in steps.values()) if steps else None
    first = min((s for s, _, _ in steps.values()), default=None)
    last = max((e for _, e, _ in steps.values()), default=None)
    wall = None if first is None else last - first
    lines += [
        "",
        f"Script wall time: {_fmt(wall)} s (steps overlap: their sum is {_fmt(total)} s).",
    ]
    bench = out / "bench-8b.json"
    if bench.is_file():
        modes = json.loads(bench.read_text()).get("modes", {})
        lines += ["", "| mode (8B, 1,024 tokens, batch auto) | tokens/s | × forward | peak MB |"]
        lines += ["|---|---|---|---|"]
        for mode, r in modes.items():
            lines.append(
                f"| {mode} | {_fmt(r.get('tokens_per_s'))} | {_fmt(r.get('x_forward_min'), 2)} "
                f"| {_fmt(r.get('peak_extra_mb'))} |"
            )
    from causalpos.io.joblog import read_job_logs

    jobs = read_job_logs(out / "logs-8b")
    if jobs:
        lines += [
            "",
            "| 8B stand-in job | wildcards | wall s | peak RSS MiB |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {j.rule} | {j.job.partition('/')[2] or j.job} | {_fmt(j.wall_s, 1)} "
            f"| {_fmt(j.peak_rss_mib)} |"
            for j in jobs
        ]
    diff = out / "diff.txt"
    if diff.is_file():
        text = diff.read_text().strip().splitlines()
        lines += ["", "CPU vs GPU tables (`causalpos diff-results`):", "", "```"]
        lines += text[:40] + (["..."] if len(text) > 40 else []) + ["```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--date", default=dt.date.today().isoformat())
    args = p.parse_args(argv)
    report = build_report(args.out, commit=args.commit, date=args.date)
    (args.out / f"gpu-rehearsal-{args.date}.md").write_text(report)
    sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
