"""Shards of a finished smoke run: a damaged one found, refused by the merge, rebuilt;
the same run with one shard per dataset extracts into the final stores, no merge.

In the worker's own copy of the session's smoke run (tests/conftest.py), copied again here so the
copy the other workflow tests read stays as it is. A module of its own so it can run on another
worker than the rest of the smoke-run tests.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import xarray as xr
import yaml

from tests.wfutil import SMOKE, planned_jobs, rule_counts, snakemake

pytestmark = pytest.mark.slow


def test_a_chunk_lost_from_a_finished_shard_fails_the_merge_naming_the_shard(
    smoke_pipeline, tmp_path, capsys
):
    """Snakemake cannot see inside a finished directory() output: a chunk deleted from
    a shard store used to merge into all-NaN maps and a blank figure, every job exiting 0. Now
    `causalpos verify` lists the store, a forced merge fails naming the shard, and the rebuild
    command the error prints restores it. In a copy of the finished run, so the shared one stays
    as it is."""
    from causalpos.cli import main

    assert (
        main(["verify", str(smoke_pipeline / "results")]) == 0
    )  # every store of a real run verifies
    assert "0 damaged" in capsys.readouterr().out
    work = tmp_path / "copy"
    shutil.copytree(smoke_pipeline, work, symlinks=True)
    # shard directories are temporary: the run removed them after the merges; rebuild and keep
    shards = [f"results/shards/tiny-random/kjv-first24/shard-000{k}" for k in (0, 1)]
    assert not any((work / s).exists() for s in shards)
    snakemake(work, "--notemp", "--force", *shards, "--configfile", SMOKE, "--cores", "2")
    shard = f"{shards[0]}/causal.zarr"
    merged_dir = "results/scores/tiny-random/kjv-first24"  # the pair's merge job: every variant
    merged = f"{merged_dir}/causal.zarr"
    chunk = next(p for p in sorted((work / shard / "score_mean" / "c").rglob("*")) if p.is_file())
    chunk.unlink()
    assert main(["verify", str(work / "results")]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED {work / shard}" in out and "of array 'score_mean'" in out

    # the target before --forcerun, which takes every word up to the next option as a rule name
    forced = (merged_dir, "--forcerun", "merge_scores", "--configfile", SMOKE, "--cores", "1")
    proc = snakemake(work, *forced, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-3000:]
    assert re.search(r"^merge_scores\s+1$", log, re.M) and re.search(r"^total\s+1$", log, re.M)
    assert f"StoreError: damaged store {shard}" in log, log[-3000:]
    # the job writing the directory, with the config file the run used
    assert f"snakemake --force {shards[0]} --configfile {SMOKE} --cores 1" in log
    assert not (work / merged).exists()  # nothing bad was written

    # the rebuild command the message gives, then the merge goes through
    snakemake(work, "--force", shards[0], "--configfile", SMOKE, "--cores", "2")
    snakemake(work, merged_dir, "--configfile", SMOKE, "--cores", "2")
    assert main(["verify", str(work / "results")]) == 0
    restored = xr.open_zarr(work / merged, consolidated=False)["score_mean"].values
    original = xr.open_zarr(smoke_pipeline / merged, consolidated=False)["score_mean"].values
    np.testing.assert_allclose(restored, original, rtol=1e-6, atol=1e-6)


def test_one_shard_per_dataset_writes_the_final_stores_without_a_merge(smoke_pipeline, tmp_path):
    """With ``extract.shard_size`` holding a whole dataset, one ``extract_scores`` job per
    pair writes the pair's final stores: the DAG has no shard job and no merge job. Changing the
    smoke run's shard count (two shards per dataset -> one) reruns every pair's extraction as
    that job, and what reads its stores, nothing upstream; the store it writes holds exactly
    the values and attributes of the two-shard merge but ``n_shards``."""
    work = tmp_path / "copy"
    shutil.copytree(smoke_pipeline, work, symlinks=True)
    cfg = yaml.safe_load((work / SMOKE).read_text())
    dataset = cfg["datasets"]["kjv-first24"]
    assert cfg["extract"]["shard_size"] < dataset["n_sequences"]  # the run merged two shards
    cfg["extract"]["shard_size"] = dataset["n_sequences"]
    one = tmp_path / "one-shard.yaml"
    one.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(work, "--configfile", str(one))
    counts = rule_counts(jobs)
    pairs = sorted(
        p.relative_to(work / "results" / "scores") for p in work.glob("results/scores/*/*")
    )
    assert len(pairs) == 5 and {"extract_scores_shard", "merge_scores"}.isdisjoint(counts)
    assert sorted(w for r, w in jobs if r == "extract_scores") == sorted(
        f"model={p.parts[0]}, dataset={p.parts[1]}" for p in pairs
    )
    upstream = {"prepare_model", "train_tokenizer", "train_model", "init_twin", "sample_sequences"}
    assert upstream.isdisjoint(counts) and counts["leakage"] >= 1, counts

    # one pair through the rule: the final stores, equal to the two-shard merge's
    pair = "results/scores/tiny-random/kjv-first24"
    snakemake(work, pair, "--configfile", str(one), "--cores", "2")
    assert not list(work.glob("results/shards/tiny-random/*/shard-*"))  # no shard written
    for store in sorted((smoke_pipeline / pair).glob("*.zarr")):
        merged = xr.open_zarr(store, consolidated=False)
        direct = xr.open_zarr(work / pair / store.name, consolidated=False)
        assert (merged.attrs["n_shards"], direct.attrs["n_shards"]) == (2, 1), store.name
        # their provenance records name their own config files; the settings are the same
        records = [ds.attrs.pop("causalpos_provenance") for ds in (merged, direct)]
        assert records[0]["params_sha256"] == records[1]["params_sha256"], store.name
        assert {**direct.attrs, "n_shards": 2} == merged.attrs, store.name
        xr.testing.assert_identical(direct.drop_attrs(deep=False), merged.drop_attrs(deep=False))
