"""Snakemake entry point of rule ``merge_scores``: the exact merge of a (model, dataset)'s shard stores, one store per variant."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.merge import merge_scores  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    merge_scores(
        list(snakemake.input), snakemake.output[0], variants=list(snakemake.params.variants)
    )
