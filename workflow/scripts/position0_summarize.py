"""Snakemake entry point: paper 2 position-0 trajectory, sink-head and content probes of one (model, dataset)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.position0 import position0_stage  # noqa: E402
from causalpos.runlog import logged  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    p = snakemake.params
    s = dict(p.settings)
    position0_stage(
        snakemake.input.model,
        snakemake.input.data,
        snakemake.output[0],
        conditions=list(s["conditions"]),
        sink_store=snakemake.input.sink,
        tau=s["tau"],
        n_folds=s["n_folds"],
        ridge=s["ridge"],
        n_perm=s["n_permutations"],
        batch_size=s["batch_size"],
        seed=p.seed,
        device=p.device,
        dtype=p.dtype,
        attrs={"model": snakemake.wildcards.model, "dataset": snakemake.wildcards.dataset, "code_fingerprint": p.code},
    )
