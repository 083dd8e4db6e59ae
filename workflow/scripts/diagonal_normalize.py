"""Snakemake entry point of rule ``diagonal_normalize``: diagonal normalization of one score store."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.normalize import diagonal_normalize  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    # the pair's score directory (extract_scores, or merge_scores over shards): one store a variant
    store = Path(snakemake.input[0]) / f"{snakemake.wildcards.variant}.zarr"
    diagonal_normalize(store, snakemake.output[0])
