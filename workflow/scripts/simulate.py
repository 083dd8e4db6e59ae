"""Snakemake entry point: one parameter-free decoder simulation (paper 1 §2, §4)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.simulate import simulate  # noqa: E402
from causalpos.store import write_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    ds = simulate(**snakemake.params.setting, seed=snakemake.params.seed, progress=True)
    ds.attrs["setting"] = snakemake.wildcards.setting
    ds.attrs["code_fingerprint"] = snakemake.params.code
    write_dataset(ds, snakemake.output[0])
