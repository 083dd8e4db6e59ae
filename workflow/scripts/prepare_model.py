"""Snakemake entry point: resolve a model spec into resources/models/{model}."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.models import prepare_model  # noqa: E402
from causalpos.runlog import logged  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    prepare_model(snakemake.wildcards.model, dict(snakemake.params.spec), snakemake.output[0])
