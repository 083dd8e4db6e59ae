"""Snakemake entry point of rule ``init_twin``: the untrained twin of a model trained here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.twin import init_twin  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    init_twin(snakemake.input[0], snakemake.output[0])
