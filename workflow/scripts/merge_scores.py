"""Snakemake entry point: merge the shards of one (model, dataset, variant) exactly."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.stages import merge_score_shards  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    merge_score_shards(list(snakemake.input), snakemake.output[0])
