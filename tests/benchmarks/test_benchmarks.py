"""The paper-scale GPU benchmark (benchmarks/bench_extract_gpu.py): its stand-ins have the papers'
models' sizes, and it runs end to end (on CPU here, with the tiny preset)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_extract_gpu as B  # noqa: E402

#: Published parameter counts (model cards / safetensors totals), in billions.
PUBLISHED_BILLIONS = {
    "llama-3.2-1b": 1.24,  # tied embeddings
    "llama-3.2-3b": 3.21,  # tied embeddings
    "llama-3.1-8b": 8.03,
    "mistral-7b": 7.24,
    "qwen2.5-7b": 7.62,
    "qwen3-8b": 8.19,
    "phi-4": 14.66,
}


def test_every_architecture_file_has_a_published_count():
    assert set(B.PRESETS) - {"tiny"} == set(PUBLISHED_BILLIONS)


@pytest.mark.parametrize("preset, billions", sorted(PUBLISHED_BILLIONS.items()))
def test_presets_have_the_paper_models_sizes(preset, billions):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(B.preset_config(preset))
    n = sum(p.numel() for p in model.parameters()) / 1e9
    assert n == pytest.approx(billions, abs=0.01)


def test_benchmark_runs_every_mode_and_reports_them(tmp_path):
    out = B.main(
        ["--preset", "tiny", "--device", "cpu", "--dtype", "float32", "--seq-len", "32"]
        + ["--batch", "2", "--n-batches", "2", "--json", str(tmp_path / "r.json")]
    )
    assert list(out["modes"]) == list(B.MODES) and (tmp_path / "r.json").exists()
    assert out["modes"]["forward"]["x_forward_min"] == 1.0
    assert all(r["tokens_per_s"] > 0 for r in out["modes"].values())


def test_startup_benchmark_reports_what_a_jobs_start_up_loads(tmp_path):
    import bench_startup as S

    repo = Path(__file__).resolve().parents[2]
    row = S.measure(repo, repo / "workflow" / "scripts" / "plot_fig1.py", repeats=1)
    assert row["rule"] == "plot_fig1" and row["libraries"] == ["matplotlib"]  # closed forms only
    # the store reader (xarray, pandas) comes on top of the start-up, in the same process
    assert 0 < row["startup_cpu_s"] < row["with_reader_cpu_s"]
    assert S.stage_of(repo / "workflow" / "scripts" / "scorecard.py") == (
        "causalpos.stages.report",
        "scorecard",
    )
    # each job's start-up as its script runs it: the collector held off before the stage's
    # imports, where the script says so (an older checkout's scripts do not)
    assert S.collector_of(repo / "workflow" / "scripts" / "scorecard.py").endswith(
        "\ncollector_off_until_logged()"
    )
    older = repo / "workflow" / "scripts" / "plot_fig1.py"
    text = older.read_text().replace("\ncollector_off_until_logged()", "\n")
    (tmp_path / "plot_fig1.py").write_text(text)
    assert S.collector_of(tmp_path / "plot_fig1.py") == ""


def test_yardstick_scales_wall_time_to_the_reference_speed():
    import yardstick as Y

    # half the reference rate: the same work takes half as long on the reference machine
    assert Y.at_reference(600.0, Y.REFERENCE_GFLOPS / 2) == pytest.approx(300.0)
    assert Y.at_reference(600.0, Y.REFERENCE_GFLOPS) == pytest.approx(600.0)
    with pytest.raises(ValueError, match="positive"):
        Y.at_reference(1.0, 0.0)
    rate = Y.sgemm_gflops(n=128, repeats=3)
    assert 0.01 < rate < 10_000  # GFLOP/s of one core: finite and physical
    before = torch.get_num_threads()
    Y.sgemm_gflops(n=64, repeats=1, threads=1)
    assert torch.get_num_threads() == before
    # the machine's kind beside its rate: the kernels torch dispatches to here
    out = Y.main(["--n", "64", "--repeats", "1", "--json"])
    assert out["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert out["sgemm_gflops"] > 0 and out["reference_gflops"] == Y.REFERENCE_GFLOPS
    # the bfloat16 rate beside it (native or emulated bf16 tells the kinds apart)
    assert 0.01 < out["bf16_gflops"] < 10_000
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        Y.sgemm_gflops(n=8, repeats=1, dtype="float16")


def test_run_all_reports_timings_with_the_yardstick(monkeypatch):
    import run_all as R

    monkeypatch.setattr(R, "sgemm_gflops", lambda: R.REFERENCE_GFLOPS / 2)
    t = R.timed([sys.executable, "-c", "pass"])
    assert t["gflops_before"] == t["gflops_after"] == R.REFERENCE_GFLOPS / 2
    assert t["wall_at_reference_s"] == pytest.approx(t["wall_s"] / 2)
    row = R.timing_line("x", {**t, "wall_s": 600.0, "wall_at_reference_s": 300.0})
    assert "| 10.0 min |" in row and "| 5.0 min |" in row
