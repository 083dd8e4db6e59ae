"""Provenance end to end, dry-run against the session's smoke run (tests/conftest.py): a Snakemake
start refuses a store copied in under another model's path, and a results tree shared with a
checkout of another config, naming the store, what it records and the command that rebuilds it;
`causalpos verify` finds the same."""

from __future__ import annotations

import os
import re
import shutil

import pytest
import yaml
from wfutil import SMOKE, copy_pipeline, planned_jobs, rule_counts, snakemake

pytestmark = pytest.mark.slow


def test_a_score_store_copied_under_another_models_path_stops_the_run(smoke_pipeline, capsys):
    scores = smoke_pipeline / "results" / "scores"
    target = scores / "trained-rope-init" / "kjv-first24" / "causal.zarr"
    backup = smoke_pipeline.parent / "causal-backup.zarr"
    shutil.copytree(target, backup)
    try:
        shutil.rmtree(target)
        shutil.copytree(scores / "tiny-random" / "kjv-first24" / "causal.zarr", target)
        proc = snakemake(smoke_pipeline, "-n", "--configfile", SMOKE, check=False)
        said = proc.stdout + proc.stderr
        assert proc.returncode != 0, said[-3000:]
        assert (
            "results/scores/trained-rope-init/kjv-first24/causal.zarr (written by a run with "
            "--configfile configs/smoke.yaml): it records that it was written as "
            "results/scores/tiny-random/kjv-first24/causal.zarr (model 'tiny-random'"
        ) in said
        assert "--forcerun results/scores/trained-rope-init/kjv-first24 --configfile" in said
        from causalpos.cli import main

        cwd = os.getcwd()
        os.chdir(smoke_pipeline)
        try:
            assert main(["verify", "results"]) == 1
        finally:
            os.chdir(cwd)
        out = capsys.readouterr().out
        assert "MISMATCHED results/scores/trained-rope-init/kjv-first24/causal.zarr" in out
    finally:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(backup, target)  # copy2: the store's old mtimes back
        shutil.rmtree(backup)
    assert planned_jobs(smoke_pipeline, "--configfile", SMOKE) == []


def test_a_results_tree_shared_with_another_config_stops_the_run(smoke_pipeline, tmp_path):
    """A second checkout of another config (simulate.n_samples) whose results/ and resources/
    are the first's: Snakemake there has no record of the stores and said "Nothing to be done",
    so its tables came from the first checkout's settings."""
    second = copy_pipeline(tmp_path / "second")
    for name in ("results", "resources"):
        (second / name).symlink_to(smoke_pipeline / name)
    cfg = yaml.safe_load((smoke_pipeline / SMOKE).read_text())
    cfg["simulate"]["n_samples"] = 256
    (second / "configs" / "other.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(second, "-n", "--configfile", "configs/other.yaml", check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said[-3000:]
    assert "causalpos: 4 existing output(s) are not what their paths and this config" in said
    for setting in ("l2_a000", "l2_a020", "rope_a000", "rope_bidir_a000"):
        assert (
            f"results/sim/{setting}.zarr (written by a run with --configfile configs/smoke.yaml): "
            "it was made with other settings than this config's (setting.n_samples: the store "
            "has 512, this config 256)"
        ) in said
    # what it says to do works: those stores (and what was built from them) are rebuilt
    command = re.search(r"`snakemake (--forcerun .*?) --cores N`", said)[1].split()
    counts = rule_counts(planned_jobs(second, *command))
    assert counts["simulate"] == 4 and counts["aggregate_sim_stats"] == 1, counts
    # the first checkout, whose stores they are, runs on
    assert planned_jobs(smoke_pipeline, "--configfile", SMOKE) == []
