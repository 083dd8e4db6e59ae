"""Snakemake entry point of rule ``gram_panels``: paper 1 Figs. 3 and 8 data of one model."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.gram import SequenceSample, gram_panels  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    gram_panels(
        snakemake.input.model,
        snakemake.output[0],
        SequenceSample(
            corpus=dict(p.corpus) if p.corpus else None,
            seq_len=p.seq_len,
            n_sequences=p.n_sequences,
            mode="first",
            seed=p.seed,
        ),
        batch_size=p.run.gram_batch_size,
        device=p.run.device,
        dtype=p.dtype,
        attrs={"model": snakemake.wildcards.model, "code_fingerprint": p.code},
        data_store=snakemake.input.get("data"),
    )
