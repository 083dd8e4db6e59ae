"""Snakemake entry point: training and held-out loss curves of the trained variants."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.training import plot_loss_curves  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.train import read_loss_curve, read_training_summary  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    names = snakemake.params.variants
    plot_loss_curves(
        {n: read_loss_curve(p) for n, p in zip(names, snakemake.input)},
        list(snakemake.output),
        unigram_entropy={n: read_training_summary(p)["unigram_entropy"] for n, p in zip(names, snakemake.input)},
        title="One-factor variants trained here: next-token loss",
    )
