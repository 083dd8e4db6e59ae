"""Snakemake entry point of rule ``compare_trained``: the trained variants vs their untrained twins."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.compare import compare_trained  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    compare_trained(
        dict(zip(p.variants, p.stores["trained"])),
        dict(zip(p.twins, p.stores["init"])),
        snakemake.output.index,
        snakemake.output.comparison,
        leakage=dict(zip(p.leakage, snakemake.input.leakage)),
        leakage_init=dict(zip(p.leakage_init, snakemake.input.leakage_init)),
        lengthgen=snakemake.input.lengthgen,
        stats=dict(p.stats),
    )
