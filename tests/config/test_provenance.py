"""Provenance of tables and of a run's ``--config`` overrides (causalpos.config.provenance,
causalpos.io.provenance): every table the config writes (results/stats/*.csv, the theory table,
paper 2's digest, the scorecard and the findings page) records, beside it, its rule's settings,
what it was computed from and its content's sha256; its reader, a Snakemake start and
``causalpos verify`` refuse one made under other settings, naming the table, the differing keys
and the rebuild command. ``--config KEY=VALUE`` overrides are recorded like ``--configfile`` and
compared by ``verify``, which also reports the outputs Snakemake marks incomplete."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from snakemake.utils import validate

from causalpos.cli import main
from causalpos.config import ConfigError, Resolved
from causalpos.io.store import write_dataset

# The environment the workflow gives its jobs, spelled here so that each test fails on code
# without it (causalpos.io.provenance: CHECKOUT_ENV, TABLE_ENV; causalpos.io.runconfig)
CHECKOUT_ENV, TABLE_ENV = "CAUSALPOS_CHECKOUT", "CAUSALPOS_PROVENANCE"
CONFIGFILES_ENV, CONFIG_ENV = "CAUSALPOS_CONFIGFILES", "CAUSALPOS_CONFIG"
#: Where a table's record lives (causalpos.io.integrity.SIDECAR_SUFFIX)
SIDECAR = ".provenance.json"

REPO = Path(__file__).resolve().parents[2]
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
SCORECARD = "results/report/scorecard.csv"
THEORY = "results/sim/theory.csv"


def test_the_names_spelled_here_are_the_librarys():
    from causalpos.io import integrity, provenance, runconfig

    assert (provenance.CHECKOUT_ENV, provenance.TABLE_ENV) == (CHECKOUT_ENV, TABLE_ENV)
    assert (runconfig.CONFIGFILES_ENV, runconfig.CONFIG_ENV) == (CONFIGFILES_ENV, CONFIG_ENV)
    assert integrity.SIDECAR_SUFFIX == SIDECAR


def smoke(edit=None) -> Resolved:
    cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
    if edit is not None:
        edit(cfg)
    validate(cfg, SCHEMA)
    return Resolved(cfg, document_sizes=lambda corpus: None)


def records(edit=None) -> dict:
    from causalpos.config.provenance import expected_records

    return expected_records(smoke(edit))


def _materiality(c):
    c["leakage"].setdefault("materiality", {})["claim3_ntk"] = 0.2


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    """A pipeline directory (its config and schema) as the working directory, run with
    configs/x.yaml (the smoke config) in checkout 'here'."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(CHECKOUT_ENV, "here")
    monkeypatch.setenv(CONFIGFILES_ENV, "configs/x.yaml")
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "x.yaml").write_text((REPO / "configs" / "smoke.yaml").read_text())
    shutil.copytree(REPO / "workflow" / "schemas", tmp_path / "workflow" / "schemas")
    return tmp_path


def _run_with(pipeline: Path, monkeypatch, recs: dict, name: str) -> None:
    """The jobs' environment of a run whose config expects ``recs``."""
    path = pipeline / ".snakemake" / "causalpos" / "provenance" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"configfiles": [], "records": recs}))
    monkeypatch.setenv(TABLE_ENV, str(path))


def _outside(monkeypatch) -> None:
    """``causalpos verify`` runs outside the pipeline: none of the jobs' environment."""
    for name in (TABLE_ENV, CONFIGFILES_ENV, CONFIG_ENV):
        monkeypatch.delenv(name, raising=False)


def _write_table(path: str, text: str = "a,b\n1,2\n") -> None:
    from causalpos.io.provenance import stamp_table

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    stamp_table(path)


# --- what a table records -------------------------------------------------------------------


def test_every_table_records_its_rules_settings_and_what_it_was_computed_from():
    """The issue's first case: a scorecard made with another leakage.materiality was taken as
    this config's. Its record holds the rule's params; a table computed from other stores or
    tables records other inputs."""
    from causalpos.io.provenance import params_differences

    a, b = records(), records(_materiality)
    tables = {p for p, r in a.items() if r["kind"] == "table"}
    assert {THEORY, SCORECARD, "results/report/findings.md", "results/stats/paper2_tables.md",
            "results/stats/llm_index.csv", "results/stats/train_lengthgen.csv",
            } <= tables  # fmt: skip
    assert a[SCORECARD]["params"]["settings"]["materiality"]["claim3_ntk"] == 0.1
    assert b[SCORECARD]["params"]["settings"]["materiality"]["claim3_ntk"] == 0.2
    # only the scorecard's outputs move with materiality (one job: csv, md, findings)
    moved = sorted(p for p in a if a[p]["params_sha256"] != b[p]["params_sha256"])
    assert moved == ["results/report/findings.md", SCORECARD, "results/report/scorecard.md"]
    assert params_differences(b[SCORECARD]["params"], a[SCORECARD]["params"], noun="table") == [
        "settings.materiality.claim3_ntk: the table has 0.2, this config 0.1"
    ]
    # the tables read the stores' and tables' records: more samples move the simulations'
    # tables and the scorecard built from them, not paper 1's LLM table
    c = records(lambda c: c["simulate"].update(n_samples=256))
    moved = {p for p in tables if a[p]["params_sha256"] != c[p]["params_sha256"]}
    assert {THEORY, "results/stats/simulation_index.csv", SCORECARD} <= moved
    assert "results/stats/llm_index.csv" not in moved
    sim = "results/sim/l2_a000.zarr"
    assert a[THEORY]["params"]["inputs"][sim] == a[sim]["params_sha256"]
    said = params_differences(c[THEORY]["params"], a[THEORY]["params"], noun="table")
    assert said == [
        "inputs: the table was computed from other versions of results/sim/l2_a000.zarr, "
        "results/sim/l2_a020.zarr (made with other settings, or not inputs of it under this "
        "config)"
    ]


def test_a_table_records_the_run_and_its_content_and_its_reader_refuses_another(
    pipeline, monkeypatch
):
    from causalpos.io.provenance import check_table

    a, b = records(), records(_materiality)
    _run_with(pipeline, monkeypatch, a, "a")
    _write_table(SCORECARD)
    recorded = json.loads(Path(SCORECARD + SIDECAR).read_text())
    assert recorded["path"] == SCORECARD and recorded["kind"] == "table"
    assert recorded["params_sha256"] == a[SCORECARD]["params_sha256"]
    assert recorded["configfiles"] == ["configs/x.yaml"] and recorded["checkout"] == "here"
    import hashlib

    assert recorded["sha256"] == hashlib.sha256(b"a,b\n1,2\n").hexdigest()
    check_table(SCORECARD)  # what this config expects: read
    # the config that reads it has another materiality
    _run_with(pipeline, monkeypatch, b, "b")
    with pytest.raises(OSError) as info:
        check_table(SCORECARD)
    said = str(info.value)
    assert type(info.value).__name__ == "ProvenanceError"
    assert f"table {SCORECARD} is not what its path and the config say" in said
    assert "settings.materiality.claim3_ntk: the table has 0.1, this config 0.2" in said
    assert f"snakemake --forcerun {SCORECARD} --configfile configs/x.yaml --cores 1" in said
    # replaced after it was written (copied in without its record): refused whatever the config
    _run_with(pipeline, monkeypatch, a, "a")
    Path(SCORECARD).write_text("a,b\n1,3\n")
    with pytest.raises(OSError, match="its content is not the one its provenance record was"):
        check_table(SCORECARD)
    # the scorecard's job reads its tables through the check: refused before it computes
    from causalpos.stages.report import scorecard

    _write_table(THEORY)
    _run_with(pipeline, monkeypatch, records(lambda c: c["theory"].update(n_positions=7)), "c")
    with pytest.raises(OSError, match=r"table results/sim/theory\.csv .*n_positions: the table"):
        scorecard({"theory": THEORY}, SCORECARD, "results/report/scorecard.md")


def test_a_start_refuses_another_checkouts_table_and_a_forcerun_of_its_job_rebuilds_it(
    pipeline, monkeypatch
):
    from causalpos.config.provenance import check_existing_stores, forcing, store_problems

    a, b = records(), records(_materiality)
    _run_with(pipeline, monkeypatch, b, "b")
    monkeypatch.setenv(CHECKOUT_ENV, "there")
    monkeypatch.setenv(CONFIGFILES_ENV, "configs/other.yaml")
    for path in (SCORECARD, "results/report/scorecard.md"):
        _write_table(path)
    found = store_problems(a, checkout="here")
    assert list(found) == [SCORECARD, "results/report/scorecard.md"]
    assert (
        "settings.materiality.claim3_ntk: the table has 0.2, this config 0.1"
        in (found[SCORECARD][0][0])
    )
    with pytest.raises(ConfigError) as info:
        check_existing_stores(
            smoke(), checkout="here", run_configfiles=["configs/x.yaml"], records=a
        )
    said = str(info.value)
    assert f"{SCORECARD} (written by a run with --configfile configs/other.yaml)" in said
    # one job writes both: the fix names it once
    assert f"snakemake --forcerun {SCORECARD} --configfile configs/x.yaml --cores N" in said
    # a --forcerun of any output of the job, or of its rule, rebuilds them all: not refused
    for argv in (["-R", "results/report/findings.md"], ["--forcerun", "scorecard"]):
        assert store_problems(a, checkout="here", forced=forcing(argv)[0]) == {}
    # nor are outputs Snakemake marks incomplete (a job killed between a table and its record:
    # Snakemake reruns the job)
    assert store_problems(a, checkout="here", incomplete=[SCORECARD]) == {}
    # one this checkout made is Snakemake's to rerun (its params changed), unless edited since
    monkeypatch.setenv(CHECKOUT_ENV, "here")
    for path in (SCORECARD, "results/report/scorecard.md"):
        _write_table(path)
    assert store_problems(a, checkout="here") == {}
    Path(SCORECARD).write_text("edited\n")
    assert "its content is not the one" in store_problems(a, checkout="here")[SCORECARD][0][0]


def test_verify_compares_each_table_with_its_config_and_its_content(pipeline, monkeypatch, capsys):
    _run_with(pipeline, monkeypatch, records(), "a")
    _write_table(SCORECARD)
    Path("results/README.md").write_text("not a table\n")  # no record: not one of the tables
    _outside(monkeypatch)
    assert main(["verify", "results"]) == 0
    out = capsys.readouterr().out
    assert "1 tables with a provenance record: 0 not what their path, content and config" in out
    # the config file edited since: the table's settings are not its config's
    text = (pipeline / "configs" / "x.yaml").read_text()
    (pipeline / "configs" / "x.yaml").write_text(
        text.replace("\nleakage:\n", "\nleakage:\n  materiality: {claim3_ntk: 0.2}\n", 1)
    )
    assert main(["verify", "results"]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCHED {SCORECARD} (written by a run with --configfile configs/x.yaml)" in out
    assert "settings.materiality.claim3_ntk: the table has 0.1, this config 0.2" in out
    assert f"rebuild: snakemake --force {SCORECARD} --configfile configs/x.yaml --cores 1" in out
    # and a table replaced after it was written
    (pipeline / "configs" / "x.yaml").write_text(text)
    Path(SCORECARD).write_text("a,b\n9,9\n")
    assert main(["verify", "results"]) == 1
    assert "its content is not the one its provenance record" in capsys.readouterr().out


def test_diff_results_compares_the_tables_not_their_records(tmp_path):
    from causalpos.io.compare_trees import compare_trees

    for tree, record in (("a", {"checkout": "one"}), ("b", {"checkout": "two"})):
        table = tmp_path / tree / "stats" / "t.csv"
        table.parent.mkdir(parents=True)
        table.write_text("x\n1\n")
        Path(f"{table}{SIDECAR}").write_text(json.dumps(record))
    diff = compare_trees(tmp_path / "a", tmp_path / "b")
    assert diff.identical and diff.compared == 1, diff.report()


# --- --config overrides ---------------------------------------------------------------------


def _store(value: float = 1.0) -> xr.Dataset:
    return xr.Dataset({"x": ("i", np.full(4, value))}, attrs={"n_samples": 4})


def test_a_store_records_the_runs_config_overrides_and_verify_compares_with_them(
    pipeline, monkeypatch, capsys
):
    """The issue's second case: a store made with --config was MISMATCHED by verify, and its
    rebuild hint dropped the override."""
    sim = "results/sim/l2_a000.zarr"
    overridden = records(lambda c: c.update(seed=3))
    _run_with(pipeline, monkeypatch, overridden, "seed3")
    monkeypatch.setenv(CONFIG_ENV, json.dumps({"args": ["seed=3"], "values": {"seed": 3}}))
    write_dataset(_store(), sim)
    _outside(monkeypatch)
    assert main(["verify", "results"]) == 0, capsys.readouterr().out
    assert "OK" in capsys.readouterr().out
    # the config file edited since: compared with the file and the recorded override
    text = (pipeline / "configs" / "x.yaml").read_text()
    (pipeline / "configs" / "x.yaml").write_text(text.replace("n_samples: 512", "n_samples: 64"))
    assert main(["verify", "results"]) == 1
    out = capsys.readouterr().out
    assert (
        f"MISMATCHED {sim} (written by a run with --configfile configs/x.yaml --config seed=3)"
        in out
    )
    assert "setting.n_samples: the store has 512, this config 64" in out
    assert "seed: the store" not in out  # the override is the config's too
    assert f"rebuild: snakemake --force {sim} --configfile configs/x.yaml --config seed=3" in out
    # named on verify's command line: that config, with or without the override
    (pipeline / "configs" / "x.yaml").write_text(text)
    args = ["verify", "results", "--configfile", "configs/x.yaml"]
    assert main([*args, "--config", "seed=3"]) == 0
    capsys.readouterr()
    assert main(args) == 1
    assert "seed: the store has 3, this config 0" in capsys.readouterr().out


def test_a_refusal_names_the_runs_config_overrides(pipeline, monkeypatch):
    from causalpos.config.provenance import check_existing_stores

    sim = "results/sim/l2_a000.zarr"
    _run_with(pipeline, monkeypatch, records(), "a")
    monkeypatch.setenv(CHECKOUT_ENV, "there")
    write_dataset(_store(), sim)
    with pytest.raises(ConfigError) as info:
        check_existing_stores(
            smoke(lambda c: c.update(seed=3)),
            checkout="here",
            run_configfiles=["configs/x.yaml"],
            run_config_args=["seed=3"],
        )
    said = str(info.value)
    assert "this config (--configfile configs/x.yaml --config seed=3)" in said
    assert "seed: the store has 0, this config 3" in said
    assert (
        f"--forcerun {sim}" in said
        and "--configfile configs/x.yaml --config seed=3 --cores N" in said
    )


# --- outputs Snakemake marks incomplete -----------------------------------------------------


def _snakemake_marker(pipeline: Path, output: str) -> Path:
    """The incomplete marker Snakemake's file persistence writes for ``output`` (its own path
    encoding: snakemake.persistence.file.FilePersistence._record_path)."""
    from snakemake.persistence.file import FilePersistence

    subject = pipeline / ".snakemake" / "incomplete"
    subject.mkdir(parents=True, exist_ok=True)
    me = types.SimpleNamespace(_fetch_max_len=lambda s: 255)
    path = Path(FilePersistence._record_path(me, str(subject), output))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"external_jobid": None}))
    return path


def test_verify_reports_the_outputs_snakemake_marks_incomplete(pipeline, monkeypatch, capsys):
    """The issue's third case: after a kill, verify said OK while Snakemake's markers remained."""
    sim = "results/sim/l2_a000.zarr"
    _run_with(pipeline, monkeypatch, records(), "a")
    write_dataset(_store(), sim)
    _outside(monkeypatch)
    assert main(["verify", "results"]) == 0
    capsys.readouterr()
    _snakemake_marker(pipeline, sim)
    _snakemake_marker(pipeline, "results/sim/gone.zarr")  # no such output: Snakemake ignores it
    assert main(["verify", "results"]) == 1
    out = capsys.readouterr().out
    assert f"INCOMPLETE {sim}\n" in out and "gone.zarr" not in out
    assert "1 outputs Snakemake marks incomplete" in out
    assert (
        f"rerun it: snakemake --rerun-incomplete {sim} --configfile configs/x.yaml --cores 1"
    ) in out
    assert out.rstrip().endswith("PROBLEMS FOUND")
    # Snakemake's names longer than a file name may be are split into '@' directories
    from causalpos.io.atomic import incomplete_outputs

    long = "results/stats/" + "x" * 300 + ".csv"
    assert _snakemake_marker(pipeline, long).parent.name.startswith("@")
    assert incomplete_outputs(pipeline) == sorted([sim, "results/sim/gone.zarr", long])
    # from elsewhere, the tree's pipeline directory (the one above it) is read
    other = pipeline.parent / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert main(["verify", str(pipeline / "results")]) == 1
    assert f"INCOMPLETE {pipeline / sim}" in capsys.readouterr().out
