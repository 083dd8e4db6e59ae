"""Snakemake entry point: paper 2 position-0 cross-prompt spread by layer (per model / dataset and condition)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.paper2 import position0_conditions  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    stores = {label: open_dataset(p) for label, p in zip(snakemake.params.labels, snakemake.input)}
    position0_conditions(stores, list(snakemake.output))
