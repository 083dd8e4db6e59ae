"""The per-stage budget (benchmarks/budget.py): each stage's CPU from its jobs' logs against its
arithmetic, on a run directory built here with known CPU times and model shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import budget as B  # noqa: E402

from causalpos.config import Resolved  # noqa: E402
from causalpos.io.runlog import done_line, parse_done_line  # noqa: E402
from causalpos.models import footprint as F  # noqa: E402

TINY = {
    "model_type": "llama",
    "vocab_size": 300,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def test_done_line_round_trips_and_reads_older_logs():
    line = done_line(12.34, 10.125, 1.2, "torch loaded")
    assert parse_done_line(line) == {
        "wall_s": 12.3,
        "cpu_s": 10.12,
        "startup_cpu_s": 1.2,
        "torch": "torch loaded",
    }
    assert parse_done_line("done in 0.1 s (no torch)")["cpu_s"] is None
    assert parse_done_line("job failed") is None


def _log(run: Path, rel: str, cpu: float, startup: float) -> None:
    path = run / "logs" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"some output\n{done_line(cpu, cpu, startup, 'no torch')}\n")


@pytest.fixture
def run(tmp_path):
    """The default config's models as the tiny shape; one job of each kind, CPU times chosen."""
    cfg = B.load_config(REPO / "config.yaml")
    for model in [*cfg["models"], *(f"trained-{v}" for v in cfg["train"]["variants"])]:
        d = tmp_path / "resources" / "models" / model
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(TINY))
    _log(tmp_path, "extract_scores/smollm2-135m/kjv-chunks128-bos/shard-0000.log", 30.0, 2.0)
    _log(tmp_path, "train_model/rope.log", 40.0, 2.0)
    _log(tmp_path, "leakage/smollm2-135m/kjv-chunks128-bos.log", 60.0, 2.0)
    _log(tmp_path, "merge_scores/a.log", 1.0, 0.3)
    _log(tmp_path, "plot_fig1.log", 2.0, 0.7)
    _log(tmp_path, "gram_panels/trained-rope.log", 3.0, 1.2)
    return tmp_path, cfg


def test_budget_sets_each_stage_against_its_closed_form_arithmetic(run):
    run_dir, cfg = run
    res = Resolved(cfg)
    shape = F.shape_of(TINY)
    # the one extraction job: every variant of (smollm2-135m, kjv-chunks128-bos) over 32 prompts
    n_var = len(dict(res.extraction_params("smollm2-135m", "kjv-chunks128-bos")))
    flops = n_var * 32 * F.forward_flops(shape, 128)
    assert B.extraction_flops(run_dir, cfg) == {"smollm2-135m": flops}
    # training: 4 variants x (500 steps + 11 evaluations of 64 windows)
    step = F.train_step_flops(shape, 128, 16)
    evals = 11 * 64 * F.forward_flops(shape, 128, logits_positions=128)
    assert B.training_flops(run_dir, cfg) == 4 * (500 * step + evals)
    # measured at twice the reference speed: every CPU time counts double at the reference
    rows = {r["stage"]: r for r in B.budget_rows(run_dir, cfg, 2 * 95.0, total_cpu_s=200.0)}
    ext = rows["extract_scores"]
    assert ext["cpu_ref_s"] == pytest.approx(60.0)
    assert ext["arith_ref_s"] == pytest.approx(flops / 95e9)
    assert ext["ratio"] == pytest.approx(60.0 / (flops / 95e9))
    assert ext["met"] == (ext["ratio"] <= 2.0)
    assert rows["leakage"]["cpu_ref_s"] == pytest.approx(120.0) and rows["leakage"]["met"] is False
    light = rows["light jobs (2 rules)"]
    assert light["jobs"] == 2 and light["cpu_ref_s"] == pytest.approx(6.0)
    assert light["met"] is False and "largest 1.40 s (plot_fig1)" in light["note"]
    # a model job's start-up (torch, its work's own import) is outside the light jobs' goal
    model = rows["model jobs (gram_panels)"]
    assert model["jobs"] == 1 and model["cpu_ref_s"] == pytest.approx(6.0) and model["met"] is None
    snake = rows["Snakemake (scheduling, job start before Python)"]
    assert snake["cpu_ref_s"] == pytest.approx(400.0 - 2 * (30 + 40 + 60 + 1 + 2 + 3))
    assert rows["whole run"]["cpu_ref_s"] == pytest.approx(400.0)
    assert rows["whole run"]["met"] is True
    table = B.budget_table(run_dir, cfg, 2 * 95.0, 200.0)
    assert "| leakage | 1 | 120 | — | — | ≤ 100 CPU-s | **not met** |" in table


def test_simulation_arithmetic_is_the_products_of_every_layer():
    cfg = B.load_config(REPO / "config.yaml")
    # 12 settings x 100,000 sequences x (4 QK^T + 3 PV) x 2 T^2 d, T = 50, d = 64
    assert B.simulation_flops(cfg) == 12 * 100_000 * 7 * 2 * 50 * 50 * 64


def test_a_job_without_its_cpu_time_stops_the_budget(run):
    run_dir, cfg = run
    (run_dir / "logs" / "plot_fig1.log").write_text("done in 0.1 s (no torch)\n")
    with pytest.raises(ValueError, match="plot_fig1.log"):
        B.read_jobs(run_dir)
    assert B.main([str(run_dir), "--yardstick", "95"]) == 2
