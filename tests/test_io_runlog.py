"""A job's run log and its process settings (causalpos.io.runlog): logged bounds the OpenBLAS
pools already loaded to the job's threads (causalpos.io.threads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from blas_pools import POOLS

SRC = Path(__file__).resolve().parents[1] / "src"

# numpy (and its OpenBLAS) loaded with a pool of two threads before the job's block starts, as a
# script that imports its stage first does; the pool's size read through OpenBLAS's own getter.
_CHILD = (
    POOLS
    + r"""
import ctypes, json, re
import numpy
from causalpos.io import runlog

before = pools()
with runlog.logged(None, 1):
    inside = pools()
print(json.dumps({"before": before, "inside": inside}))
"""
)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="finds libraries in /proc")
def test_logged_sets_an_openblas_loaded_before_it_to_the_jobs_threads():
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if not got["before"]:
        pytest.skip("numpy's BLAS is not an OpenBLAS with a thread getter")
    assert set(got["before"].values()) == {2}  # what the job would keep without the bound
    assert got["inside"] == dict.fromkeys(got["before"], 1)
