"""Snakemake entry point: paper 2 leakage by layer per component (one panel per model / dataset)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.paper2 import leakage_by_layer  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    summaries = {label: open_dataset(p) for label, p in zip(snakemake.params.labels, snakemake.input)}
    leakage_by_layer(summaries, list(snakemake.output))
