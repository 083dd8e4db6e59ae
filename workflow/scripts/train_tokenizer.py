"""Snakemake entry point of rule ``train_tokenizer``: the BPE tokenizer shared by the variants trained here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.train import train_tokenizer  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    train_tokenizer(
        p.corpus,
        p.heldout,
        p.vocab_size,
        snakemake.output[0],
        seed=p.seed,
        min_frequency=p.min_frequency,
    )
