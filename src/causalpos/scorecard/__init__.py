"""The reproduction scorecard: each target of both papers as a row that could have failed.

A row holds the claim, the paper's value, the value this run measured (with its CI), a verdict
and the measurement that would have made it ``differs``. The targets live in
``causalpos/targets.yaml``, the verdict rules in :mod:`causalpos.verdicts`; the sections and the
labels of rows that are not tests: :mod:`causalpos.scorecard.rows`; which family reads which
table: :func:`~causalpos.scorecard.card.build_scorecard`.
"""

from causalpos.scorecard.card import FAMILIES, build_scorecard
from causalpos.scorecard.markdown import (
    SUMMARY_BEGIN,
    SUMMARY_END,
    readme_summary,
    to_markdown,
    update_readme,
)
from causalpos.scorecard.rows import (
    MEASURED,
    NOT_APPLICABLE,
    NOT_RUN,
    RESIDUAL_STREAM,
    SECTIONS,
    TABLE_MEASURED,
    check_sections,
    load_targets,
    paper_model_id,
)

__all__ = [
    "FAMILIES",
    "MEASURED",
    "NOT_APPLICABLE",
    "NOT_RUN",
    "RESIDUAL_STREAM",
    "SECTIONS",
    "SUMMARY_BEGIN",
    "SUMMARY_END",
    "TABLE_MEASURED",
    "build_scorecard",
    "check_sections",
    "load_targets",
    "paper_model_id",
    "readme_summary",
    "to_markdown",
    "update_readme",
]
