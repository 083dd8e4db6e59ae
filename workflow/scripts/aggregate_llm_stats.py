"""Snakemake entry point: per-layer non-relativeness index of every extracted model, with CIs."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.stages import llm_index_table  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    stores = {tuple(label.split("/")): open_dataset(p) for label, p in zip(snakemake.params.labels, snakemake.input)}
    table = llm_index_table(
        stores, confidence=snakemake.params.confidence, n_boot=snakemake.params.n_bootstrap, seed=snakemake.params.seed
    )
    table.to_csv(snakemake.output[0], index=False)
    print(table.to_string())
