"""The per-stage budget (benchmarks/budget.py): each stage's CPU from its jobs' logs against its
arithmetic, on a run directory built here with known CPU times and model shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import budget as B  # noqa: E402

from causalpos.config import Resolved  # noqa: E402
from causalpos.io.joblog import done_line, parse_done_line, read_job_logs  # noqa: E402
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
    line = done_line(41.23, 40.871, 1.62, "torch loaded", 2310.4)
    assert line == "done in 41.2 s; CPU 40.87 s, start-up 1.62 s, peak RSS 2,310 MiB (torch loaded)"
    assert parse_done_line(line) == {
        "wall_s": 41.2,
        "cpu_s": 40.87,
        "startup_cpu_s": 1.62,
        "peak_rss_mib": 2310.0,
        "torch": "torch loaded",
    }
    assert parse_done_line(done_line(0.04, 0.5, 0.3, "no torch", 61.5))["peak_rss_mib"] == 62.0
    # lines written before the peak RSS, and before the CPU time, were recorded
    older = parse_done_line("done in 12.3 s; CPU 10.12 s, start-up 1.20 s (torch loaded)")
    assert older == {
        "wall_s": 12.3,
        "cpu_s": 10.12,
        "startup_cpu_s": 1.2,
        "peak_rss_mib": None,
        "torch": "torch loaded",
    }
    oldest = parse_done_line("done in 0.1 s (no torch)")
    assert (oldest["wall_s"], oldest["cpu_s"], oldest["peak_rss_mib"]) == (0.1, None, None)
    assert parse_done_line("job failed") is None
    assert parse_done_line("done in 1.0 s; CPU 1.00 s, start-up 0.50 s, peak RSS 5 MB (x)") is None


def test_job_logs_of_a_run_are_read_with_their_rule_and_figures(tmp_path):
    logs = tmp_path / "logs"
    files = {
        "extract_scores/m/d/shard-0001.log": "x\n"
        + done_line(75.25, 80.0, 9.5, "torch loaded", 20480.4),
        "plot_fig1/plot_fig1.log": "done in 0.1 s (no torch)",  # written by older code
        "leakage/m/d.log": "step 1\njob failed",  # failed: no done line
        # a later line that is not a done line does not hide the done line before it
        "simulate/s1.log": done_line(3.0, 2.5, 0.4, "no torch", 120.0) + "\ntrailing",
    }
    for rel, text in files.items():
        (logs / rel).parent.mkdir(parents=True, exist_ok=True)
        (logs / rel).write_text(text + "\n")
    (logs / "notes.txt").write_text(done_line(1.0, 1.0, 1.0, "no torch", 1.0))  # not a log
    jobs = {j.job: j for j in read_job_logs(logs)}
    assert list(jobs) == sorted(rel.removesuffix(".log") for rel in files)
    ext = jobs["extract_scores/m/d/shard-0001"]
    assert (ext.rule, ext.log) == ("extract_scores", logs / "extract_scores/m/d/shard-0001.log")
    assert (ext.wall_s, ext.cpu_s, ext.startup_cpu_s, ext.peak_rss_mib, ext.torch) == (
        75.2, 80.0, 9.5, 20480.0, "torch loaded"
    )  # fmt: skip
    fig = jobs["plot_fig1/plot_fig1"]
    assert (fig.rule, fig.wall_s, fig.cpu_s, fig.peak_rss_mib) == ("plot_fig1", 0.1, None, None)
    failed = jobs["leakage/m/d"]
    assert (failed.rule, failed.wall_s, failed.peak_rss_mib, failed.torch) == (
        "leakage",
        *[None] * 3,
    )
    assert jobs["simulate/s1"].peak_rss_mib == 120.0
    # the per-rule table of run_all.py --breakdown: rules by wall time, sums, largest peak
    import run_all

    table = run_all.rule_breakdown(tmp_path).splitlines()
    assert table[2:] == [
        "| extract_scores | 1 | 75 | 75 | 80 | 20,480 |",
        "| simulate | 1 | 3 | 3 | 2 | 120 |",
        "| plot_fig1 | 1 | 0 | 0 | — | — |",
    ]


#: A job under ``logged`` holding ``{mb}`` MB (10**6 bytes, every page written), started by a
#: parent holding 400 MB: the peak RSS it logs, in MiB, is printed from its log.
PEAK_JOB = """
import subprocess, sys
sys.path.insert(0, {src!r})
from causalpos.io.runlog import logged
from causalpos.io.joblog import parse_done_line
JOB = (
    "import sys; sys.path.insert(0, {src!r}); from causalpos.io.runlog import logged\\n"
    "with logged({log!r}, 1, exit_when_done=True):\\n"
    "    held = b'x' * ({mb} * 10**6)\\n"
)
parent = b"p" * (400 * 10**6)
subprocess.run([sys.executable, "-c", JOB], check=True)  # vfork, as subprocess does
print(parse_done_line(open({log!r}).read().splitlines()[-1])["peak_rss_mib"])
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource accounting")
def test_logged_peak_rss_is_the_jobs_own_peak(tmp_path):
    """The logged peak RSS is the job's: 200 MB held reads 190.7 MiB (2e8 / 2**20) above an
    empty job's, and neither reads the 400 MB of the process that started it."""
    import subprocess

    def peak(mb):
        code = PEAK_JOB.format(src=str(REPO / "src"), log=str(tmp_path / f"{mb}.log"), mb=mb)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return float(out.stdout.split()[-1])

    empty, held = peak(0), peak(200)
    assert 5 < empty < 60, empty  # an interpreter with the job glue imported
    assert held - empty == pytest.approx(200e6 / 2**20, abs=3), (held, empty)


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
