"""Nothing silently lost: store manifests verified on read, self-checks of the merge and
the normalization, stale temporaries, ``causalpos verify``."""

from __future__ import annotations

import io
import json
import logging
import pickle
import shutil
import warnings
import zlib

import numpy as np
import pytest
import torch
import xarray as xr

from causalpos.capture.reducers import GroupMeans, ScoreMoments, group_labels, reducer_path
from causalpos.cli import main
from causalpos.io.atomic import atomic_dir, final_of, is_temporary
from causalpos.io.integrity import MANIFEST_GROUP, STORE_FORMAT_ATTR, read_manifest
from causalpos.io.shards import merge_shards
from causalpos.io.store import StoreError, count_problems, map_problems, open_dataset, write_dataset
from causalpos.stages.merge import merge_score_shards, reducer_classes
from causalpos.stages.normalize import diagonal_normalize

L, H, T, N = 2, 2, 64, 6  # T * T = 4096: one chunk file per (layer, head) map
UPPER = np.triu(np.ones((T, T), bool), 1)


def _shard(lo: int, hi: int) -> xr.Dataset:
    """A shard as extract_scores writes it: moments and group means of causal maps, attrs."""
    g = torch.Generator().manual_seed(lo)
    reducers = [ScoreMoments(), GroupMeans(group_labels(N, n_groups=2))]
    for layer in range(L):
        scores = torch.randn(hi - lo, H, T, T, generator=g)
        scores[..., torch.from_numpy(UPPER)] = torch.nan
        for r in reducers:
            r.update(layer, scores, np.arange(lo, hi))
    parts = []
    for r in reducers:
        part = r.result()
        for var in part.data_vars.values():
            var.attrs["reducer"] = reducer_path(r)
        parts.append(part)
    ds = xr.merge(parts)
    ds.attrs = {
        "model": "unit",
        "n_sequences": hi - lo,
        "sequence_first": lo,
        "sequence_last": hi - 1,
    }
    return ds


@pytest.fixture
def store(tmp_path):
    return write_dataset(_shard(0, 4), tmp_path / "results" / "s.zarr")


def _chunk(store, array="score_mean", index=(1, 0, 0, 0)):
    return store / array / "c" / "/".join(map(str, index))


def _drop_manifest(store):
    """Make ``store`` look written by an older causalpos: no manifest, no store-format marker, no
    consolidated metadata."""
    shutil.rmtree(store / MANIFEST_GROUP)
    try:
        root = json.loads((store / "zarr.json").read_text())
    except json.JSONDecodeError:
        return  # a test that garbled it on purpose
    root.pop("consolidated_metadata", None)
    root.get("attributes", {}).pop(STORE_FORMAT_ATTR, None)
    (store / "zarr.json").write_text(json.dumps(root))


# --- the manifest --------------------------------------------------------------------------------


def test_manifest_records_every_file_and_zarr_opens_the_store_without_a_warning(store):
    manifest = read_manifest(store)
    on_disk = {
        p.relative_to(store).as_posix()
        for p in store.rglob("*")
        if p.is_file() and MANIFEST_GROUP not in p.parts
    }
    assert set(manifest["files"]) == on_disk and "zarr.json" in on_disk
    assert len([f for f in on_disk if f.startswith("score_mean/c/")]) == L * H
    for rel, (size, crc) in manifest["files"].items():
        data = (store / rel).read_bytes()
        assert (size, crc) == (len(data), zlib.crc32(data))
    assert manifest["counts"] == {"n_sequences": 4}
    assert manifest["sizes"] == {"layer": L, "head": H, "query": T, "key": T, "group": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # zarr warns about non-zarr objects in a hierarchy
        plain = xr.open_zarr(store, consolidated=False)
        ours = open_dataset(store)
    assert "causalpos_manifest" not in plain.attrs
    assert plain.attrs.pop(STORE_FORMAT_ATTR) == 2 and plain.attrs == ours.attrs
    np.testing.assert_array_equal(ours["score_mean"].values, _shard(0, 4)["score_mean"].values)


# --- damage found on open ------------------------------------------------------------------------


def test_deleted_chunk_raises_store_error_naming_store_array_chunk_and_rebuild(store):
    _chunk(store).unlink()
    # What happened before: zarr reads the missing chunk as its fill value, silently.
    assert np.isnan(xr.open_zarr(store, consolidated=False)["score_mean"][1, 0].values).all()
    with pytest.raises(StoreError) as err:
        open_dataset(store)
    msg = str(err.value)
    assert str(store) in msg and "chunk (1, 0, 0, 0) of array 'score_mean'" in msg
    assert "is missing" in msg and f"snakemake --force {store} --cores 1" in msg
    assert isinstance(err.value, OSError) and err.value.path == store
    assert len(err.value.problems) == 1
    # sizes-only verification still finds it; the error survives pickling (multiprocessing)
    with pytest.raises(StoreError, match="is missing"):
        open_dataset(store, checksums=False)
    again = pickle.loads(pickle.dumps(err.value))
    assert str(again) == msg and again.problems == err.value.problems


def test_truncated_chunk_raises_store_error_not_a_zstd_error(store):
    chunk = _chunk(store, "score_m2", (0, 1, 0, 0))
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) // 2])
    for checksums in (True, False):
        with pytest.raises(StoreError) as err:
            open_dataset(store, checksums=checksums)
        assert "chunk (0, 1, 0, 0) of array 'score_m2'" in str(err.value)
        assert f"has {len(data) // 2} bytes, {len(data)} were written" in str(err.value)


def test_same_size_corruption_is_caught_by_the_checksum(store):
    chunk = _chunk(store)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"'score_mean'.*does not match its CRC-32"):
        open_dataset(store)
    open_dataset(store, checksums=False)  # sizes only: this is what the checksum is for


def test_garbled_zarr_json_raises_store_error_not_json_decode_error(store):
    root = store / "zarr.json"
    root.write_text(root.read_text()[:-7])
    with pytest.raises(StoreError, match="root metadata zarr.json has"):
        open_dataset(store)
    # without a manifest (a store of an older version) the parse itself is caught
    _drop_manifest(store)
    with pytest.raises(StoreError, match=r"root metadata zarr.json is not valid JSON") as err:
        open_dataset(store)
    assert isinstance(err.value.__cause__, json.JSONDecodeError)


@pytest.mark.filterwarnings("ignore::UserWarning")  # zarr's own note that it skips the array
def test_garbled_array_metadata_of_a_store_without_manifest_is_a_store_error(store):
    _drop_manifest(store)
    (store / "score_mean" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array"}')
    # zarr alone would open the store without that array
    assert "score_mean" not in xr.open_zarr(store, consolidated=False)
    with pytest.raises(StoreError, match=r"zarr cannot read the metadata of array 'score_mean'"):
        open_dataset(store)
    (store / "score_mean" / "zarr.json").write_text("[")
    with pytest.raises(StoreError, match=r"metadata of array 'score_mean' .* is not valid JSON"):
        open_dataset(store)


def test_missing_root_metadata_added_file_and_garbled_manifest(store, tmp_path):
    (store / "score_mean" / "c" / "9").write_bytes(b"x")
    with pytest.raises(StoreError, match=r"\(score_mean/c/9\) was not written with the store"):
        open_dataset(store)
    (store / "score_mean" / "c" / "9").unlink()
    (store / ".snakemake_timestamp").touch()  # Snakemake marks directory() outputs so
    open_dataset(store)
    (store / MANIFEST_GROUP / "zarr.json").write_text("{")
    with pytest.raises(StoreError, match="manifest causalpos_manifest/zarr.json is unreadable"):
        open_dataset(store)
    (store / "zarr.json").unlink()
    with pytest.raises(StoreError, match="no root zarr.json"):
        open_dataset(store)
    with pytest.raises(FileNotFoundError, match="no zarr store"):
        open_dataset(tmp_path / "nowhere.zarr")


def test_counts_are_checked_against_the_manifest(store):
    root = store / "zarr.json"
    text = root.read_text()
    assert '"n_sequences": 4' in text
    root.write_text(text.replace('"n_sequences": 4', '"n_sequences": 7'))  # same size
    with pytest.raises(StoreError, match="CRC-32"):
        open_dataset(store)
    with pytest.raises(
        StoreError, match="attribute n_sequences is 7, the store was written with 4"
    ):
        open_dataset(store, checksums=False)


def test_store_without_manifest_opens_with_one_logged_warning(store, caplog):
    _drop_manifest(store)
    with caplog.at_level(logging.WARNING, logger="causalpos.io.store"):
        a = open_dataset(store)
        b = open_dataset(store)
    warned = [r for r in caplog.records if "no integrity manifest" in r.getMessage()]
    assert len(warned) == 1 and str(store) in warned[0].getMessage()
    assert int(a.attrs["n_sequences"]) == int(b.attrs["n_sequences"]) == 4


# --- stale temporaries ---------------------------------------------------------------------------


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path):
    final = tmp_path / "shard-0000.zarr"
    stale = tmp_path / ".shard-0000.zarr.tmp-0a1b2c3d"
    write_dataset(_shard(0, 2), stale.with_name("x.zarr"))
    (tmp_path / "x.zarr").rename(stale)  # a finished-looking store under the temporary name
    other = tmp_path / ".shard-0001.zarr.tmp-0a1b2c3d"  # another store's temporary: kept
    other.mkdir()
    assert (stale / "zarr.json").is_file() and not (final / "zarr.json").exists()
    assert is_temporary(stale) and final_of(stale) == final and not is_temporary(final)
    write_dataset(_shard(0, 2), final)
    assert not stale.exists() and other.is_dir() and (final / "zarr.json").is_file()
    # every atomic write does it (model directories, checkpoints)
    (tmp_path / ".model.tmp-deadbeef").mkdir()
    with atomic_dir(tmp_path / "model") as tmp:
        (tmp / "config.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".shard-0001.zarr.tmp-0a1b2c3d",
        "model",
        "shard-0000.zarr",
    ]


# --- self-checks of the merge and the normalization ----------------------------------------------


def test_merge_refuses_shards_whose_counts_do_not_add_up(tmp_path):
    a = _shard(0, 4)
    b = _shard(4, 6)
    b.attrs["n_sequences"] = 3  # the data holds 2 sequences
    pa = write_dataset(a, tmp_path / "shard-0000.zarr")
    pb = write_dataset(b, tmp_path / "shard-0001.zarr")
    with pytest.raises(StoreError) as err:
        merge_score_shards([pa, pb], tmp_path / "merged.zarr")
    msg = str(err.value)
    assert (
        str(pb) in msg and "the n_sequences variable counts 2, the n_sequences attribute 3" in msg
    )
    assert "the sum of group_n_sequences counts 2" in msg
    assert not (tmp_path / "merged.zarr").exists()
    # the same shard twice would count its sequences twice
    with pytest.raises(ValueError, match=r"shards 0 \(sequences 0\.\.3\) and 1 \(0\.\.3\) overlap"):
        merge_shards([a, a], reducers=reducer_classes())
    # a merged variable that disagrees with the summed attribute (a reducer that lost a shard)
    c = _shard(4, 6)
    c["n_sequences"] = ((), np.int64(5))
    c.attrs["n_sequences"] = 5
    c.attrs["sequence_last"] = 8
    with pytest.raises(ValueError, match=r"shard 1: the sum of group_n_sequences counts 2"):
        merge_shards([a, c], reducers=reducer_classes())
    good = merge_score_shards(
        [pa, write_dataset(_shard(4, 6), tmp_path / "ok.zarr")], tmp_path / "m.zarr"
    )
    assert good.attrs["n_sequences"] == int(good["n_sequences"]) == N
    assert open_dataset(tmp_path / "m.zarr").attrs["n_shards"] == 2


def test_merge_refuses_an_all_nan_map_naming_the_shard(tmp_path):
    pa = write_dataset(_shard(0, 4), tmp_path / "shard-0000.zarr")
    pb = write_dataset(_shard(4, 6), tmp_path / "shard-0001.zarr")
    # an older store (no manifest) that lost a chunk: it opens, and reads NaN there
    _chunk(pb, "score_group_mean", (1, 1, 0, 0)).unlink()
    _drop_manifest(pb)
    with pytest.raises(StoreError) as err:
        merge_score_shards([pa, pb], tmp_path / "merged.zarr")
    msg = str(err.value)
    assert err.value.path == pb and "score_group_mean: 1 of 4 maps" in msg
    assert "group=1, layer=1" in msg
    assert not (tmp_path / "merged.zarr").exists()


def test_normalization_refuses_an_all_nan_input_map(tmp_path):
    src = write_dataset(
        merge_shards([_shard(0, 4), _shard(4, 6)], reducers=reducer_classes()),
        tmp_path / "scores.zarr",
    )
    ok = diagonal_normalize(src, tmp_path / "normalized.zarr")
    assert np.isnan(ok["score_normalized"].values[..., UPPER]).all()
    _chunk(src, "score_mean", (0, 1, 0, 0)).unlink()
    _drop_manifest(src)
    with pytest.raises(StoreError) as err:
        diagonal_normalize(src, tmp_path / "normalized2.zarr")
    assert err.value.path == src and "score_mean: 1 of 4 maps" in str(err.value)
    assert "layer=0, head=1" in str(err.value)
    assert not (tmp_path / "normalized2.zarr").exists()


def test_map_and_count_checks():
    maps = np.zeros((2, 3, 5, 5))
    band = np.abs(np.subtract.outer(np.arange(5), np.arange(5))) > 1  # a sliding window
    maps[..., band] = np.nan
    ds = xr.Dataset({"score_mean": (("layer", "head", "query", "key"), maps)})
    assert map_problems(ds) == []  # NaN off the diagonal is a mask, not lost data
    maps[1, 2] = np.nan
    maps[0, 0, 3, 1] = np.inf
    problems = map_problems(ds)
    assert len(problems) == 2 and "1 of 6 maps" in problems[0] and "layer=1, head=2" in problems[0]
    assert "±inf" in problems[1]
    counts = xr.Dataset(
        {"n_sequences": ((), 5), "group_n_sequences": ("group", [2, 2])},
        attrs={"n_sequences": 5, "sequence_first": 0, "sequence_last": 4},
    )
    assert count_problems(counts) == [
        "the sum of group_n_sequences counts 4, the n_sequences attribute 5"
    ]


# --- causalpos verify ----------------------------------------------------------------------------


def test_verify_lists_damaged_stores_and_stale_temporaries(tmp_path, capsys):
    results = tmp_path / "results"
    good = write_dataset(
        _shard(0, 4), results / "scores" / "m" / "d" / "causal" / "shard-0000.zarr"
    )
    bad = write_dataset(_shard(4, 6), results / "scores" / "m" / "d" / "causal" / "shard-0001.zarr")
    old = write_dataset(_shard(0, 2), results / "sim" / "old.zarr")
    _drop_manifest(old)
    assert main(["verify", str(results)]) == 3  # unverified: its own exit status
    out = capsys.readouterr().out
    assert "3 stores: 2 verified, 0 damaged, 1 without a manifest" in out
    assert f"UNVERIFIED {old}" in out
    assert out.rstrip().endswith("UNVERIFIED STORES (1): rebuild them to verify them")
    shutil.rmtree(old)

    _chunk(bad).unlink()
    stale = good.with_name(".shard-0002.zarr.tmp-12345678")
    stale.mkdir()
    (stale / "zarr.json").write_text("{}")
    assert main(["verify", str(results)]) == 1
    out = capsys.readouterr().out
    assert "1 damaged" in out and "1 stale temporaries" in out
    assert f"DAMAGED {bad}\n  chunk (1, 0, 0, 0) of array 'score_mean'" in out
    assert f"rebuild: snakemake --force {bad} --cores 1" in out
    assert main(["verify", "--configfile", "configs/paper.yaml", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"rebuild: snakemake --force {bad} --configfile configs/paper.yaml --cores 1" in out
    assert (
        f"STALE {stale}" in out
        and f"interrupted write of {good.with_name('shard-0002.zarr')}" in out
    )
    assert f"DAMAGED {good}" not in out and out.rstrip().endswith("PROBLEMS FOUND")
    assert main(["verify", "--sizes-only", str(results)]) == 1

    write_dataset(_shard(4, 6), bad)  # the rebuild
    shutil.rmtree(stale)
    assert main(["verify", str(results)]) == 0
    assert main(["verify", str(tmp_path / "nowhere")]) == 2


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_verify_shows_its_progress_on_stderr_and_leaves_the_report_alone(tmp_path, capsys):
    """Progress of `causalpos verify` on stderr: stores checked of all found and the one being
    checked, plain lines when stderr is no terminal (the first and the last here), redrawn in
    place on one; stdout holds the report, exactly as without progress."""
    from causalpos.io.verify import verify_tree

    results = tmp_path / "results"
    stores = [
        write_dataset(_shard(0, 4), results / "scores" / "m" / "d" / f"v{k}.zarr") for k in range(3)
    ]
    assert main(["verify", str(results)]) == 0
    captured = capsys.readouterr()
    assert captured.out == verify_tree(results).report() + "\n"
    assert "\r" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"verify {results}: ") for line in lines)
    assert " 0/3 (0%) [" in lines[0]
    assert " 3/3 (100%) [" in lines[1] and lines[1].endswith(f"store/s, {stores[-1]}]")

    tty = _Terminal()
    assert verify_tree(results, progress=tty).report() == verify_tree(results).report()
    frames = tty.getvalue().split("\r")[1:]
    # a frame naming each store as it is checked, then the final count
    for k, store in enumerate(stores):
        assert any(f"| {k}/3 [" in f and f.rstrip().endswith(f"{store}]") for f in frames), k
    assert "| 3/3 [" in frames[-1] and frames[-1].endswith("\n")


def test_rebuild_command_of_a_variant_store_names_the_directory_its_job_writes(monkeypatch):
    from causalpos.io.integrity import CONFIGFILES_ENV, rebuild_command

    monkeypatch.delenv(CONFIGFILES_ENV, raising=False)

    assert rebuild_command("results/shards/m/d/shard-0003/scrambled_rope+bidirectional.zarr") == (
        "snakemake --force results/shards/m/d/shard-0003 --cores 1"
    )
    # a merged store: the pair's merge job writes the directory of every variant
    assert rebuild_command("results/scores/m/d/causal.zarr") == (
        "snakemake --force results/scores/m/d --cores 1"
    )
    # a tree built with a named config is rebuilt with it (`causalpos verify --configfile`)
    monkeypatch.setenv(CONFIGFILES_ENV, "configs/smoke.yaml")
    assert rebuild_command("results/sim/a.zarr") == (
        "snakemake --force results/sim/a.zarr --configfile configs/smoke.yaml --cores 1"
    )
