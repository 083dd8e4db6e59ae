"""Snakemake entry point of rule ``plot_simulation``: every simulation figure."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.plot_paper1 import plot_simulation  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    plot_simulation(dict(snakemake.params.figures))
