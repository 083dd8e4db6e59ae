"""Stage ``scorecard``: every reproduction target with the paper's value, ours and a verdict."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from causalpos.scorecard import build_scorecard, to_markdown

log = logging.getLogger("causalpos.stages.report")

#: Printed above the scorecard (and the report's description, workflow/report/workflow.rst) of a
#: config with ``rehearsal: true`` (configs/paper-shape.yaml: random-weight stand-ins).
REHEARSAL_BANNER = "paper-shape rehearsal: random weights, numbers mean nothing"


def scorecard(
    inputs: Mapping[str, str],
    out_csv,
    out_md,
    *,
    rehearsal: bool = False,
    materiality: Mapping[str, float] | None = None,
):
    """Rule ``scorecard``: the tables named in ``inputs`` in, ``scorecard.{csv,md}`` out
    (under :data:`REHEARSAL_BANNER` when ``rehearsal``); ``materiality``: paper 2's
    thresholds (config ``leakage.materiality``, the rule's params)."""
    card = build_scorecard(dict(inputs), materiality=materiality)
    card.to_csv(out_csv, index=False)
    md = to_markdown(card)
    if rehearsal:
        md = f"> **{REHEARSAL_BANNER}** (`rehearsal: true` in the config)\n\n{md}"
    Path(out_md).write_text(md)
    log.info("\n%s", md)
    return card
