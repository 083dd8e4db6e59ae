"""A damaged shard of a finished smoke run (issue 13): found, refused by the merge, rebuilt.

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
from wfutil import SMOKE, snakemake

pytestmark = pytest.mark.slow


def test_a_chunk_lost_from_a_finished_shard_fails_the_merge_naming_the_shard(
    smoke_pipeline, tmp_path, capsys
):
    """Issue 13. Snakemake cannot see inside a finished directory() output: a chunk deleted from
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
