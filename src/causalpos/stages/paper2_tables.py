"""Stage ``aggregate_leakage``: paper 2's tables across (model, dataset) pairs, CSV and Markdown.

Apart from :mod:`causalpos.stages.leakage` so that editing a table or the Markdown digest reruns
this rule alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from causalpos.catalogue import PAPER2_RULE, rule_tables
from causalpos.catalogue_stores import open_summary
from causalpos.io.provenance import stamp_table
from causalpos.io.store import open_dataset
from causalpos.paper2.tables.assemble import paper2_tables
from causalpos.paper2.tables.markdown import paper2_markdown


def aggregate_leakage(
    summaries: Mapping[tuple[str, str], str],
    position0: Mapping[tuple[str, str], str],
    outputs: Mapping[str, str],
) -> dict[str, pd.DataFrame]:  # noqa: F821
    """``aggregate_leakage`` rule: every table as CSV (``outputs[name]``) and the Markdown digest
    (``outputs["markdown"]``) from the summary and position-0 stores of (model, dataset) pairs.
    ``outputs`` must name every table of the catalogue and no other (the rule's outputs come
    from it: ``causalpos.catalogue.rule_tables``); otherwise nothing is written."""
    declared = {t.output for t in rule_tables(PAPER2_RULE)}
    if set(outputs) != declared:
        raise ValueError(
            f"aggregate_leakage's outputs {sorted(outputs)} are not the tables "
            f"causalpos.catalogue declares for it: missing {sorted(declared - set(outputs))}, "
            f"undeclared {sorted(set(outputs) - declared)}; the rule's output: must be "
            '**catalogue_outputs("aggregate_leakage") (workflow/rules/common.smk)'
        )
    tabs = paper2_tables(
        {k: open_summary(p) for k, p in summaries.items()},
        {k: open_dataset(p) for k, p in position0.items()},
    )
    for name, df in tabs.items():
        Path(outputs[name]).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(outputs[name], index=False)
        stamp_table(outputs[name])
    Path(outputs["markdown"]).write_text(paper2_markdown(tabs))
    stamp_table(outputs["markdown"])
    return tabs
