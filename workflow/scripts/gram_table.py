"""Snakemake entry point of rule ``gram_table``: Fig. 3 (f)/(i)'s nearby-keys index of every
Gram store, with CIs, as one table."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.gram_table import gram_table  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    gram_table(
        dict(zip(snakemake.params.models, snakemake.input.stores)),
        snakemake.output[0],
        seed=snakemake.params.seed,
    )
