"""Execution profiles and the papers' config: dry runs on a machine without weights, GPU or conda."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from tests.wfutil import REPO, copy_pipeline, snakemake

pytestmark = pytest.mark.slow

# A stand-in for conda: a dry run under --use-conda only asks conda for its version and settings
# (no environment is created), and conda channels are unreachable on the build machines.
FAKE_CONDA = """#!/bin/sh
case "$*" in
  *--version*) echo "conda 24.11.3" ;;
  *config*) echo '{"get": {"channel_priority": "strict"}}' ;;
  *info*) echo '{"conda_version": "24.11.3", "platform": "linux-64", "envs_dirs": ["/tmp"], "pkgs_dirs": ["/tmp"], "root_prefix": "/tmp", "channels": [], "conda_prefix": "/tmp", "active_prefix": null}' ;;
  *) echo '{}' ;;
esac
"""


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    return copy_pipeline(tmp_path_factory.mktemp("profiles"))


@pytest.fixture()
def fake_conda(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    conda = bindir / "conda"
    conda.write_text(FAKE_CONDA)
    conda.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def _jobs_with_resources(out: str) -> list[tuple[str, str]]:
    """(rule, resources line) of every job in a dry run's output."""
    jobs, rule = [], None
    for line in out.splitlines():
        m = re.match(r"^(?:local)?rule (\w+):", line)
        if m:
            rule = m.group(1)
        elif rule and line.strip().startswith("resources:"):
            jobs.append((rule, line.strip()))
            rule = None
    return jobs


def test_slurm_profile_dry_run_of_the_papers_config(pipeline, fake_conda):
    proc = snakemake(
        pipeline,
        "-n",
        "--workflow-profile",
        "profiles/slurm",
        "--sdm",
        "conda",
        "--configfile",
        "configs/paper.yaml",
    )
    out = proc.stdout + proc.stderr
    jobs = _jobs_with_resources(out)
    extract = [r for rule, r in jobs if rule == "extract_scores"]
    cfg = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    # 1,000 sequences in shards of 250 for each paper-1 model, plus paper 2's runs
    assert len(extract) >= 4 * len(cfg["paper1_llm"]["models"])
    assert all("gpu=1" in r for r in extract), extract[:3]
    # analysis rules never hold a GPU
    assert all(
        "gpu=0" in r for rule, r in jobs if rule in ("simulate", "plot_simulation", "theory_check")
    )
    assert "prepare_model" in out and "llama-3.1-8b" in out


def test_slurm_profile_settings():
    prof = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert prof["executor"] == "slurm" and prof["retries"] >= 1
    # software deployment is chosen on the command line (--sdm conda), never forced here
    assert not {"use-conda", "software-deployment-method", "sdm"} & set(prof)
    # job states that work without an accounting database; SLURM's logs under logs/
    assert prof["slurm-status-command"] == "squeue" and prof["slurm-logdir"] == "logs/slurm"
    # no GPU or thread count forced on a rule: both follow the config and the cluster
    assert "set-threads" not in prof and "set-resources" not in prof
    # extract_scores' mem_mb grows with the attempt, so a retry asks for more
    rules = (REPO / "workflow" / "rules" / "slurm.smk").read_text()
    assert "def extract_mem_mb(wildcards, attempt)" in rules
    assert 'CFG.extract_resources(wildcards.model, wildcards.dataset)["mem_mb"] * attempt' in rules


@pytest.mark.parametrize("device, gpus", [("cpu", 0), ("auto", 1)])
def test_slurm_profile_asks_a_gpu_exactly_where_models_run_on_one(pipeline, device, gpus):
    proc = snakemake(
        pipeline,
        "-n",
        "--workflow-profile",
        "profiles/slurm",
        "--configfile",
        "configs/smoke.yaml",
        "--config",
        f"device={device}",
    )
    jobs = _jobs_with_resources(proc.stdout + proc.stderr)
    # the smoke datasets are two shards each: extract_scores_shard (extract_scores where one)
    model_rules = {"extract_scores_shard", "train_model", "gram_panels", "length_generalization"}
    assert {r for r, _ in jobs} >= model_rules
    for rule, res in jobs:
        assert f"gpu={gpus if rule in model_rules else 0}" in res, (rule, res)


def test_default_profile_dry_run_of_the_papers_config(pipeline):
    # profiles/default is picked up automatically from the working directory
    proc = snakemake(pipeline, "-n", "--configfile", "configs/paper.yaml")
    assert "extract_scores" in proc.stdout + proc.stderr


def test_papers_config_names_the_papers_models_and_data():
    cfg = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    ids = {m["id"] for m in cfg["models"].values() if m["source"] == "hf"}
    assert {"meta-llama/Llama-3.1-8B", "microsoft/phi-4", "Qwen/Qwen3-8B"} <= ids  # paper 1 §6
    assert {
        "meta-llama/Llama-3.2-1B",
        "meta-llama/Llama-3.2-3B",
        "Qwen/Qwen2.5-7B",
        "mistralai/Mistral-7B-v0.1",
    } <= ids  # paper 2 §6
    p1 = cfg["datasets"][cfg["paper1_llm"]["datasets"][0]]
    assert (p1["seq_len"], p1["n_sequences"], p1["mode"]) == (1024, 1000, "first")
    assert (
        cfg["dtype"] == "bfloat16"
        and cfg["device"] == "cuda"
        and cfg["extract"]["batch_size"] == "auto"
    )


def test_light_rules_run_on_the_submitting_host_on_a_cluster(pipeline):
    # what the default keeps on the submitting host: figures and tables only (the SLURM tests
    # check it on a real cluster: none of these becomes a SLURM job)
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    light = set(schema["properties"]["local_rules"]["default"])
    heavy = {
        "extract_scores",
        "extract_scores_shard",
        "train_model",
        "gram_panels",
        "length_generalization",
    }
    store_readers = {"merge_scores", "diagonal_normalize", "aggregate_llm_stats", "leakage"}
    assert light and not light & (heavy | store_readers | {"theory_check", "simulate"})
    assert all(
        r.startswith(("plot_", "aggregate_", "gram_table", "compare_", "score")) for r in light
    )
    # a name that is no rule stops the run, listing the rules
    args = ("-n", "--workflow-profile", "profiles/slurm", "--configfile", "configs/smoke.yaml")
    proc = snakemake(pipeline, *args, "--config", "local_rules=[plot_nothing]", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "local_rules names no rule of this workflow: plot_nothing" in out
    assert "rules: aggregate_leakage, " in out
