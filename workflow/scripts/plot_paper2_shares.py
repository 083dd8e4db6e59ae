"""Snakemake entry point: paper 2 residual-stream vs causal-mask shares per model / dataset and condition."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.paper2 import component_shares  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    summaries = {label: open_dataset(p) for label, p in zip(snakemake.params.labels, snakemake.input)}
    component_shares(summaries, list(snakemake.output))
