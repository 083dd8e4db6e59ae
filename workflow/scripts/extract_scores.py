"""Snakemake entry point of rules ``extract_scores`` and ``extract_scores_shard``: pre-softmax scores of one shard of sequences under every variant a stage asks for, reduced to one store per variant (the pair's final stores where the shard is its only one)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.extract import ExtractSettings, extract_scores  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    extract_scores(
        snakemake.input.model,
        snakemake.input.data,
        snakemake.output[0],
        bounds=tuple(p.bounds),
        variants={v: dict(spec) for v, spec in dict(p.variants).items()},
        settings=ExtractSettings.from_params({**p.settings, "device": p.run.device}),
        final=p.final,
        attrs={
            "model_name": snakemake.wildcards.model,
            "dataset_name": snakemake.wildcards.dataset,
            "code_fingerprint": p.code,
        },
    )
