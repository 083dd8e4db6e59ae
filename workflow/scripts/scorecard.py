"""Snakemake entry point of rule ``scorecard``: the reproduction scorecard and the findings page."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.report import scorecard  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    scorecard(
        dict(snakemake.input.items()),
        snakemake.output.csv,
        snakemake.output.md,
        snakemake.output.findings,
        rehearsal=snakemake.params.rehearsal,
        materiality=snakemake.params.materiality,
    )
