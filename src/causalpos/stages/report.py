"""Stage ``scorecard``: every reproduction target with the paper's value, ours and a verdict, and
the run's findings page filled from the same tables."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from causalpos.findings.render import Tables, render
from causalpos.io.provenance import check_table, stamp_table
from causalpos.scorecard import build_scorecard, to_markdown
from causalpos.scorecard.paper2_kinds import (
    SUMMARY_COST_KEY,
    measured_summaries,
    read_summary_costs,
)

log = logging.getLogger("causalpos.stages.report")

#: Printed above the scorecard (and the report's description, workflow/report/workflow.rst) of a
#: config with ``rehearsal: true`` (configs/paper-shape.yaml: random-weight stand-ins).
REHEARSAL_BANNER = "paper-shape rehearsal: random weights, numbers mean nothing"


def scorecard(
    inputs: Mapping[str, str],
    out_csv,
    out_md,
    out_findings=None,
    *,
    rehearsal: bool = False,
    materiality: Mapping[str, float] | None = None,
):
    """Rule ``scorecard``: the tables named in ``inputs`` in, ``scorecard.{csv,md}`` out (under
    :data:`REHEARSAL_BANNER` when ``rehearsal``); ``materiality``: paper 2's thresholds; and
    ``out_findings``, the findings page: the template ``inputs["findings_template"]`` filled from
    the ``table_*`` inputs and this scorecard (not strict). The inputs keyed
    ``summary_cost/<model>/<dataset>`` are the leakage jobs' cost records (the power notes)."""
    measured = read_summary_costs(inputs)
    inputs = {k: v for k, v in inputs.items() if not k.startswith(SUMMARY_COST_KEY)}
    check_table(*inputs.values())  # each table made under this config's settings (io.provenance)
    with measured_summaries(measured):
        card = build_scorecard(dict(inputs), materiality=materiality)
    card.to_csv(out_csv, index=False)
    stamp_table(out_csv)
    md = to_markdown(card)
    banner = f"> **{REHEARSAL_BANNER}** (`rehearsal: true` in the config)\n\n" if rehearsal else ""
    Path(out_md).write_text(banner + md)
    stamp_table(out_md)
    log.info("\n%s", banner + md)
    if out_findings is not None:
        # each table is the input ``table_<file stem>``
        files = {k.removeprefix("table_"): v for k, v in inputs.items() if k.startswith("table_")}
        tables = Tables({**files, "scorecard": out_csv})
        page = render(Path(inputs["findings_template"]).read_text(), tables, strict=False)
        Path(out_findings).write_text(banner + page)
        stamp_table(out_findings)
    return card
