"""Snakemake entry point of rule ``plot_loss_curves``: training curves of the variants trained here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.plot_training import plot_loss_curves  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    plot_loss_curves(
        list(snakemake.input),
        list(snakemake.output),
        variants=list(snakemake.params.variants),
        names=dict(snakemake.params.names),
        heldout=list(snakemake.params.heldout),
    )
