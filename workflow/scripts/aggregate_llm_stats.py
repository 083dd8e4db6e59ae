"""Snakemake entry point of rule ``aggregate_llm_stats``: the non-relativeness index of every (model, dataset, variant)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.stats import aggregate_llm_stats  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    aggregate_llm_stats(
        dict(zip(p.labels, p.stores)),
        snakemake.output[0],
        **dict(p.stats),
    )
