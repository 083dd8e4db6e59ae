"""Snakemake entry point: closed form vs exact-Gram computation vs simulation (paper 1 §1)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402
from causalpos.theory import theory_table  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    sims = {}
    for path in snakemake.input:
        ds = open_dataset(path)
        sims[float(ds.attrs["alpha"])] = ds
    table = theory_table(sims, n=snakemake.params.n_positions)
    table.to_csv(snakemake.output[0], index=False)
    print(table.groupby("alpha")["abs_diff"].describe())
