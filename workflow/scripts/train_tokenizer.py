"""Snakemake entry point: byte-level BPE tokenizer on the training side of the corpus (held-out books excluded)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.train import tokenizer_from_corpus  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    tokenizer_from_corpus(
        snakemake.params.corpus,
        snakemake.params.heldout,
        snakemake.params.vocab_size,
        snakemake.output[0],
        seed=snakemake.params.seed,
        min_frequency=snakemake.params.min_frequency,
    )
