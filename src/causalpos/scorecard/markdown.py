"""The scorecard as Markdown (``results/report/scorecard.md``) and the README's digest of it
(``causalpos summary --update README.md``), between the markers :data:`SUMMARY_BEGIN` and
:data:`SUMMARY_END`."""

from __future__ import annotations

import re

import pandas as pd

from causalpos.markdown import replace_block, table
from causalpos.paths import SCORECARD_CSV, SCORECARD_MD
from causalpos.scorecard.rows import CHECKS, CONTROLS, PAPER1, PAPER2, SECTIONS
from causalpos.verdicts import (
    CHECK,
    CONTROL,
    FAILS,
    NOT_RECOVERED,
    READS_POSITION,
    TESTED,
    UNDERPOWERED,
)

#: The verdicts of each section's judged rows (the rest are not tests and say why).
JUDGED = {PAPER1: TESTED, PAPER2: TESTED, CONTROLS: CONTROL, CHECKS: CHECK}
#: What a section's judged rows are, in its count line.
KIND = {
    PAPER1: "tests of the paper's claims",
    PAPER2: "tests of the paper's claims",
    CONTROLS: "controls",
    CHECKS: "checks of identities",
}
#: The controls the README digest lists: a negative control that did not pass, a plant not
#: recovered.
NOT_PASSED = (READS_POSITION, UNDERPOWERED, NOT_RECOVERED)
#: Where the README digest sends a reader for what the numbers mean.
FINDINGS = "docs/findings.md#in-short"


def _sections(card: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(section, its rows) in :data:`SECTIONS` order, the sections with rows only."""
    if "section" not in card:
        raise ValueError(
            "the scorecard has no section column (it was written by an older causalpos): "
            f"rerun the scorecard rule (snakemake {SCORECARD_CSV}) and summarise that"
        )
    unknown = set(card["section"]) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown scorecard sections {sorted(unknown)}; known: {list(SECTIONS)}")
    return [(s, card[card["section"] == s]) for s in SECTIONS if (card["section"] == s).any()]


def _count(g: pd.DataFrame, verdicts) -> str:
    return ", ".join(f"{int((g['verdict'] == v).sum())} {v}" for v in verdicts)


def _summary(card: pd.DataFrame) -> list[str]:
    """Per section: how many rows are judged (tests of a paper, controls, checks) and how they
    came out, and how many are not tests."""
    lines = []
    for section, g in _sections(card):
        judged = g["verdict"].isin(JUDGED[section])
        rest = g.loc[~judged, "verdict"].value_counts()
        not_tests = ", ".join(f"{int(n)} {v}" for v, n in rest.items())
        lines.append(
            f"- **{section}**: {len(g)} rows; {int(judged.sum())} {KIND[section]} "
            f"({_count(g, JUDGED[section])})"
            + (f"; {int((~judged).sum())} are not tests ({not_tests})" if not_tests else "")
        )
    return lines


LEGEND = (
    "Sections: **paper 1** and **paper 2** hold the tests of the papers' claims, each a row that "
    "could have come out *differs* on a plausible input, with the verdicts **reproduced** / "
    "**differs** / **inconclusive** from the rules of `causalpos.verdicts` (equivalence within a "
    "margin, positive beyond a materiality threshold, exact within a tolerance, a fraction "
    "above a threshold, nearly identical across conditions, increasing across layers), each "
    "judged on the measurement's CI; its *falsified if* column says which measurement would "
    "have made it *differs*. **controls**: runs built to read 0 read **passed** (equivalent to 0 "
    "within a margin declared before the run, by two one-sided tests) / **reads position** "
    "(beyond it) / **underpowered** (neither), planted effects **recovered** / **not "
    "recovered**; **checks** (identities and signs that hold by construction: a closed form "
    "against itself, a proven theorem computed exactly, a state nothing else can reach, the "
    "causal softmax's normaliser) **holds** / **fails**: neither counts as a reproduction. "
    "**not run**, **not applicable** and **measured** rows are not tests; their note says why. "
    "Targets and margins: `src/causalpos/targets.yaml`; paper 2's materiality thresholds and "
    "the controls' margins: the config (`leakage.materiality`, `leakage.controls`)."
)

COLUMNS = ["paper", "target", "claim", "paper_value", "measured", "reading", "verdict"]
COLUMNS += ["falsified_if"]
HEAD = ["paper", "target", "claim", "paper value", "measured", "reading", "verdict"]
HEAD += ["falsified if"]


def _cells(r: pd.Series) -> list[str]:
    """A row's cells in :data:`COLUMNS` order, its note after its verdict."""
    cells = ["" if c not in r or pd.isna(r[c]) else str(r[c]) for c in COLUMNS]
    if r.get("note") and isinstance(r["note"], str):
        cells[6] = f"{cells[6]}: {r['note']}"
    return cells


def to_markdown(card: pd.DataFrame) -> str:
    """The scorecard as Markdown (no tabulate dependency): the counts per section, the legend,
    then one table per section."""
    parts = ["# Reproduction scorecard", "\n".join(_summary(card)), LEGEND]
    for section, g in _sections(card):
        parts += [f"## {section}", table(HEAD, (_cells(r) for _, r in g.iterrows()))]
    return "\n\n".join(parts) + "\n"


#: Markers of the README block :func:`readme_summary` writes (``causalpos summary --update``).
SUMMARY_BEGIN = "<!-- scorecard-summary: generated by `causalpos summary` -->"
SUMMARY_END = "<!-- /scorecard-summary -->"
#: The longest line the digest gives one *differs* row, control not passed or failing check
#: (target, measured, paper value).
SHORT_LINE = 160
#: The fewest characters of the measured value a row's line keeps before cutting it.
MIN_MEASURED = 24
_ASIDE = re.compile(r"\s*\([^()]*\)")


def _clause(text: str) -> str:
    """``text`` without its bracketed asides, up to its first ``;`` (the value the row is judged
    on comes first in every measured and paper-value cell)."""
    text = str(text)
    while _ASIDE.search(text):
        text = _ASIDE.sub("", text)
    return " ".join(text.split(";")[0].split())


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, "…" marking the cut: after its last whole
    interval (``]``) where one fits, else at a word boundary, either if it keeps half the room."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    for end, keep in (("]", 1), (" ", 0)):
        if end in head and head.rindex(end) >= limit // 2:
            head = head[: head.rindex(end) + keep]
            break
    return head.rstrip(" ,:;") + "…"


def short_line(row) -> str:
    """One line of at most :data:`SHORT_LINE` characters for a scorecard row: its paper and
    target, the first clause of what was measured, and the paper's value; the scorecard's row
    holds the whole text."""
    head = f"- {row['paper']}, {row['target']}: "
    paper = _clause(row["paper_value"]) if str(row["paper_value"]) else ""
    tail = f" (paper: {paper})" if paper else ""
    room = max(SHORT_LINE - len(head) - len(tail), MIN_MEASURED)
    line = head + _cut(_clause(row["measured"]), room) + tail
    return line if len(line) <= SHORT_LINE else _cut(line, SHORT_LINE)


def readme_summary(card: pd.DataFrame, *, source: str = SCORECARD_CSV) -> str:
    """The README's "what was reproduced" digest of a scorecard, between :data:`SUMMARY_BEGIN` /
    :data:`SUMMARY_END`: the counts of tests, controls and checks, per section, the links to the
    scorecard and ``docs/findings.md``, then one short line (:func:`short_line`) per *differs*
    test, control not passed (its outcome after its target) and failing check."""
    sections = dict(_sections(card))
    papers = card[card["section"].isin([PAPER1, PAPER2])]
    tested = papers["verdict"].isin(TESTED)
    ctl = sections.get(CONTROLS, card.iloc[:0])
    chk = sections.get(CHECKS, card.iloc[:0])
    n_ctl = int(ctl["verdict"].isin(JUDGED[CONTROLS]).sum())
    n_chk = int(chk["verdict"].isin(CHECK).sum())
    judged = int(tested.sum()) + n_ctl + n_chk
    lines = [
        SUMMARY_BEGIN,
        f"From `{source}`: {len(card)} rows. The papers' claims: {int(tested.sum())} tests "
        f"({_count(papers, TESTED)}); beside them {n_ctl} controls ({_count(ctl, JUDGED[CONTROLS])}) "
        f"and {n_chk} checks of identities ({_count(chk, CHECK)}); the other "
        f"{len(card) - judged} rows are not tests and say why.",
        f"Every row: [the scorecard]({SCORECARD_MD}); the numbers, and what would have made "
        f"each differ: [docs/findings.md]({FINDINGS}).",
        "",
        *_summary(card),
    ]
    bad = ctl[ctl["verdict"].isin(NOT_PASSED)]
    named = [
        ("differs", papers[papers["verdict"] == "differs"]),
        # each line names its outcome: reads position, underpowered or not recovered
        ("controls not passed", bad.assign(target=bad["target"] + ", " + bad["verdict"])),
        ("failing checks", chk[chk["verdict"] == FAILS]),
    ]
    for title, rows in named:
        if len(rows):
            lines += ["", f"*{title.capitalize()}* ({len(rows)}):"]  # its list right below
            lines += [short_line(r) for _, r in rows.iterrows()]
    lines.append(SUMMARY_END)
    return "\n".join(lines) + "\n"


def update_readme(readme: str, block: str) -> str:
    """``readme`` with the text between the summary markers (inclusive) replaced by ``block``."""
    return replace_block(readme, block, (SUMMARY_BEGIN, SUMMARY_END), "summary")
