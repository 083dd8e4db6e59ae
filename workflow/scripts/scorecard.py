"""Snakemake entry point: the reproduction scorecard (CSV + Markdown)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from causalpos.runlog import logged  # noqa: E402
from causalpos.scorecard import build_scorecard, to_markdown  # noqa: E402

with logged(snakemake.log[0], snakemake.threads):
    card = build_scorecard(dict(snakemake.input.items()))
    card.to_csv(snakemake.output.csv, index=False)
    Path(snakemake.output.md).write_text(to_markdown(card))
    print(to_markdown(card))
