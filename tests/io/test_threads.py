"""A job's thread bounds (causalpos.io.threads): the environment it sets and the OpenBLAS pools
already loaded, set to the job's threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.io.blas_pools import POOLS

SRC = Path(__file__).resolve().parents[2] / "src"

# Before numpy no OpenBLAS is loaded: nothing to set. numpy (and its OpenBLAS) then loads with a
# pool of two threads, as in a script that imports its stage before the job's block starts; each
# pool's size read through OpenBLAS's own getter after each bound (bound_threads to 1, then
# bound_loaded_blas back to 2).
_CHILD = (
    POOLS
    + r"""
import ctypes, json, os, re
from causalpos.io import threads

got = {"none_loaded": threads.bound_loaded_blas(1)}
import numpy
got["before"] = pools()
threads.bound_threads(1)
got["one"] = pools()
got["env"] = {v: os.environ[v] for v in threads._THREAD_VARS}
got["set"] = threads.bound_loaded_blas(2)
got["two"] = pools()
print(json.dumps(got))
"""
)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="finds libraries in /proc")
def test_bounds_set_the_openblas_pools_already_loaded_and_the_environment():
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "PYTHONPATH": str(SRC)}
    env.update(OMP_NUM_THREADS="5", MKL_NUM_THREADS="5")  # what the bound must replace
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["none_loaded"] == []  # no OpenBLAS in the process yet
    if not got["before"]:
        pytest.skip("numpy's BLAS is not an OpenBLAS with a thread getter")
    assert set(got["before"].values()) == {2}  # the pool the environment gave at load
    # bound_threads: the environment for libraries loaded later, the pools loaded now
    assert got["env"] == dict.fromkeys(
        ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"), "1"
    )
    assert got["one"] == dict.fromkeys(got["before"], 1)
    # bound_loaded_blas: every loaded OpenBLAS, each once, set and named
    assert got["set"] == sorted(got["before"])
    assert got["two"] == dict.fromkeys(got["before"], 2)
