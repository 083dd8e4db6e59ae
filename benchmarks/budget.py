"""The per-stage budget of a finished pipeline run: each heavy stage's CPU time against its
arithmetic, and the goals of docs/performance.md.

For each stage, the CPU seconds its jobs spent (each job's log ends with its process's CPU time,
start-up included: ``causalpos.io.joblog.done_line``), scaled to the reference speed by the
yardstick, against the stage's arithmetic: the matmul FLOPs of the work it does
(``causalpos.models.footprint``: forward passes, training steps; the simulations' products) over
the reference single-thread sgemm rate. The ratio is what the stage spends beyond the
arithmetic: Python, small-op and memory overhead, and the float64 work the arithmetic leaves out
(paper 2's reducers).

    python benchmarks/budget.py RUN_DIR --yardstick 110 [--total-cpu 1234] [--config config.yaml]

``RUN_DIR`` is a finished run's working directory (``logs/``, ``resources/models/`` and its
config); ``--total-cpu`` is the whole run's CPU time (user + sys of Snakemake and its jobs, from
``/usr/bin/time`` or ``run_all.py --pipeline``), without which the whole-run row reads "not
measured". ``run_all.py --pipeline`` prints this table after its timed run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "src"))

from yardstick import REFERENCE_GFLOPS  # noqa: E402

#: The goals (docs/performance.md, "Budget per stage"): a ratio to the arithmetic, or CPU-s at
#: the reference speed.
TRAIN_RATIO_GOAL = 1.6
EXTRACT_RATIO_GOAL = 2.0
LEAKAGE_CPU_GOAL_S = 100.0
STARTUP_CPU_GOAL_S = 0.5
RUN_CPU_GOAL_S = 1800.0

#: Rules whose work is arithmetic counted here; every other rule is a light job, judged by its
#: start-up, or a model job.
HEAVY = ("train_model", "extract_scores", "simulate", "leakage")

#: Rules that load a model (torch and transformers are their work's own imports, so the light
#: jobs' start-up goal does not apply; their CPU is reported on a row of its own).
MODEL_RULES = ("prepare_model", "init_twin", "gram_panels", "length_generalization")


def read_jobs(run_dir: Path) -> list:
    """Every job of ``run_dir/logs`` with its CPU time (the last ``done in`` line of its log:
    ``causalpos.io.joblog.read_job_logs``).

    Raises ValueError naming a log without one (a failed job, or a log written before the CPU
    was recorded): a budget from part of the jobs would read low."""
    from causalpos.io.joblog import read_job_logs

    jobs = read_job_logs(run_dir / "logs")
    missing = [str(j.log.relative_to(run_dir)) for j in jobs if j.cpu_s is None]
    if missing:
        raise ValueError(
            f"{len(missing)} job log(s) without a CPU time (failed, or written by older code): "
            + ", ".join(missing[:5])
        )
    if not jobs:
        raise ValueError(f"no job logs under {run_dir / 'logs'}")
    return jobs


def load_config(path: Path) -> dict:
    """The run's config with the schema's defaults filled in (as Snakemake sees it)."""
    import yaml
    from snakemake.utils import validate

    cfg = yaml.safe_load(path.read_text())
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return cfg


def _shape(run_dir: Path, model: str):
    from causalpos.models import footprint as F

    cfg = run_dir / "resources" / "models" / model / "config.json"
    return F.shape_of(json.loads(cfg.read_text()))


def training_flops(run_dir: Path, cfg: dict) -> float:
    """Matmul FLOPs of training every variant: its steps (forward, loss at every position,
    backward) and its held-out evaluations (at step 0, every ``eval_every`` steps and at the
    end: forward passes of ``n_eval`` windows)."""
    from causalpos.config import Resolved
    from causalpos.models import footprint as F

    res = Resolved(cfg)
    total = 0.0
    for variant in res.train_variants():
        s = res.train_variant(variant)
        shape = _shape(run_dir, f"trained-{variant}")
        steps, ctx = int(s["steps"]), int(s["context"])
        evals = 1 + math.ceil(steps / int(s["eval_every"]))
        total += steps * F.train_step_flops(shape, ctx, int(s["batch"]))
        total += evals * int(s["n_eval"]) * F.forward_flops(shape, ctx, logits_positions=ctx)
    return total


def extraction_flops(run_dir: Path, cfg: dict) -> dict[str, float]:
    """Matmul FLOPs of every extraction job's forward passes (one per variant and sequence),
    per model: {model: FLOPs}."""
    from causalpos.config import Resolved
    from causalpos.models import footprint as F

    res = Resolved(cfg)
    out: dict[str, float] = {}
    for log in sorted((run_dir / "logs" / "extract_scores").rglob("*.log")):
        model, dataset = log.relative_to(run_dir / "logs" / "extract_scores").parts[:2]
        start, stop = res.shard_bounds(dataset, log.stem.removeprefix("shard-"))
        n_variants = len(dict(res.extraction_params(model, dataset)))
        seq_len = int(cfg["datasets"][dataset]["seq_len"])
        flops = n_variants * (stop - start) * F.forward_flops(_shape(run_dir, model), seq_len)
        out[model] = out.get(model, 0.0) + flops
    return out


def simulation_flops(cfg: dict) -> float:
    """Matmul FLOPs of the parameter-free simulations: per sequence, the score product QKᵀ of
    every layer and the PV product of every layer but the last, 2·T²·d each."""
    sim = cfg["simulate"]
    T, d, L = int(sim["seq_len"]), int(sim["dim"]), int(sim["n_layers"])
    per_seq = (2 * L - 1) * 2 * T * T * d
    return len(sim["settings"]) * int(sim["n_samples"]) * per_seq


def _ref(cpu_s: float, yardstick: float) -> float:
    """CPU seconds measured at ``yardstick`` GFLOP/s as seconds at the reference speed."""
    return cpu_s * yardstick / REFERENCE_GFLOPS


def _verdict(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "**not met**")


def budget_rows(
    run_dir: Path, cfg: dict, yardstick: float, total_cpu_s: float | None = None
) -> list[dict]:
    """One dict per budget line: stage, jobs, CPU-s at the reference speed, arithmetic CPU-s at
    the reference speed (FLOPs / reference sgemm rate; None where the stage has no arithmetic
    goal), ratio, goal and whether it is met."""
    jobs = read_jobs(run_dir)
    by_rule: dict[str, list] = {}
    for job in jobs:
        by_rule.setdefault(job.rule, []).append(job)

    def cpu(rule: str) -> float:
        return _ref(sum(j.cpu_s for j in by_rule.get(rule, [])), yardstick)

    rows = []
    arithmetic = {
        "train_model": training_flops(run_dir, cfg) if "train_model" in by_rule else 0.0,
        "extract_scores": sum(extraction_flops(run_dir, cfg).values()),
        "simulate": simulation_flops(cfg) if "simulate" in by_rule else 0.0,
    }
    goals = {"train_model": TRAIN_RATIO_GOAL, "extract_scores": EXTRACT_RATIO_GOAL}
    for rule in ("train_model", "extract_scores", "simulate"):
        if rule not in by_rule:
            continue
        spent, arith = cpu(rule), arithmetic[rule] / (REFERENCE_GFLOPS * 1e9)
        ratio = spent / arith if arith else float("nan")
        goal = goals.get(rule)
        rows.append(
            {
                "stage": rule,
                "jobs": len(by_rule[rule]),
                "cpu_ref_s": spent,
                "arith_ref_s": arith,
                "ratio": ratio,
                "goal": f"≤ {goal:g}× arithmetic" if goal else "—",
                "met": None if goal is None else ratio <= goal,
            }
        )
    if "leakage" in by_rule:
        spent = cpu("leakage")
        rows.append(
            {
                "stage": "leakage",
                "jobs": len(by_rule["leakage"]),
                "cpu_ref_s": spent,
                "arith_ref_s": None,
                "ratio": None,
                "goal": f"≤ {LEAKAGE_CPU_GOAL_S:g} CPU-s",
                "met": spent <= LEAKAGE_CPU_GOAL_S,
            }
        )
    models = [j for j in jobs if j.rule in MODEL_RULES]
    if models:
        rows.append(
            {
                "stage": f"model jobs ({', '.join(sorted({j.rule for j in models}))})",
                "jobs": len(models),
                "cpu_ref_s": _ref(sum(j.cpu_s for j in models), yardstick),
                "arith_ref_s": None,
                "ratio": None,
                "goal": "—",
                "met": None,
            }
        )
    light = [j for j in jobs if j.rule not in HEAVY and j.rule not in MODEL_RULES]
    if light:
        worst = max(light, key=lambda j: j.startup_cpu_s)
        worst_ref = _ref(worst.startup_cpu_s, yardstick)
        rows.append(
            {
                "stage": f"light jobs ({len({j.rule for j in light})} rules)",
                "jobs": len(light),
                "cpu_ref_s": _ref(sum(j.cpu_s for j in light), yardstick),
                "arith_ref_s": None,
                "ratio": None,
                "goal": f"≤ {STARTUP_CPU_GOAL_S:g} CPU-s start-up a job",
                "met": worst_ref <= STARTUP_CPU_GOAL_S,
                "note": (
                    f"start-up mean {_ref(sum(j.startup_cpu_s for j in light), yardstick) / len(light):.2f} s, "
                    f"largest {worst_ref:.2f} s ({worst.rule})"
                ),
            }
        )
    jobs_ref = _ref(sum(j.cpu_s for j in jobs), yardstick)
    if total_cpu_s is not None:
        total_ref = _ref(total_cpu_s, yardstick)
        rows.append(
            {
                "stage": "Snakemake (scheduling, job start before Python)",
                "jobs": None,
                "cpu_ref_s": total_ref - jobs_ref,
                "arith_ref_s": None,
                "ratio": None,
                "goal": "—",
                "met": None,
            }
        )
    rows.append(
        {
            "stage": "whole run",
            "jobs": len(jobs),
            "cpu_ref_s": None if total_cpu_s is None else _ref(total_cpu_s, yardstick),
            "arith_ref_s": (sum(arithmetic.values()) / (REFERENCE_GFLOPS * 1e9)),
            "ratio": None,
            "goal": f"≤ {RUN_CPU_GOAL_S:,.0f} CPU-s (15 min on 2 cores)",
            "met": None if total_cpu_s is None else _ref(total_cpu_s, yardstick) <= RUN_CPU_GOAL_S,
        }
    )
    return rows


def budget_table(
    run_dir: Path, cfg: dict, yardstick: float, total_cpu_s: float | None = None
) -> str:
    """:func:`budget_rows` as a Markdown table."""
    lines = [
        f"CPU-s at the reference speed ({REFERENCE_GFLOPS:.0f} GFLOP/s; measured at "
        f"{yardstick:.1f}); arithmetic: matmul FLOPs / {REFERENCE_GFLOPS:.0f} GFLOP/s.",
        "",
        "| stage | jobs | CPU-s | arithmetic CPU-s | ratio | goal | |",
        "|---|---|---|---|---|---|---|",
    ]

    def num(x, fmt="{:,.0f}"):
        return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)

    for r in budget_rows(run_dir, cfg, yardstick, total_cpu_s):
        note = f" ({r['note']})" if r.get("note") else ""
        lines.append(
            f"| {r['stage']} | {num(r['jobs'], '{}')} | {num(r['cpu_ref_s'])} | "
            f"{num(r['arith_ref_s'])} | {num(r['ratio'], '{:.2f}×')} | {r['goal']}{note} | "
            f"{_verdict(r['met'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("run_dir", type=Path, help="a finished run's working directory")
    ap.add_argument(
        "--yardstick", type=float, required=True, help="sgemm GFLOP/s when the run was measured"
    )
    ap.add_argument("--total-cpu", type=float, help="the whole run's CPU seconds (user + sys)")
    ap.add_argument("--config", type=Path, help="the run's config (default RUN_DIR/config.yaml)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config or args.run_dir / "config.yaml")
        print(budget_table(args.run_dir, cfg, args.yardstick, args.total_cpu))
    except (OSError, ValueError) as exc:
        print(f"budget: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
