"""Snakemake entry point: diagonal normalization (paper 1 §5) of a merged score store."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.stages import diagonal_normalize_store  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    diagonal_normalize_store(snakemake.input[0], snakemake.output[0])
