"""Snakemake entry point of rule ``position0``: the position-0 residual stream, sinks and probes of every (model, dataset) of paper 2."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.position0 import position0  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    position0(dict(p.pairs), {**dict(p.settings), "seed": p.seed}, code_fingerprint=p.code)
