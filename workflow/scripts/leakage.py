"""Snakemake entry point of rule ``leakage``: paper 2 leakage summary of one (model, dataset) over its variants' score stores."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.leakage import leakage  # noqa: E402

# numpy's large arrays (the Grams and their replicates) on small pages: io.runlog.numpy_small_pages
with logged(snakemake.log[0], snakemake.threads, huge_pages=False, exit_when_done=True):
    p = snakemake.params
    leakage(
        # the pair's score directory (extract_scores, or merge_scores over shards): one store a variant
        {v: f"{snakemake.input.scores}/{v}.zarr" for v in p.variants},
        snakemake.output.store,
        cost=snakemake.output.cost,
        settings=dict(p.summary),
        data_store=snakemake.input.data,
        strata=p.strata,
        attrs={
            "model": snakemake.wildcards.model,
            "dataset": snakemake.wildcards.dataset,
            "code_fingerprint": p.code,
            **dict(p.model_attrs),
        },
    )
