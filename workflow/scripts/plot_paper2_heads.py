"""Snakemake entry point: paper 2 per-head leakage maps (causal and bidirectional) with BH-significant heads marked."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.paper2 import head_maps  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    head_maps(open_dataset(snakemake.input[0]), list(snakemake.output))
