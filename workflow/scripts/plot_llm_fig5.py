"""Snakemake entry point: paper 1 Fig. 5 (models x first layers, diagonal-normalized)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.paper1 import plot_llm_fig5  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    plot_llm_fig5(
        [open_dataset(p) for p in snakemake.input],
        list(snakemake.params.labels),
        list(snakemake.output),
        n_layers=snakemake.params.n_layers,
    )
