"""Snakemake entry point: paper 1 App. E (all layers of one model, raw and normalized)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.figures.paper1 import plot_llm_appendix  # noqa: E402
from causalpos.runlog import logged  # noqa: E402
from causalpos.store import open_dataset  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    w = snakemake.wildcards
    plot_llm_appendix(open_dataset(snakemake.input[0]), f"{w.model} / {w.dataset} / {w.variant}", list(snakemake.output))
