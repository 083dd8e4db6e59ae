"""Snakemake entry point of rule ``aggregate_leakage``: paper 2 tables across (model, dataset) pairs."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.paper2_tables import aggregate_leakage  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    pairs = [tuple(label.split("/")) for label in snakemake.params.labels]
    aggregate_leakage(
        dict(zip(pairs, snakemake.input.summaries)),
        dict(zip(pairs, snakemake.input.position0)),
        dict(snakemake.output.items()),
    )
