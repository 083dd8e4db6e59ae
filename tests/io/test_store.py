"""Stores: atomic writes, exact shard merge, resumable extraction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from causalpos.capture.hook import capture_scores
from causalpos.capture.reducers import GroupMeans, ScoreMoments, group_labels
from causalpos.capture.settings import CaptureRun
from causalpos.io.shards import merge_shards
from causalpos.io.store import open_dataset, write_dataset
from causalpos.stages.merge import reducer_classes
from tests.conftest import tiny_pair

N, T, BATCH = 8, 10, 2
SHARDS = [(0, 4), (4, 8)]  # the config's shards of 8 sequences by 4 (Resolved.shard_bounds)


@pytest.fixture(scope="module")
def setup():
    model, _ = tiny_pair("mistral")
    tokens = torch.randint(3, 256, (N, T), generator=torch.Generator().manual_seed(0)).numpy()
    labels = group_labels(N, n_groups=3)
    return model, tokens, labels


REDUCERS = reducer_classes()


def _extract(model, tokens, labels, lo, hi, reducers=None):
    return capture_scores(
        model,
        tokens[lo:hi],
        CaptureRun("scrambled_rope", BATCH, seed=4, progress=False),
        reducers=reducers or [ScoreMoments(), GroupMeans(labels)],
        seq_ids=np.arange(lo, hi),
        attrs={"dataset": "unit"},
    )


def test_shard_merge_equals_single_pass(tmp_path, setup):
    model, tokens, labels = setup
    single = _extract(model, tokens, labels, 0, N)
    paths = []
    for k, (lo, hi) in enumerate(SHARDS):
        paths.append(
            write_dataset(_extract(model, tokens, labels, lo, hi), tmp_path / f"shard-{k}.zarr")
        )
    merged = merge_shards(paths, map_dtype=None, reducers=REDUCERS)
    for name in ("score_mean", "score_m2", "score_group_mean"):
        a, b = merged[name].values, single[name].values
        assert a.dtype == b.dtype == np.float64
        assert (np.isnan(a) == np.isnan(b)).all()
        # Same batches, same scores: only float64 summation order differs.
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert int(merged["n_sequences"]) == N and merged["group_n_sequences"].values.tolist() == [
        3,
        3,
        2,
    ]
    assert merged.attrs["n_sequences"] == N and merged.attrs["n_shards"] == 2
    assert (merged.attrs["sequence_first"], merged.attrs["sequence_last"]) == (0, N - 1)
    assert merged.attrs["variant"] == "scrambled_rope" and merged.attrs["dataset"] == "unit"
    final = merge_shards(
        paths, reducers=REDUCERS
    )  # the final store: float32 maps, as design.md specifies
    assert final["score_mean"].dtype == np.float32 and final["group_n_sequences"].dtype == np.int64
    np.testing.assert_array_equal(
        final["score_mean"].values, single["score_mean"].values.astype(np.float32)
    )


def test_a_merge_keeps_each_layers_kind(tmp_path, setup):
    """The shards' ``layer_kind`` coordinate survives the merge of reducers that rebuild their
    datasets (maps and group means only: no per-sequence variable carries it through), so a
    paper-1 store of a sliding-window model names its layers' masks."""
    model, tokens, labels = setup
    single = _extract(model, tokens, labels, 0, N)
    assert single["layer_kind"].values.tolist() == ["sliding5", "sliding5"]
    shards = [_extract(model, tokens, labels, lo, hi) for lo, hi in SHARDS]
    for parts in (shards, shards[:1]):
        merged = merge_shards(parts, reducers=REDUCERS)
        assert merged["layer_kind"].dims == ("layer",)
        assert merged["layer_kind"].values.tolist() == ["sliding5", "sliding5"]


class _Crash(RuntimeError):
    pass


class _CrashAt:
    """Reducer that raises on the ``at``-th update: an extraction killed mid-shard."""

    name = "crash"

    def __init__(self, at: int) -> None:
        self.at, self.n = at, 0

    def update(self, layer, scores, seq_ids):
        self.n += 1
        if self.n == self.at:
            raise _Crash("simulated failure")

    def result(self):
        return xr.Dataset()


def write_shards(paths, compute):
    """Shard ``k`` = ``compute(k)`` written to ``paths[k]`` where that store is not complete (its
    final name holds ``zarr.json``): a resume after an interruption, as Snakemake's shard jobs."""
    for k, path in enumerate(paths):
        if not (path / "zarr.json").is_file():
            ds = compute(k)
            ds.attrs["shard"] = k
            write_dataset(ds, path)


def test_interrupted_extraction_resumes_to_the_same_store(tmp_path, setup):
    model, tokens, labels = setup
    bounds = SHARDS
    calls: list[int] = []

    def compute(k, crash=False):
        calls.append(k)
        lo, hi = bounds[k]
        extra = [_CrashAt(3)] if crash and k == 1 else []
        return _extract(model, tokens, labels, lo, hi, [ScoreMoments(), GroupMeans(labels), *extra])

    paths = [tmp_path / "run" / f"shard-{k}.zarr" for k in range(len(bounds))]
    with pytest.raises(_Crash):
        write_shards(paths, lambda k: compute(k, crash=True))
    assert (paths[0] / "zarr.json").is_file() and not paths[1].exists()  # no half-written shard
    # A writer killed during the rename leaves only a temporary sibling, cleaned on resume.
    (paths[1].parent / f".{paths[1].name}.tmp-dead").mkdir()
    calls.clear()
    write_shards(paths, compute)
    assert calls == [1]  # the finished shard is kept, the unfinished one redone
    assert not list(paths[1].parent.glob(".*tmp-*"))
    resumed = merge_shards(paths, map_dtype=None, reducers=REDUCERS)

    clean = [tmp_path / "clean" / f"shard-{k}.zarr" for k in range(len(bounds))]
    write_shards(clean, compute)
    reference = merge_shards(clean, map_dtype=None, reducers=REDUCERS)
    for name in resumed.data_vars:
        np.testing.assert_array_equal(
            resumed[name].values, reference[name].values
        )  # bit-identical on CPU
    assert resumed.attrs == reference.attrs


def test_merge_refuses_mismatched_shards(tmp_path, setup):
    model, tokens, labels = setup
    a = _extract(model, tokens, labels, 0, 4)
    b = _extract(model, tokens, labels, 4, 8)
    b.attrs["variant"] = "causal"
    with pytest.raises(ValueError, match="'variant' differs"):
        merge_shards([a, b], reducers=REDUCERS)
    c = a.copy()
    del c["score_mean"].attrs["reducer"]
    with pytest.raises(ValueError, match="no 'reducer' attribute"):
        merge_shards([c], reducers=REDUCERS)


def test_write_is_atomic_and_strings_are_portable(tmp_path, monkeypatch):
    ds = xr.Dataset(
        {"source": ("sequence", np.array(["Genesis", "Ruth"])), "x": ("sequence", [1.5, 2.5])}
    )
    path = write_dataset(ds, tmp_path / "s.zarr")
    back = open_dataset(path)
    assert back["source"].values.tolist() == ["Genesis", "Ruth"] and (path / "zarr.json").is_file()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(xr.Dataset, "to_zarr", boom)
    with pytest.raises(OSError):
        write_dataset(ds, tmp_path / "t.zarr")
    assert not (tmp_path / "t.zarr").exists() and not list(tmp_path.glob(".t.zarr.tmp-*"))


def test_merge_uses_only_known_reducer_classes(tmp_path):
    """A store cannot make the merge import a module: an unknown reducer path is refused, while
    the paths of stores written before the package layout (causalpos.capture:...) still merge."""
    ds = ScoreMoments()
    ds.update(0, torch.ones(2, 1, 3, 3), np.arange(2))
    part = ds.result()
    legacy = part.copy()
    for name in legacy.data_vars:
        legacy[name].attrs["reducer"] = "causalpos.capture:ScoreMoments"
    merged = merge_shards([legacy, legacy], reducers=REDUCERS)
    assert float(merged["n_sequences"]) == 4
    hostile = part.copy()
    for name in hostile.data_vars:
        hostile[name].attrs["reducer"] = "os:system"
    with pytest.raises(ValueError, match="os:system"):
        merge_shards([hostile], reducers=REDUCERS)


def test_a_store_opens_in_a_notebook_without_warnings(tmp_path):
    """Plain `xr.open_zarr` (what a user types) on a store holding Snakemake's timestamp file
    emits no warning: the metadata is consolidated, so the store is not listed."""
    import warnings

    from causalpos.io.store import write_dataset

    path = write_dataset(
        xr.Dataset({"a": (("x", "y"), np.arange(12.0).reshape(3, 4))}, attrs={"n_sequences": 3}),
        tmp_path / "s.zarr",
    )
    (path / ".snakemake_timestamp").touch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(path)
        np.testing.assert_array_equal(ds["a"].values, np.arange(12.0).reshape(3, 4))
        assert open_dataset(path)["a"].shape == (3, 4)


def test_merges_are_the_reducers_own_and_import_no_torch():
    """The merge job needs no model: its registry names every reducer class by the path its
    stores record, each with the class's own merge, and importing it loads no torch."""
    import subprocess
    import sys

    from causalpos.capture import merging
    from causalpos.capture.reducers import GroupMeans, ScoreMoments, reducer_path
    from causalpos.paper2.extraction.reducers import LeakageReducer, SinkReducer

    own = {
        ScoreMoments: merging.merge_moments,
        GroupMeans: merging.merge_group_means,
        LeakageReducer: merging.merge_leakage,
        SinkReducer: merging.merge_sink,
    }
    for cls, merge in own.items():
        assert REDUCERS[reducer_path(cls)] is merge
    code = "import sys; import causalpos.stages.merge as m; m.reducer_classes(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_numeric_arrays_are_shuffled_before_compression_and_read_back_exactly(tmp_path):
    """Every numeric array of a store is compressed by Blosc's byte shuffle and zstd (the codec in
    its zarr metadata), bit for bit lossless — NaN cells, ±0 and float64 tails included — and
    smaller than zarr's default codec on smooth float data; strings keep zarr's own codec."""
    import json

    rng = np.random.default_rng(0)
    maps = (np.round(np.cumsum(rng.normal(size=(3, 64, 64)), axis=-1) * 64) / 64).astype(np.float32)
    maps[:, np.triu_indices(64, 1)[0], np.triu_indices(64, 1)[1]] = np.nan
    maps[0, 0, 0] = -0.0
    sums = rng.normal(size=(5, 7)) * 1e-300
    ds = xr.Dataset(
        {
            "m": (("layer", "query", "key"), maps),
            "s": (("a", "b"), sums),
            "n": ("a", np.arange(5, dtype=np.int64)),
            "name": ("a", np.array(["x", "y", "z", "u", "v"])),
        }
    )
    path = write_dataset(ds, tmp_path / "s.zarr")
    back = open_dataset(path)
    for v in ("m", "s", "n"):
        assert back[v].values.tobytes() == ds[v].values.tobytes(), v
        meta = json.loads((path / v / "zarr.json").read_text())
        blosc = [c for c in meta["codecs"] if c["name"] == "blosc"]
        assert blosc and blosc[0]["configuration"]["shuffle"] == "shuffle", meta["codecs"]
        assert blosc[0]["configuration"]["cname"] == "zstd"
    assert np.signbit(back["m"].values[0, 0, 0])
    assert back["name"].values.tolist() == ["x", "y", "z", "u", "v"]
    plain = tmp_path / "plain.zarr"
    ds[["m"]].to_zarr(plain, mode="w", zarr_format=3, encoding={"m": {"chunks": (1, 64, 64)}})

    def size(p):
        return sum(f.stat().st_size for f in (p / "m").rglob("*") if f.name != "zarr.json")

    assert size(path) < 0.95 * size(plain), (size(path), size(plain))
