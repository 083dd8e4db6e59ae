"""Snakemake entry point: next-token loss by position beyond the training length, every variant."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.training import plot_loss_by_position  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    plot_loss_by_position(
        open_dataset(snakemake.input[0]), list(snakemake.output), smooth=snakemake.params.smooth
    )
