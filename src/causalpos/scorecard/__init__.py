"""The reproduction scorecard: each target of both papers as a row that could have failed.

A row holds the claim, the paper's value, the value this run measured (with its CI), a verdict
and the measurement that would have made it ``differs`` (``falsified_if``). The targets — claim
text, paper values, margins, which of the papers' models a value belongs to — live in
``causalpos/targets.yaml``, paper 2's materiality thresholds in the config
(``leakage.materiality``, :class:`~causalpos.scorecard.materiality.Materiality`); the verdicts
come from the rules of :mod:`causalpos.verdicts`, each of which can return ``reproduced``,
``differs`` and ``inconclusive``. Each row sits in one section:
``paper 1`` and ``paper 2`` (tests of the papers' claims, and the rows of those claims that are not
tests), ``controls`` (negative: ``passed`` / ``reads position`` / ``underpowered``; positive:
``recovered`` / ``not recovered``) and ``checks`` (identities: ``holds`` / ``fails``).
Rows that are not tests say why:
``not run`` (the config or the tables do not measure it), ``not applicable`` (the claim's premise
does not hold for this model, e.g. no fixed BOS) and ``measured`` (the paper gives no value to
compare with).

Modules: :mod:`~causalpos.scorecard.rows` (a row, its labels, the targets, shared formatting),
:mod:`~causalpos.scorecard.paper1`,
:mod:`~causalpos.scorecard.paper2`,
:mod:`~causalpos.scorecard.paper2_headline`, :mod:`~causalpos.scorecard.paper2_claim4` and
:mod:`~causalpos.scorecard.paper2_position0` (the row families of each paper),
:mod:`~causalpos.scorecard.paper2_twins` (claim 1 beside its init twin),
:mod:`~causalpos.scorecard.rules` (a row's ``rule``: the text of the rule that decided it),
:mod:`~causalpos.scorecard.materiality` (paper 2's materiality thresholds),
:mod:`~causalpos.scorecard.card` (which family reads which table: :func:`build_scorecard`),
:mod:`~causalpos.scorecard.markdown` (the Markdown scorecard and the README digest),
:mod:`~causalpos.scorecard.overview` (the README's plain-language overview).
"""

from causalpos.scorecard.card import FAMILIES, build_scorecard
from causalpos.scorecard.markdown import (
    LEGEND,
    SUMMARY_BEGIN,
    SUMMARY_END,
    readme_summary,
    to_markdown,
    update_readme,
)
from causalpos.scorecard.materiality import Materiality
from causalpos.scorecard.rows import (
    CHECKS,
    CONTROLS,
    MEASURED,
    NOT_APPLICABLE,
    NOT_RUN,
    RESIDUAL_STREAM,
    SECTIONS,
    TABLE_MEASURED,
    Row,
    check_sections,
    load_targets,
    paper_model_id,
)
from causalpos.verdicts import (
    DIFFERS,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_RECOVERED,
    PASSED,
    READS_POSITION,
    RECOVERED,
    REPRODUCED,
    UNDERPOWERED,
)

__all__ = [
    "REPRODUCED",
    "DIFFERS",
    "INCONCLUSIVE",
    "PASSED",
    "READS_POSITION",
    "UNDERPOWERED",
    "RECOVERED",
    "NOT_RECOVERED",
    "HOLDS",
    "FAILS",
    "SECTIONS",
    "CONTROLS",
    "CHECKS",
    "NOT_RUN",
    "NOT_APPLICABLE",
    "MEASURED",
    "TABLE_MEASURED",
    "RESIDUAL_STREAM",
    "Row",
    "Materiality",
    "check_sections",
    "FAMILIES",
    "load_targets",
    "paper_model_id",
    "build_scorecard",
    "to_markdown",
    "readme_summary",
    "update_readme",
    "LEGEND",
    "SUMMARY_BEGIN",
    "SUMMARY_END",
]
