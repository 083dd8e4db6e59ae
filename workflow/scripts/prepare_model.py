"""Snakemake entry point of rule ``prepare_model``: one configured model spec as an HF-format directory."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.models import prepare_model  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    prepare_model(
        snakemake.wildcards.model,
        dict(snakemake.params.spec),
        snakemake.output[0],
        dtype=snakemake.params.dtype,
        tokenizer_dir=snakemake.params.tokenizer_dir,
    )
