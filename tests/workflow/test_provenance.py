"""Provenance end to end, dry-run against the session's smoke run (tests/conftest.py): a Snakemake
start refuses a store copied in under another model's path, and a results tree shared with a
checkout of another config (its stores, and its tables: a scorecard made with another
leakage.materiality), naming the store or table, what it records and the command that rebuilds
it; `causalpos verify` finds the same."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
import yaml

from tests.wfutil import SMOKE, copy_pipeline, planned_jobs, rule_counts, snakemake

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
    # the four simulations, and the tables computed from them: the simulations' two and the
    # scorecard's job (its table, its Markdown, the findings page)
    assert "causalpos: 9 existing output(s) are not what their paths and this config" in said
    for setting in ("l2_a000", "l2_a020", "rope_a000", "rope_bidir_a000"):
        assert (
            f"results/sim/{setting}.zarr (written by a run with --configfile configs/smoke.yaml): "
            "it was made with other settings than this config's (setting.n_samples: the store "
            "has 512, this config 256)"
        ) in said
    assert (
        "results/stats/simulation_index.csv (written by a run with --configfile "
        "configs/smoke.yaml): it was made with other settings than this config's (inputs: the "
        "table was computed from other versions of results/sim/l2_a000.zarr"
    ) in said
    for table in ("results/sim/theory.csv", "results/report/findings.md"):
        assert f"  {table} (written by a run with --configfile configs/smoke.yaml)" in said
    # what it says to do works: those stores (and what was built from them) are rebuilt
    command = re.search(r"`snakemake (--forcerun .*?) --cores N`", said)[1].split()
    counts = rule_counts(planned_jobs(second, *command))
    assert counts["simulate"] == 4 and counts["aggregate_sim_stats"] == 1, counts
    # the first checkout, whose stores they are, runs on
    assert planned_jobs(smoke_pipeline, "--configfile", SMOKE) == []


def _verify(pipeline, *args: str) -> tuple[int, str]:
    """``causalpos verify ARGS`` run from the pipeline directory: (exit status, report)."""
    import contextlib
    import io

    from causalpos.cli import main

    cwd, out = os.getcwd(), io.StringIO()
    os.chdir(pipeline)
    try:
        with contextlib.redirect_stdout(out):
            code = main(["verify", *args])
    finally:
        os.chdir(cwd)
    return code, out.getvalue()


def test_every_table_of_the_run_records_its_config_and_verify_finds_them_intact(smoke_pipeline):
    results = smoke_pipeline / "results"
    tables = sorted(
        p for p in results.rglob("*") if p.suffix in (".csv", ".md") and p.name != "README.md"
    )
    assert len(tables) >= 30, tables
    for table in tables:
        record = json.loads(table.with_name(table.name + ".provenance.json").read_text())
        rel = table.relative_to(smoke_pipeline).as_posix()
        assert record["path"] == rel and record["kind"] == "table", rel
        assert record["configfiles"] == [SMOKE] and record["config_args"] == [], rel
    code, out = _verify(smoke_pipeline, "results")
    assert code == 0, out
    assert f"{len(tables)} tables with a provenance record: 0 not what their path" in out


def test_a_results_tree_shared_with_another_scorecard_setting_stops_the_run(
    smoke_pipeline, tmp_path
):
    """The issue's first case: a second checkout sharing results/, with only
    leakage.materiality changed, rebuilt the scorecard; the first then said "Nothing to be
    done", `causalpos verify` said OK, and its scorecard carried the other config's verdict."""
    second = copy_pipeline(tmp_path / "second")
    for name in ("results", "resources"):
        (second / name).symlink_to(smoke_pipeline / name)
    cfg = yaml.safe_load((smoke_pipeline / SMOKE).read_text())
    cfg["leakage"].setdefault("materiality", {})["claim3_ntk"] = 0.2
    (second / "configs" / "other.yaml").write_text(yaml.safe_dump(cfg))
    other = ("--configfile", "configs/other.yaml")
    # the second checkout's start refuses the first's scorecard (its stores are its own too)
    proc = snakemake(second, "-n", *other, check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said[-3000:]
    assert "causalpos: 3 existing output(s) are not what their paths and this config" in said
    assert (
        "results/report/scorecard.csv (written by a run with --configfile configs/smoke.yaml): "
        "it was made with other settings than this config's (settings.materiality.claim3_ntk: "
        "the table has 0.1, this config 0.2)"
    ) in said
    command = re.search(r"`snakemake (--forcerun .*?) --cores N`", said)[1].split()
    assert command[:2] == ["--forcerun", "results/report/scorecard.csv"], command
    # what it says to do reruns the scorecard's job alone, which rewrites the shared scorecard
    assert rule_counts(planned_jobs(second, *command)) == {"scorecard": 1}
    snakemake(second, *command, "--cores", "1")
    try:
        # the first checkout, whose Snakemake records say its scorecard is finished
        proc = snakemake(smoke_pipeline, "-n", "--configfile", SMOKE, check=False)
        said = proc.stdout + proc.stderr
        assert proc.returncode != 0, said[-3000:]
        assert (
            "results/report/scorecard.csv (written by a run with --configfile "
            "configs/other.yaml): it was made with other settings than this config's "
            "(settings.materiality.claim3_ntk: the table has 0.2, this config 0.1)"
        ) in said
        assert (
            "snakemake --forcerun results/report/scorecard.csv --configfile configs/smoke.yaml "
            "--cores N"
        ) in said
        # verify against the config this checkout runs (each output's own config, other.yaml,
        # is not in this checkout)
        code, out = _verify(smoke_pipeline, "results", "--configfile", SMOKE)
        assert code == 1, out
        assert (
            "MISMATCHED results/report/scorecard.csv (written by a run with --configfile "
            "configs/other.yaml)"
        ) in out
        assert "settings.materiality.claim3_ntk: the table has 0.2, this config 0.1" in out
    finally:  # the first checkout's scorecard back
        snakemake(smoke_pipeline, "--forcerun", "results/report/scorecard.csv", "--configfile",
                  SMOKE, "--cores", "1")  # fmt: skip
    assert planned_jobs(smoke_pipeline, "--configfile", SMOKE) == []


def test_a_config_override_is_recorded_and_verify_compares_with_it(smoke_pipeline):
    """The issue's second case: stores and tables made with `--config KEY=VALUE` recorded only
    the config file, so `causalpos verify` found them MISMATCHED and its rebuild hint dropped
    the override."""
    override = ("--configfile", SMOKE, "--config", "rehearsal=True")
    assert rule_counts(planned_jobs(smoke_pipeline, *override)) == {"scorecard": 1}
    snakemake(smoke_pipeline, *override, "--cores", "1")
    try:
        scorecard = smoke_pipeline / "results" / "report" / "scorecard.csv"
        record = json.loads(scorecard.with_name("scorecard.csv.provenance.json").read_text())
        assert record["configfiles"] == [SMOKE]
        assert record["config_args"] == ["rehearsal=True"]
        assert record["config_values"] == {"rehearsal": True}
        assert record["params"]["settings"]["rehearsal"] is True
        # compared with the config file and the override it records: what the run asked for
        code, out = _verify(smoke_pipeline, "results")
        assert code == 0, out
        # compared with the config file alone: the scorecard's job is not that config's, and the
        # rebuild command names what it is compared with
        code, out = _verify(smoke_pipeline, "results", "--configfile", SMOKE)
        assert code == 1, out
        assert (
            "MISMATCHED results/report/scorecard.csv (written by a run with --configfile "
            f"{SMOKE} --config rehearsal=True)"
        ) in out
        assert "settings.rehearsal: the table has true, this config false" in out
        # the start of a run without the override leaves the checkout's own table to Snakemake
        assert rule_counts(planned_jobs(smoke_pipeline, "--configfile", SMOKE)) == {"scorecard": 1}
    finally:
        snakemake(smoke_pipeline, "--configfile", SMOKE, "--cores", "1")
    assert planned_jobs(smoke_pipeline, "--configfile", SMOKE) == []
