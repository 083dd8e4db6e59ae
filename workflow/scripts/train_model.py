"""Snakemake entry point: train one one-factor variant from scratch (resumable) and save it in HF format."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.train import train_from_corpus  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    settings = dict(snakemake.params.settings)
    # Where it runs and how often it checkpoints do not change the result: read from the config,
    # not params, so changing them reruns nothing. Checkpoints live beside the output (Snakemake
    # deletes a failed job's directory()); a rerun with other settings or code starts over.
    train_from_corpus(
        settings.pop("variant"),
        corpus=snakemake.params.corpus,
        heldout_sources=snakemake.params.heldout,
        tokenizer_dir=snakemake.input.tokenizer,
        out_dir=snakemake.output[0],
        **settings,
        device=snakemake.config["device"],
        checkpoint_every=snakemake.config["train"]["checkpoint_every"],
        on_mismatch="restart",
        provenance={"code": snakemake.params.code},
        keep_final_checkpoint=False,
        progress=True,
    )
