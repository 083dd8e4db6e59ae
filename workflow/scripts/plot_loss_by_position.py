"""Snakemake entry point of rule ``plot_loss_by_position``: loss by position beyond the training context."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.plot_training import plot_loss_by_position  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    plot_loss_by_position(
        snakemake.input[0],
        list(snakemake.output),
        smooth=snakemake.params.smooth,
        names=dict(snakemake.params.names),
    )
