"""The SLURM test cluster as a fixture (tests/cluster/slurm.py): started once per session by
the worker that asks for it, stopped (by pid) at the session's end; skipped with the reason
where SLURM is not installed or the tests do not run as root."""

from __future__ import annotations

import sys

import pytest

from tests.cluster.slurm import SlurmCluster, skip_reason


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    print(f"SLURM test cluster up in {cluster.startup_s:.1f} s", file=sys.stderr)
    try:
        yield cluster
    finally:
        cluster.stop()
