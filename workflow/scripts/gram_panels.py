"""Snakemake entry point: paper 1 Fig. 3 panels and Fig. 8 scores of one model on held-out text."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.gram import gram_store_from_corpus  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import write_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    ds = gram_store_from_corpus(
        snakemake.input.model,
        snakemake.params.corpus,
        seq_len=snakemake.params.seq_len,
        n_sequences=snakemake.params.n_sequences,
        seed=snakemake.params.seed,
        mode="first",
        batch_size=snakemake.config["train"]["gram"]["batch_size"],
        device=snakemake.config["device"],
        dtype=snakemake.params.dtype,
        attrs={"model": snakemake.wildcards.model, "code_fingerprint": snakemake.params.code},
    )
    print(f"layer-1 recomputation check: max relative error {ds.attrs['x1_max_rel_error']:.3g}")
    write_dataset(ds, snakemake.output[0])
