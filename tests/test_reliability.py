"""Issue 24, the store, capture and clean-up half: a store that lost its manifest folder is damage,
``causalpos verify`` does not pass unverified stores, names cannot escape their parent, NaN scores
are named where they start, an interrupt leaves no temporary, messages with advice."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import xarray as xr

from causalpos.cli import main
from causalpos.io.integrity import (
    CONFIGFILES_ENV,
    MANIFEST_GROUP,
    STORE_FORMAT,
    STORE_FORMAT_ATTR,
    StoreFormatError,
    rebuild_command,
    store_format,
)
from causalpos.io.store import StoreError, open_dataset, verify_store, write_dataset


def _small(n: int = 3) -> xr.Dataset:
    maps = np.arange(n * 4 * 4, dtype=np.float64).reshape(n, 4, 4)
    return xr.Dataset({"score_mean": (("layer", "query", "key"), maps)}, attrs={"model": "unit"})


# --- (3) store format and marker -----------------------------------------------------------------


def test_store_records_its_format_in_the_root_metadata_and_readers_do_not_see_it(tmp_path):
    store = write_dataset(_small(), tmp_path / "s.zarr")
    root = json.loads((store / "zarr.json").read_text())
    assert root["attributes"][STORE_FORMAT_ATTR] == STORE_FORMAT == 2
    assert store_format(store) == 2
    assert open_dataset(store).attrs == {"model": "unit"}  # the marker is not data


def test_a_store_that_lost_its_manifest_folder_is_damaged_not_older(tmp_path, capsys):
    results = tmp_path / "results"
    store = write_dataset(_small(), results / "gram" / "cut.zarr")
    shutil.rmtree(store / MANIFEST_GROUP)  # what a cp -r / rsync cut short leaves
    with pytest.raises(StoreError) as err:
        open_dataset(store)
    assert "manifest folder causalpos_manifest/ is missing" in str(err.value)
    assert "store format 2" in str(err.value)
    with pytest.raises(StoreError):
        verify_store(store)
    assert main(["verify", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED {store}" in out and out.rstrip().endswith("PROBLEMS FOUND")


def test_verify_exits_with_its_own_status_on_unverified_stores(tmp_path, capsys):
    results = tmp_path / "results"
    store = write_dataset(_small(), results / "old.zarr")
    assert main(["verify", str(results)]) == 0
    shutil.rmtree(store / MANIFEST_GROUP)
    root = json.loads((store / "zarr.json").read_text())
    del root["attributes"][STORE_FORMAT_ATTR]  # written by older code: neither marker nor manifest
    root.pop("consolidated_metadata")
    (store / "zarr.json").write_text(json.dumps(root))
    assert store_format(store) == 0
    assert main(["verify", str(results), "--configfile", "configs/smoke.yaml"]) == 3
    out = capsys.readouterr().out
    assert "UNVERIFIED" in out and "--configfile configs/smoke.yaml" in out
    assert not out.rstrip().endswith("OK")


def test_a_newer_store_format_is_refused(tmp_path):
    store = write_dataset(_small(), tmp_path / "new.zarr")
    manifest = store / MANIFEST_GROUP / "zarr.json"
    root = json.loads((store / "zarr.json").read_text())
    root["attributes"][STORE_FORMAT_ATTR] = STORE_FORMAT + 1
    text = json.dumps(root)
    (store / "zarr.json").write_text(text)
    meta = json.loads(manifest.read_text())
    import zlib

    meta["attributes"]["causalpos_manifest"]["files"]["zarr.json"] = [
        len(text.encode()),
        zlib.crc32(text.encode()),
    ]
    manifest.write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="store format 3, this causalpos reads formats up to 2"):
        open_dataset(store)


def test_a_reader_names_the_format_and_the_rebuild_command_instead_of_a_bare_keyerror(
    tmp_path, monkeypatch
):
    store = write_dataset(_small(), tmp_path / "results" / "scores.zarr")
    monkeypatch.setenv(CONFIGFILES_ENV, "configs/smoke.yaml")
    with pytest.raises(StoreFormatError) as err:
        open_dataset(store, variables=["score_mean", "score_m2"], attrs=["seq_len"])
    msg = str(err.value)
    assert isinstance(err.value, KeyError)
    assert "has no variable 'score_m2', attribute 'seq_len'" in msg
    assert "store format 2" in msg and "written by older code" in msg
    assert "--configfile configs/smoke.yaml --cores 1" in msg
    monkeypatch.setenv(CONFIGFILES_ENV, "")  # the default config: no --configfile
    assert rebuild_command("results/x.zarr") == "snakemake --force results/x.zarr --cores 1"
    monkeypatch.delenv(CONFIGFILES_ENV)
    assert "add the --configfile you ran with" in str(StoreFormatError(store, ["x"], 1))


def test_a_keyerror_in_a_job_that_read_an_older_store_names_the_store(tmp_path):
    from causalpos.io.runlog import logged

    store = write_dataset(_small(), tmp_path / "results" / "old.zarr")
    root = json.loads((store / "zarr.json").read_text())
    del root["attributes"][STORE_FORMAT_ATTR]  # format 1: a manifest, no marker
    text = json.dumps(root)
    (store / "zarr.json").write_text(text)
    shutil.rmtree(store / MANIFEST_GROUP)  # (re-recording the manifest is not needed for this)
    assert store_format(store) == 0
    with pytest.raises(StoreFormatError) as err, logged(tmp_path / "job.log"):
        open_dataset(store)["score_m2"]
    assert f"store {store} (store format 0" in str(err.value) and "'score_m2'" in str(err.value)
    assert "snakemake --force" in str(err.value)
    assert isinstance(err.value.__cause__, KeyError)


def test_normalize_names_a_store_without_score_mean(tmp_path):
    from causalpos.stages.normalize import diagonal_normalize

    store = write_dataset(_small().rename(score_mean="score_avg"), tmp_path / "scores.zarr")
    with pytest.raises(StoreFormatError, match="has no variable 'score_mean'"):
        diagonal_normalize(store, tmp_path / "normalized.zarr")


# --- (4) names that become paths -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "-rf", "_x", ""])
def test_atomic_dir_refuses_a_name_that_is_not_a_plain_name(tmp_path, name):
    from causalpos.io.atomic import atomic_dir

    resources = tmp_path / "resources"
    keep = resources / "tokenizers" / "t" / "tokenizer.json"
    keep.parent.mkdir(parents=True)
    keep.write_text("{}")
    target = f"{resources / 'tokenizers'}/{name}"
    with pytest.raises(ValueError, match="must start with a letter or digit"):
        with atomic_dir(target) as tmp:
            (tmp / "x").write_text("x")
    assert keep.read_text() == "{}" and sorted(p.name for p in resources.iterdir()) == [
        "tokenizers"
    ]


def test_atomic_dir_refuses_a_path_that_resolves_outside_its_parent(tmp_path):
    from causalpos.io.atomic import atomic_dir

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    parent = tmp_path / "resources" / "models"
    parent.mkdir(parents=True)
    (parent / "m").symlink_to(outside)
    with pytest.raises(ValueError, match="outside its directory"):
        with atomic_dir(parent / "m") as tmp:
            (tmp / "x").write_text("x")
    assert (outside / "precious").read_text() == "keep"
    with atomic_dir(parent / "m2") as tmp:  # a plain name is written
        (tmp / "x").write_text("x")
    assert (parent / "m2" / "x").read_text() == "x"
