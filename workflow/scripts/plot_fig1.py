"""Snakemake entry point: paper 1 Fig. 1 (closed-form layer-2 scores, alpha = 0, n = 3)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.paper1 import plot_fig1  # noqa: E402
from causalpos.runlog import logged  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    plot_fig1(list(snakemake.output))
