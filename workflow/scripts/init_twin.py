"""Snakemake entry point: the initial weights of a trained model, as its untrained twin."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.compare import prepare_init_twin  # noqa: E402
from causalpos.runlog import logged  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    prepare_init_twin(snakemake.input[0], snakemake.output[0])
