"""Snakemake entry point of rule ``sample_sequences``: token sequences of one dataset with one tokenizer."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.data import sample_sequences  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    sample_sequences(
        snakemake.input.tokenizer,
        dict(snakemake.params.spec),
        snakemake.output[0],
        seed=snakemake.params.seed,
        name=snakemake.wildcards.dataset,
        peers=list(snakemake.input.get("peers", [])),
        corpus_sha256=dict(snakemake.params.sources),
    )
