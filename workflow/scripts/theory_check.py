"""Snakemake entry point of rule ``theory_check``: closed form vs exact Gram vs simulation."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.theory import theory_check  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    theory_check(
        list(snakemake.input), snakemake.output[0], n_positions=snakemake.params.n_positions
    )
