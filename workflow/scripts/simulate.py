"""Snakemake entry point of rule ``simulate``: one parameter-free simulation setting."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.simulate import simulate  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    simulate(
        snakemake.output[0],
        snakemake.params.setting,
        name=snakemake.wildcards.setting,
        seed=snakemake.params.seed,
        attrs={"code_fingerprint": snakemake.params.code},
    )
