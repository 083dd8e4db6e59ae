"""Snakemake entry point: paper 1 Fig. 3 (Gram matrices through layer 1) and Fig. 8 (mean scores per layer) of one model."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.training import plot_gram_panels, plot_layer_scores  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    ds = open_dataset(snakemake.input[0])
    model, n = snakemake.wildcards.model, ds.attrs["n_samples"]
    plot_gram_panels(
        ds,
        list(snakemake.output.fig3),
        title=f"Paper 1 Fig. 3 on {model}: Gram matrices through layer 1 (mean over {n} held-out sequences)",
    )
    plot_layer_scores(
        ds,
        list(snakemake.output.fig8),
        title=f"Paper 1 Fig. 8 on {model}: mean pre-softmax scores (over {n} held-out sequences and heads)",
    )
