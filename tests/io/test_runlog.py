"""A job's run log and its process settings (causalpos.io.runlog): logged bounds the OpenBLAS
pools already loaded to the job's threads (causalpos.io.threads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.io.blas_pools import POOLS

SRC = Path(__file__).resolve().parents[2] / "src"

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


def test_a_jobs_log_holds_progress_as_lines_and_ends_with_its_done_line(tmp_path):
    """In a job's log (logged), the library's bars and other libraries' (tqdm's own, as
    transformers draws them) are lines: no ``\\r`` frame, each bar's first and last count, and
    the last line is still the job's done line."""
    from tqdm import tqdm

    from causalpos.io.joblog import parse_done_line
    from causalpos.io.progress import progress_bar
    from causalpos.io.runlog import logged

    log = tmp_path / "job.log"
    with logged(log):
        print("start")
        for _ in progress_bar(range(4), desc="ours", unit="seq"):
            pass
        for _ in tqdm(range(3), desc="Loading weights", mininterval=0):  # to sys.stderr
            pass
        bar = tqdm(total=2, desc="unfinished", mininterval=0)  # never closed: its frame is
        bar.update(1)  # the last line before the done line
    text = log.read_bytes().decode()  # as written: read_text would turn each \r into \n
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "start"
    assert [line.split(" [")[0] for line in lines[1:3]] == ["ours: 0/4 (0%)", "ours: 4/4 (100%)"]
    assert lines[3].startswith("Loading weights:   0%") and " 0/3 " in lines[3]
    assert lines[4].startswith("Loading weights: 100%") and " 3/3 " in lines[4]
    assert lines[5].startswith("unfinished:   0%") and lines[6].startswith("unfinished:  50%")
    assert len(lines) == 8 and parse_done_line(lines[7]) is not None


# A job's script as the workflow's are: the collector held off from before the stage's imports
# until the job's block starts; the collector's state printed at each step.
_START_UP = r"""
import gc, json
from causalpos.io import runlog

runs = []
gc.callbacks.append(lambda phase, info: runs.append(phase) if phase == "start" else None)
seen = [gc.isenabled()]
runlog.collector_off_until_logged()
seen.append(gc.isenabled())
kept = [[] for _ in range(5_000)]  # a stage's imports: objects enough for 7 collections
seen.append(runs == [])
with runlog.logged(None, 1):
    seen.append([gc.isenabled(), list(gc.get_threshold()) == list(runlog.JOB_GC_THRESHOLDS)])
seen.append(gc.isenabled())
gc.disable()  # a collector the caller turned off stays off
runlog.collector_off_until_logged()
with runlog.logged(None, 1):
    seen.append(gc.isenabled())
print(json.dumps(seen))
"""


def test_the_collector_is_off_from_a_scripts_start_up_until_its_block():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", _START_UP], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [True, False, True, [True, True], True, False]
