"""Snakemake entry point: token sequences of one dataset for one tokenizer."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.stages import sample_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    sample_dataset(
        snakemake.input.tokenizer, dict(snakemake.params.spec), snakemake.output[0], seed=snakemake.params.seed
    )
