"""Snakemake entry point: loss by position of every trained variant beyond its training length."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.lengthgen import length_generalization_from_dirs, summary_table  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import write_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    ds = length_generalization_from_dirs(
        dict(zip(snakemake.params.variants, snakemake.input)),
        snakemake.params.corpus,
        length_factor=snakemake.params.length_factor,
        n_sequences=snakemake.params.n_sequences,
        seed=snakemake.params.seed,
        mode="chunks",
        batch_size=snakemake.config["train"]["lengthgen"]["batch_size"],
        n_bootstrap=snakemake.params.n_bootstrap,
        confidence=snakemake.params.confidence,
        device=snakemake.config["device"],
        dtype=snakemake.params.dtype,
    )
    ds.attrs["code_fingerprint"] = snakemake.params.code
    write_dataset(ds, snakemake.output.store)
    table = summary_table(ds)
    table.to_csv(snakemake.output.table, index=False)
    print(table.to_string())
