"""Stage-level functions: store-to-store glue between the library and the workflow."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from causalpos.capture.settings import ExtractSettings
from causalpos.models import device as stages_device
from causalpos.paper1 import tables as P1_tables
from causalpos.paper1.diagonal import index_ci, normalize
from causalpos.stages import extract as stages_extract
from causalpos.stages import normalize as stages_normalize


def _score_store(rng, n_layers=2, n_heads=3, t=7, n_groups=4, causal=True):
    mean = rng.normal(size=(n_layers, n_heads, t, t))
    groups = rng.normal(size=(n_groups, n_layers, t, t))
    if causal:
        upper = np.triu(np.ones((t, t), bool), 1)
        mean[..., upper] = np.nan
        groups[..., upper] = np.nan
    return xr.Dataset(
        {
            "score_mean": (("layer", "head", "query", "key"), mean.astype(np.float32)),
            "score_group_mean": (("group", "layer", "query", "key"), groups.astype(np.float32)),
        },
        attrs={"n_sequences": 40},
    )


@pytest.mark.parametrize("causal", [True, False])
def test_normalize_scores_head_average_equals_normalized_head_average(causal):
    ds = _score_store(np.random.default_rng(0), causal=causal)
    out = stages_normalize.normalize_scores(ds)
    head_avg = np.asarray(ds["score_mean"].values, dtype=np.float64).mean(axis=1)
    # linearity (paper 1 §5): normalizing the head mean == mean of the normalized heads
    np.testing.assert_allclose(
        out["score_normalized_mean"].values, normalize(head_avg), atol=1e-6, equal_nan=True
    )
    np.testing.assert_allclose(
        out["score_mean_head_avg"].values, head_avg, atol=1e-6, equal_nan=True
    )
    nrm = out["score_normalized"].values
    assert nrm.dtype == np.float32
    # masked cells stay NaN, never +-inf; every offset band has mean 0 after normalization
    assert not np.isinf(nrm).any()
    assert np.isnan(nrm).any() == causal
    t = nrm.shape[-1]
    for k in range(-(t - 1), t):
        band = np.diagonal(nrm, offset=-k, axis1=-2, axis2=-1)
        if causal and k < 0:
            assert np.isnan(band).all()
        else:
            np.testing.assert_allclose(band.mean(axis=-1), 0.0, atol=1e-6)


def test_llm_index_table_matches_index_ci_per_layer():
    ds = _score_store(np.random.default_rng(1))
    table = P1_tables.llm_index_table({("m", "d", "causal"): ds}, n_boot=200, seed=3)
    g = np.asarray(ds["score_group_mean"].values, dtype=np.float64)
    # key 0 out: the index of the map of queries and keys >= 1 (paper 1 §7)
    ci = index_ci(np.ascontiguousarray(g[..., 1:, 1:]), n_boot=200, seed=3)
    assert list(table["layer"]) == [1, 2]
    np.testing.assert_allclose(table["index"], ci.estimate)
    np.testing.assert_allclose(table["noise_floor"], ci.noise_floor)
    np.testing.assert_allclose(table["index_debiased"], ci.debiased)
    np.testing.assert_allclose(table["ci_lo"], ci.lo)
    np.testing.assert_allclose(table["ci_hi"], ci.hi)
    with_key0 = index_ci(g, n_boot=200, seed=3)  # the paper's normalization, beside it
    np.testing.assert_allclose(table["index_with_key0"], with_key0.estimate)
    np.testing.assert_allclose(table["noise_floor_with_key0"], with_key0.noise_floor)
    assert not np.allclose(table["index"], table["index_with_key0"])


def test_llm_index_table_adds_share_band_and_the_twin_contrast():
    from causalpos.paper1.nonrelative import band_ci, paired, share_intervals

    rng = np.random.default_rng(2)
    ds, twin = _score_store(rng, t=9, n_groups=5), _score_store(rng, t=9, n_groups=5)
    for d in (ds, twin):
        d["score_group_mean"] = d["score_group_mean"] + 3.0 * np.arange(9)[None, None, :, None]
    stores = {("m", "d", "causal"): ds, ("m-random", "d", "causal"): twin}
    table = P1_tables.llm_index_table(stores, n_boot=50, first_keys=2, twins={"m": "m-random"})
    g = np.asarray(ds["score_group_mean"].values, dtype=np.float64)
    gt = np.asarray(twin["score_group_mean"].values, dtype=np.float64)
    sub, sub_t = (np.ascontiguousarray(x[..., 1:, 1:]) for x in (g, gt))  # key 0 out
    sh, band = share_intervals(sub)[0], band_ci(g, 2)
    m = table[table.model == "m"]
    np.testing.assert_allclose(m["share"], sh.estimate)
    np.testing.assert_allclose(m["share_lo"], sh.lo)
    np.testing.assert_allclose(m["band"], band.estimate)
    np.testing.assert_allclose(m["band_with_sink"], band_ci(g, 2, exclude_sink=False).estimate)
    assert (m["band_keys"] == 2).all()
    assert np.isnan(m["share_minus_l1"].iloc[0])
    assert m["share_minus_l1"].iloc[1] == pytest.approx(sh.estimate[1] - sh.estimate[0])
    assert (m["twin"] == "m-random").all()
    pooled, pooled_twin = share_intervals(sub)[1], share_intervals(sub_t)[1]
    np.testing.assert_allclose(m["share_pooled"], float(pooled.estimate))
    d = paired(pooled, pooled_twin)
    np.testing.assert_allclose(m["share_pooled_minus_twin"], float(d[0]))
    np.testing.assert_allclose(m["share_pooled_minus_twin_lo"], float(d[1]))
    np.testing.assert_allclose(m["share_minus_twin_hi"], paired(sh, share_intervals(sub_t)[0])[2])
    assert table[table.model == "m-random"]["twin"].isna().all()
    fewer = _score_store(rng, t=9, n_groups=4)
    with pytest.raises(ValueError, match="same groups"):
        P1_tables.llm_index_table(
            {("m", "d", "causal"): ds, ("m-random", "d", "causal"): fewer},
            n_boot=50,
            twins={"m": "m-random"},
        )


def test_build_reducers_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown reducer"):
        stages_extract.build_reducers(["moments", "nope"], n_sequences=4, n_groups=2)


def test_bytes_per_sequence_and_auto_batch_size():
    class Cfg:
        num_attention_heads = 32
        hidden_size = 4096
        intermediate_size = 14336

    # Llama-3.1-8B at T = 1024 in bf16: the float32 score buffers dominate (4 x 32 x 1024² x 4 B)
    per_seq = stages_device.bytes_per_sequence(Cfg, 1024, 2)
    assert per_seq == 4 * 32 * 1024 * 1024 * 4 + 6 * 1024 * (4096 + 14336) * 2
    # one 80 GB card holding 16 GB of bf16 weights leaves room for a batch of ~90 such sequences
    free = 80e9 - 16e9
    assert 60 <= int(free * 0.8) // per_seq <= 120

    import torch

    model = torch.nn.Linear(2, 2)
    model.config = Cfg
    batch, est = stages_device.auto_batch_size(model, 64, fraction=0.5, cap=7)
    assert 1 <= batch <= 7 and est["batch_size"] == batch and est["bytes_per_sequence"] > 0


def test_reducer_memory_is_the_state_the_reducers_allocate(monkeypatch):
    """The closed form against the reducers' own state after one batch (CPU), and the paper's
    Llama-3.1-8B x 1,024 case: moments 16 GiB + a map buffer, 20 group maps 5 GiB."""
    import types

    import torch

    from causalpos.capture.reducers import (
        WORK_CELLS,
        WORK_CELLS_CUDA,
        GroupMeans,
        ScoreMoments,
        group_labels,
        work_cells,
    )
    from causalpos.paper2.extraction.reducers import LeakageReducer

    class Cfg:
        num_hidden_layers = 32
        num_attention_heads = 32

    m = stages_extract.reducer_memory(Cfg, 1024, ["moments", "groups"], n_groups=20)
    assert m == (2 * 32 + 1) * 32 * 2**20 * 8 + 20 * 32 * 2**20 * 8
    # leakage: the summed logits (layer, head, T, T) and log Z (layer, head, T) plus one chunk's
    # temporaries; a known batch bounds the chunk
    cell = 32 * 256 * 256
    sums = 32 * (cell + 32 * 256) * 8
    full = stages_extract.reducer_memory(Cfg, 256, ["leakage", "sink"], n_groups=1)
    assert full == sums + 128 * (WORK_CELLS // cell) * cell
    # on an 80 GB card: one cell per KiB of the card
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(total_memory=80e9)
    )
    work_cells.cache_clear()
    try:
        assert work_cells("cuda") == int(80e9 // 1024) < WORK_CELLS_CUDA
        gpu = stages_extract.reducer_memory(
            Cfg, 256, ["leakage", "sink"], n_groups=1, device="cuda"
        )
    finally:
        work_cells.cache_clear()
    assert gpu == sums + 128 * (int(80e9 // 1024) // cell) * cell
    two = stages_extract.reducer_memory(Cfg, 256, ["leakage"], n_groups=1, batch_size=2)
    assert two == sums + 128 * 2 * cell
    no_maps = stages_extract.reducer_memory(
        Cfg, 256, ["leakage"], n_groups=1, leakage={"mean_maps": False}, batch_size=2
    )
    assert no_maps == 128 * 2 * cell

    class Small:
        num_hidden_layers = 2
        num_attention_heads = 3

    t, b, g = 6, 4, 2
    scores = torch.randn(b, 3, t, t)
    reducers = [
        ScoreMoments(),
        GroupMeans(group_labels(b, n_groups=g)),
        LeakageReducer(fits=("saturated+query",), windows=("all",)),
    ]
    for layer in range(2):
        for r in reducers:
            r.update(layer, scores, np.arange(b))
    state = sum(x.numel() * 8 for x in (*reducers[0]._s1.values(), *reducers[0]._s2.values()))
    state += sum(x.numel() * 8 for x in reducers[1]._sum.values())
    # leakage: per layer the summed logits (head, T, T) and the summed log Z (head, T); the
    # summed log-attention map is formed from both in result()
    assert [tuple(x.shape) for x in reducers[2]._map_sum.values()] == [(3, t, t)] * 2
    assert [tuple(x.shape) for x in reducers[2]._lz_sum.values()] == [(3, t)] * 2
    state += sum(x.numel() * 8 for x in reducers[2]._map_sum.values())
    state += sum(x.numel() * 8 for x in reducers[2]._lz_sum.values())
    expected = stages_extract.reducer_memory(
        Small, t, ["moments", "groups", "leakage"], n_groups=g, batch_size=b
    )
    # the formula adds one moments map buffer and the leakage chunk's temporaries to the state
    assert expected - state == 3 * t * t * 8 + 128 * b * 3 * t * t


def test_auto_batch_size_sets_the_reducers_memory_aside(monkeypatch):
    import torch

    from causalpos.models.device import BatchMemoryError

    class Cfg:
        num_attention_heads = 4
        hidden_size = 64
        intermediate_size = 128

    model = torch.nn.Linear(2, 2)
    model.config = Cfg
    per_seq = stages_device.bytes_per_sequence(Cfg, 64, 4)
    # a fixed free memory (room for 40 sequences at fraction 1e-4): the machine's own moves
    # with other processes, between calls and from run to run
    free = 40 * per_seq * 10_000
    import psutil

    vm = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: vm._replace(available=free))
    b0, e0 = stages_device.auto_batch_size(model, 64, fraction=1e-4, cap=10**9)
    reserved = int(free * 1e-4) - 3 * per_seq  # room for ~3 sequences beside the reducers
    b1, e1 = stages_device.auto_batch_size(model, 64, fraction=1e-4, cap=10**9, reserved=reserved)
    assert e1["reserved_bytes"] == reserved and b1 < b0 and 1 <= b1 <= 3
    with pytest.raises(BatchMemoryError, match="not even one sequence"):
        stages_device.auto_batch_size(model, 64, fraction=1e-4, reserved=int(free * 1e-4))


def _files(store) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_one_shard_extracted_into_final_stores_is_what_the_merge_of_its_shards_writes(tmp_path):
    """Rule ``extract_scores`` (a dataset of one shard) writes the pair's final stores itself,
    with no shard and no merge job. Every file of each store is byte for byte what
    ``extract_scores_shard`` + ``merge_scores`` write for the same sequences (the manifest equal
    as JSON: it lists the dimension sizes in another order), and a merge of two shards of the
    same sequences stores exactly the same values and attributes but ``n_shards``. Every reducer
    runs (maps, group means, paper 2's per-sequence metrics and sink, position 0's states)."""
    import json

    from causalpos.io.store import open_dataset, write_dataset
    from causalpos.models.load import build_model_dir
    from causalpos.stages.merge import merge_scores

    n, t = 6, 12
    model = build_model_dir(
        "tiny",
        {"source": "random_init", "architecture": "llama", "seed": 0},
        tmp_path / "models" / "tiny",
    )
    tokens = np.random.default_rng(0).integers(3, 200, size=(n, t))
    data = write_dataset(
        xr.Dataset(
            {"tokens": (("sequence", "position"), tokens)},
            coords={"sequence": np.arange(n), "position": np.arange(t)},
            attrs={"corpus": "{}", "mode": "chunks", "bos_id": 1, "prepend_bos": True},
        ),
        tmp_path / "data.zarr",
    )
    every = ["moments", "groups", "leakage", "sink"]
    leak = {"fits": ["saturated+query"], "windows": ["all"], "expected_stats": ["all"]}
    variants = {
        "causal": {"reducers": [*every, "position0"], "leakage": leak},
        "bidirectional": {"reducers": every, "leakage": leak},
    }
    kw = dict(variants=variants, attrs={"model_name": "tiny"})
    settings = ExtractSettings(batch_size=4, n_groups=2, seed=0)

    def extract(out, start, stop, final=False):
        stages_extract.extract_scores(
            model, data, out, bounds=(start, stop), settings=settings, final=final, **kw
        )
        return out

    final = extract(tmp_path / "final", 0, n, final=True)
    merged_one = tmp_path / "merged1"
    merge_scores([extract(tmp_path / "s", 0, n)], merged_one, variants=list(variants))
    merged_two = tmp_path / "merged2"
    shards = [extract(tmp_path / "s0", 0, 4), extract(tmp_path / "s1", 4, n)]
    merge_scores(shards, merged_two, variants=list(variants))
    manifest = "causalpos_manifest/zarr.json"
    for variant in variants:
        a, b = _files(final / f"{variant}.zarr"), _files(merged_one / f"{variant}.zarr")
        assert a.keys() == b.keys() and len(a) > 20, variant
        assert [f for f in a if f != manifest and a[f] != b[f]] == [], variant
        assert json.loads(a[manifest]) == json.loads(b[manifest])
        one = open_dataset(final / f"{variant}.zarr")
        two = open_dataset(merged_two / f"{variant}.zarr")
        assert one.attrs["n_shards"] == 1 and two.attrs["n_shards"] == 2
        assert one.attrs["n_sequences"] == two.attrs["n_sequences"] == n
        assert "shard" not in one.attrs and one["score_mean"].dtype == np.float32
        xr.testing.assert_identical(one.drop_attrs(deep=False), two.drop_attrs(deep=False))
        assert {**one.attrs, "n_shards": 2} == two.attrs


def test_final_stores_need_every_sequence_of_the_dataset(tmp_path):
    from causalpos.io.store import write_dataset

    data = write_dataset(
        xr.Dataset({"tokens": (("sequence", "position"), np.ones((6, 4), int))}),
        tmp_path / "data.zarr",
    )
    with pytest.raises(ValueError, match=r"need every sequence .* got \[0, 4\).*merge_scores"):
        stages_extract.extract_scores(tmp_path / "no-model", data, tmp_path / "out", bounds=(0, 4), variants={"causal": {"reducers": ["moments"]}}, settings=ExtractSettings(batch_size=2, n_groups=2, seed=0), final=True)  # fmt: skip


def test_a_stages_progress_in_a_file_is_plain_lines(tmp_path):
    """The simulation's progress bar, its stderr a file (a job's log, ``2> file``): a line when
    the loop starts and one with the final count, no ``\\r`` frames; the store is written."""
    import contextlib

    from causalpos.paper1.simulate import DEFAULT_CHUNK
    from causalpos.stages.simulate import simulate

    setting = {"alpha": 0.2, "n_samples": 3 * DEFAULT_CHUNK, "seq_len": 6, "dim": 8}
    setting |= {"n_layers": 2, "n_groups": 3}
    log = tmp_path / "job.log"
    with open(log, "w") as fh, contextlib.redirect_stderr(fh):
        ds = simulate(tmp_path / "s.zarr", setting, name="s", seed=0)
    text = log.read_bytes().decode()  # as written: read_text would turn each \r into \n
    assert "\r" not in text
    counts = [line.split(" [")[0] for line in text.splitlines() if line.startswith("simulate:")]
    assert counts[0] == "simulate: 0/3 (0%)" and counts[-1] == "simulate: 3/3 (100%)"
    assert ds["score"].shape == (2, 6, 6) and (tmp_path / "s.zarr").is_dir()
