"""Stage ``scorecard``: every reproduction target with the paper's value, ours and a verdict."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from causalpos.scorecard import build_scorecard, to_markdown

log = logging.getLogger("causalpos.stages.report")


def scorecard(inputs: Mapping[str, str], out_csv, out_md):
    """Rule ``scorecard``: the tables named in ``inputs`` in, ``scorecard.{csv,md}`` out."""
    card = build_scorecard(dict(inputs))
    card.to_csv(out_csv, index=False)
    md = to_markdown(card)
    Path(out_md).write_text(md)
    log.info("\n%s", md)
    return card
