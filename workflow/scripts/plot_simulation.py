"""Snakemake entry point: one simulation figure (paper 1 Figs. 2, 4, 6, 7, 9, 10)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.paper1 import plot_simulation  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    spec = snakemake.params.spec
    plot_simulation(
        [open_dataset(p) for p in snakemake.input],
        spec["settings"],
        list(snakemake.output),
        normalized_row=spec["normalized_row"],
        title=f"Paper 1 {snakemake.wildcards.figure}: parameter-free decoder",
    )
