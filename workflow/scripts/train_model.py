"""Snakemake entry point of rule ``train_model``: one one-factor variant trained here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.train import train_model  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    # Where it runs and how often it checkpoints do not change the result: the untracked `run`
    # param, so changing them reruns nothing. Checkpoints live beside the output (Snakemake
    # deletes a failed job's directory()); a rerun with other settings or code starts over.
    train_model(
        snakemake.params.settings,
        corpus=snakemake.params.corpus,
        heldout_sources=snakemake.params.heldout,
        tokenizer_dir=snakemake.input.tokenizer,
        out_dir=snakemake.output[0],
        device=snakemake.params.run.device,
        checkpoint_every=snakemake.params.run.checkpoint_every,
        on_mismatch="restart",
        provenance={"code": snakemake.params.code},
        keep_final_checkpoint=False,
        progress=True,
    )
