"""Provenance (causalpos.io.provenance, causalpos.config.provenance): a store is what its path and
the config say. Every store records the settings that made it, its path's fields, the config
file and the checkout of the run that wrote it; a reader, a Snakemake start and ``causalpos
verify`` compare that record with the store's path and the running config, and refuse naming
both."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from snakemake.utils import validate

from causalpos.cli import main
from causalpos.config import ConfigError, Resolved
from causalpos.io.integrity import CONFIGFILES_ENV, root_attributes
from causalpos.io.store import open_dataset, write_dataset

# The environment the workflow gives its jobs (causalpos.io.provenance: CHECKOUT_ENV, TABLE_ENV;
# spelled here so that each test runs, and fails, on code without provenance records)
CHECKOUT_ENV, TABLE_ENV = "CAUSALPOS_CHECKOUT", "CAUSALPOS_PROVENANCE"
#: The root attribute holding a store's record (causalpos.io.integrity.PROVENANCE_ATTR)
PROVENANCE_ATTR = "causalpos_provenance"


def test_the_names_spelled_here_are_the_librarys():
    from causalpos.io import provenance

    assert (provenance.CHECKOUT_ENV, provenance.TABLE_ENV) == (CHECKOUT_ENV, TABLE_ENV)
    assert provenance.PROVENANCE_ATTR == PROVENANCE_ATTR


REPO = Path(__file__).resolve().parents[2]
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def smoke_config(edit=None) -> dict:
    cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
    if edit is not None:
        edit(cfg)
    validate(cfg, SCHEMA)
    return cfg


def _ds(value: float = 1.0) -> xr.Dataset:
    return xr.Dataset({"x": ("i", np.full(4, value))}, attrs={"n_samples": 4})


def _table(tmp_path: Path, records: dict, name: str) -> Path:
    path = tmp_path / ".snakemake" / "causalpos" / "provenance" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"configfiles": [], "records": records}))
    return path


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    """A pipeline directory as the working directory, run with configs/x.yaml in checkout 'here'."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(CHECKOUT_ENV, "here")
    monkeypatch.setenv(CONFIGFILES_ENV, "configs/x.yaml")
    return tmp_path


def _records(**params_by_path) -> dict:
    from causalpos.io.provenance import make_record

    out = {}
    for path, params in params_by_path.items():
        kind = path.split("/")[1]
        out[path] = make_record(path, kind, {"p": Path(path).stem}, params)
    return out


SIM = "results/sim/a.zarr"
SCORE = "results/scores/m1/d/causal.zarr"
OTHER = "results/scores/m2/d/causal.zarr"


def test_a_store_records_what_the_running_config_expects_of_its_path(pipeline, monkeypatch):
    records = _records(**{SIM: {"setting": {"n_samples": 256}, "seed": 0}})
    monkeypatch.setenv(TABLE_ENV, str(_table(pipeline, records, "one")))
    write_dataset(_ds(), SIM)
    recorded = root_attributes(SIM)[PROVENANCE_ATTR]
    assert recorded["path"] == SIM and recorded["params"] == {
        "setting": {"n_samples": 256},
        "seed": 0,
    }
    assert recorded["params_sha256"] == records[SIM]["params_sha256"]
    assert recorded["configfiles"] == ["configs/x.yaml"] and recorded["checkout"] == "here"
    # readers never see the record; a path the config does not write gets none
    assert PROVENANCE_ATTR not in open_dataset(SIM).attrs
    write_dataset(_ds(), "results/elsewhere.zarr")
    assert PROVENANCE_ATTR not in root_attributes("results/elsewhere.zarr")


def test_a_store_copied_under_another_models_path_is_refused_by_its_reader(pipeline, monkeypatch):
    """The issue's first case: a score store copied in under another model's path (same dataset
    and variant) was read as that model's."""
    records = _records(**{SCORE: {"model": "m1"}, OTHER: {"model": "m2"}})
    monkeypatch.setenv(TABLE_ENV, str(_table(pipeline, records, "two")))
    write_dataset(_ds(), SCORE)
    shutil.copytree(SCORE, OTHER)
    open_dataset(SCORE)  # where it was written, it opens
    with pytest.raises(OSError) as info:
        open_dataset(OTHER)
    said = str(info.value)
    assert type(info.value).__name__ == "ProvenanceError"
    assert f"store {OTHER} is not what its path and the config say" in said
    assert f"written as {SCORE} (p 'causal')" in said
    assert "--forcerun results/scores/m2/d --configfile configs/x.yaml" in said
    # without the running config (a library caller), the path alone still refuses it
    monkeypatch.delenv(TABLE_ENV)
    with pytest.raises(OSError, match="another store copied or moved here"):
        open_dataset(OTHER)


def test_a_store_made_with_other_settings_is_refused_by_its_reader(pipeline, monkeypatch):
    first = _records(**{SIM: {"setting": {"n_samples": 256, "dim": 8}, "seed": 0}})
    monkeypatch.setenv(TABLE_ENV, str(_table(pipeline, first, "first")))
    write_dataset(_ds(), SIM)
    second = _records(**{SIM: {"setting": {"n_samples": 128, "dim": 8}, "seed": 0}})
    monkeypatch.setenv(TABLE_ENV, str(_table(pipeline, second, "second")))
    with pytest.raises(OSError) as info:
        open_dataset(SIM)
    assert "setting.n_samples: the store has 256, this config 128" in str(info.value)
    assert "dim" not in str(info.value)  # only what differs


def test_params_differences_name_every_differing_key_both_ways():
    from causalpos.io.provenance import params_differences

    assert params_differences({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3, "d": 4}}) == [
        "a.c: the store has 2, this config 3",
        "a.d: the store has nothing, this config 4",
    ]


def test_the_simulation_store_records_n_samples_and_a_changed_value_is_named():
    """The issue's second case: the simulation stores recorded n_samples, never compared."""
    from causalpos.config.provenance import expected_records
    from causalpos.io.provenance import params_differences

    cfg = Resolved(smoke_config(), document_sizes=lambda corpus: None)
    other = Resolved(
        smoke_config(lambda c: c["simulate"].update(n_samples=256)), document_sizes=lambda c: None
    )
    a, b = expected_records(cfg), expected_records(other)
    path = "results/sim/l2_a000.zarr"
    assert a[path]["params"]["setting"]["n_samples"] == 512
    assert b[path]["params"]["setting"]["n_samples"] == 256
    assert params_differences(b[path]["params"], a[path]["params"]) == [
        "setting.n_samples: the store has 256, this config 512"
    ]
    # the settings of what a store was computed from are its own: the normalized store of a
    # pair moves with the extraction's n_groups, the data store does not
    c = expected_records(
        Resolved(
            smoke_config(lambda c: c["extract"].update(n_groups=3)), document_sizes=lambda c: None
        )
    )
    norm, data = (
        "results/normalized/tiny-random/kjv-first24/causal.zarr",
        ("results/data/kjv-first24/tokenizer-smoke-bpe.zarr"),
    )
    assert c[norm]["params_sha256"] != a[norm]["params_sha256"]
    assert c[data]["params_sha256"] == a[data]["params_sha256"]
    # every store of the smoke run has a record, each with its path's fields
    assert a["results/scores/tiny-random/kjv-first24/bidirectional.zarr"]["fields"] == {
        "model": "tiny-random",
        "dataset": "kjv-first24",
        "variant": "bidirectional",
    }


def _stored(path: str, params: dict, checkout: str, configfiles=("configs/other.yaml",)) -> None:
    from causalpos.io.provenance import make_record

    write_dataset(_ds(), path)
    zarr_json = Path(path) / "zarr.json"
    meta = json.loads(zarr_json.read_text())
    record = {
        **make_record(path, path.split("/")[1], {}, params),
        "configfiles": list(configfiles),
        "checkout": checkout,
    }
    meta["attributes"][PROVENANCE_ATTR] = record
    zarr_json.write_text(json.dumps(meta))


def test_a_start_refuses_another_checkouts_store_made_with_other_settings(pipeline):
    """The check a Snakemake start runs before any job (the shared results tree of the issue)."""
    from causalpos.config.provenance import forcing, store_problems

    records = _records(**{SIM: {"n_samples": 512}, SCORE: {"model": "m1"}})
    _stored(SIM, {"n_samples": 256}, checkout="there")
    found = store_problems(records, checkout="here")
    assert list(found) == [SIM]
    assert "n_samples: the store has 256, this config 512" in found[SIM][0][0]
    # one this checkout made with other settings is Snakemake's to rerun (its params changed)
    _stored(SIM, {"n_samples": 256}, checkout="here")
    assert store_problems(records, checkout="here") == {}
    # a store at another store's path is refused whoever made it
    _stored(SCORE, {"model": "m2"}, checkout="here")
    shutil.rmtree(SCORE)
    _stored(OTHER, {"model": "m2"}, checkout="here")
    shutil.copytree(OTHER, SCORE)
    found = store_problems(records, checkout="here")
    assert (
        list(found) == [SCORE]
        and "written as results/scores/m2/d/causal.zarr" in found[SCORE][0][0]
    )
    # --forcerun of the store (or of the pair's directory, or of its rule) rebuilds it: not refused
    for argv in (["-R", "results/scores/m1/d"], ["--forcerun", "merge_scores", "--cores", "1"]):
        assert store_problems(records, checkout="here", forced=forcing(argv)[0]) == {}
    assert store_problems(records, checkout="here", forceall=forcing(["-F"])[1]) == {}


def test_forcing_reads_snakemakes_command_line():
    from causalpos.config.provenance import forcing

    assert forcing(["-n", "--configfile", "c.yaml"]) == (set(), False)
    assert forcing(["-R", "a", "b", "--cores", "1"]) == ({"a", "b"}, False)
    assert forcing(["--forcerun=a,b"]) == ({"a", "b"}, False)
    assert forcing(["-f", "results/x.zarr"])[0] == {"results/x.zarr"}
    assert forcing(["--forceall"])[1] is True


def test_the_refusal_names_each_store_what_it_records_and_the_command(pipeline, monkeypatch):
    from causalpos.config.provenance import check_existing_stores, expected_records

    cfg = Resolved(smoke_config(), document_sizes=lambda corpus: None)
    records = expected_records(cfg)
    path = "results/sim/l2_a020.zarr"
    other = expected_records(
        Resolved(
            smoke_config(lambda c: c["simulate"].update(n_samples=256)),
            document_sizes=lambda c: None,
        )
    )
    _stored(path, other[path]["params"], checkout="there")
    with pytest.raises(ConfigError) as info:
        check_existing_stores(
            cfg, checkout="here", run_configfiles=["configs/smoke.yaml"], records=records
        )
    said = str(info.value)
    assert f"{path} (written by a run with --configfile configs/other.yaml)" in said
    assert "setting.n_samples: the store has 256, this config 512" in said
    assert f"snakemake --forcerun {path} --configfile configs/smoke.yaml --cores N" in said


# --- causalpos verify ---------------------------------------------------------------------------


def test_verify_finds_a_store_under_another_models_path(pipeline, monkeypatch, capsys):
    records = _records(**{SCORE: {"model": "m1"}, OTHER: {"model": "m2"}})
    monkeypatch.setenv(TABLE_ENV, str(_table(pipeline, records, "v")))
    write_dataset(_ds(), SCORE)
    shutil.copytree(SCORE, OTHER)
    monkeypatch.delenv(TABLE_ENV)
    monkeypatch.delenv(CONFIGFILES_ENV)
    assert main(["verify", "results"]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCHED {OTHER} (written by a run with --configfile configs/x.yaml)" in out
    # the rebuild command names the config the store was built with
    assert "rebuild: snakemake --force results/scores/m2/d --configfile configs/x.yaml" in out
    assert f"MISMATCHED {SCORE}" not in out


def test_verify_compares_each_store_with_its_config_file(pipeline, monkeypatch, capsys):
    """Without --configfile: the config file each store records; with it: that one."""
    from causalpos.config.provenance import expected_records

    configs = pipeline / "configs"
    configs.mkdir()
    shutil.copytree(REPO / "workflow" / "schemas", pipeline / "workflow" / "schemas")
    (configs / "x.yaml").write_text((REPO / "configs" / "smoke.yaml").read_text())
    cfg = Resolved(smoke_config(), document_sizes=lambda corpus: None)
    records = expected_records(cfg)
    path = "results/sim/l2_a000.zarr"
    monkeypatch.setenv(TABLE_ENV, str(_table(pipeline, {path: records[path]}, "x")))
    write_dataset(_ds(), path)
    monkeypatch.delenv(TABLE_ENV)
    monkeypatch.delenv(CONFIGFILES_ENV)
    assert main(["verify", "results"]) == 0
    assert "OK" in capsys.readouterr().out
    # the config file edited since the store was built
    text = (configs / "x.yaml").read_text().replace("n_samples: 512", "n_samples: 64")
    (configs / "x.yaml").write_text(text)
    assert main(["verify", "results"]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCHED {path}" in out
    assert "setting.n_samples: the store has 512, this config 64" in out
    # named on the command line: compared with that config
    (configs / "y.yaml").write_text((REPO / "configs" / "smoke.yaml").read_text())
    assert main(["verify", "results", "--configfile", "configs/y.yaml"]) == 0


def test_verify_counts_a_model_directory_without_weights_as_damaged(pipeline, capsys):
    model = pipeline / "resources" / "models" / "loc"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "causalpos_source.json").write_text(json.dumps({"name": "loc", "sha256": {}}))
    assert main(["verify", "resources/models"]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED resources/models/loc" in out and "records no weights file" in out
    # and one recording another model's name
    (model / "causalpos_source.json").write_text(json.dumps({"name": "other"}))
    assert main(["verify", "resources/models"]) == 1
    assert "records model 'other'" in capsys.readouterr().out
