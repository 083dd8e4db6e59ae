"""Snakemake entry point: paper 2 tables (CSV + Markdown digest) over every (model, dataset) pair."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.leakage import paper2_tables_stage  # noqa: E402
from causalpos.runlog import logged  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    pairs = [tuple(label.split("/")) for label in snakemake.params.labels]
    paper2_tables_stage(
        dict(zip(pairs, snakemake.input.summaries)),
        dict(zip(pairs, snakemake.input.position0)),
        dict(snakemake.output.items()),
    )
