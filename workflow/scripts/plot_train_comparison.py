"""Snakemake entry point: figures of the trained-model comparisons (index, summary, maps)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

import pandas as pd  # noqa: E402

from causalpos.figures.training import plot_comparison, plot_index_vs_init, plot_variant_maps  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    p = snakemake.params
    index = pd.read_csv(snakemake.input.index)
    plot_index_vs_init(index, list(snakemake.output.index))
    plot_comparison(pd.read_csv(snakemake.input.comparison), list(snakemake.output.comparison))
    trained = {v: open_dataset(x) for v, x in zip(p.variants, snakemake.input.trained)}
    init = {v: open_dataset(x) for v, x in zip(p.twins, snakemake.input.init)}
    plot_variant_maps(trained, init, list(snakemake.output.maps), layer=p.map_layer)
