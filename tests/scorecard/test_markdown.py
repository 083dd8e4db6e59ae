"""The Markdown scorecard and the README digest (causalpos.scorecard.markdown)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.paper1.theory import theory_table
from tests.scorecard_tables import _card, _p0

#: The controls' verdicts the digest names one line each (a control that did not show what it
#: is built to show).


def _block_counts(line: str, labels) -> list[int]:
    """The count before each label; 0 for a label absent from ``line``, which must hold some."""
    found = [re.search(rf"(\d+) {v}\b", line) for v in labels]
    assert any(found), (line, labels)
    return [int(m.group(1)) if m else 0 for m in found]


def test_markdown_counts_the_rows_that_could_have_failed_per_section(tmp_path):
    from causalpos.scorecard.markdown import JUDGED

    card = _card(
        tmp_path,
        theory=theory_table(None, n=5, alphas=[0.0]),
        position0=pd.concat([_p0("fixed", 0.0), _p0("varies", 0.3, fixed=0)]),
    )
    md = S.to_markdown(card)
    assert md.startswith("# Reproduction scorecard")
    for section, g in card.groupby("section"):
        n = int(g["verdict"].isin(JUDGED[section]).sum())
        assert f"**{section}**: {len(g)} rows; {n} " in md
    # the closed form, the layer-2 monotonicity and claim 7 with a fixed BOS are checks
    assert "- **checks**: 3 rows; 3 checks of identities (3 holds, 0 fails)" in md
    p2 = card[card["section"] == "paper 2"]
    assert "0 tests of the paper's claims (0 reproduced, 0 differs, 0 inconclusive)" in md
    assert f"{len(p2)} are not tests" in md
    assert (
        "- **controls**: 3 rows; 0 controls (0 passed, 0 reads position, 0 underpowered, "
        "0 recovered, 0 not recovered); 3 are not tests"
    ) in md
    # one table per section, in order
    heads = [md.index(f"\n## {s}\n") for s in S.SECTIONS]
    assert heads == sorted(heads)
    assert "falsified if" in md
    assert sum(md.count(f"\n| {p} |") for p in card["paper"].unique()) == len(card)
    assert (card["falsified_if"].str.len() > 0).all()


def test_readme_summary_counts_per_section_and_names_the_findings(tmp_path):
    from causalpos.cli import main

    card = pd.DataFrame(
        {
            "section": ["paper 1", "checks", "checks", "paper 2", "paper 2", "controls"]
            + ["controls"] * 3,
            "paper": ["paper 1"] * 2 + ["paper 2"] * 7,
            "target": ["Fig. 1 (3,2)", "§3 closed form", "claim 7 (m, d)", "claim 8", "Table 9"]
            + ["negative control (m)", "positive control (m)", "negative control (w)"]
            + ["negative control (x)"],
            "claim": ["c"] * 9,
            "paper_value": ["0.150", "exact", "0.0000", "qualitative", "40 %", "0", "0.1", "0"]
            + ["0"],
            "measured": ["0.15082", "9e-16", "0.3", "n/a", "12 % [3, 20]", "0 [-1, 1]", "0 [0, 0]"]
            + ["0 [-5, 5]", "4 [3, 5]"],
            "verdict": ["differs", "holds", "fails", "not applicable", "inconclusive", "passed"]
            + ["not recovered", "underpowered", "reads position"],
            "falsified_if": ["x"] * 9,
            "note": [""] * 9,
        }
    )
    text = S.readme_summary(card)
    assert text.startswith(S.SUMMARY_BEGIN) and text.rstrip().endswith(S.SUMMARY_END)
    assert (
        "9 rows. The papers' claims: 2 tests (0 reproduced, 1 differs, 1 inconclusive); beside "
        "them 4 controls (1 passed, 1 reads position, 1 underpowered, 0 recovered, 1 not "
        "recovered) and 2 checks of identities (1 holds, 1 fails); the other 1 rows are not tests"
    ) in text
    assert "[docs/findings.md](docs/findings.md#in-short)" in text
    assert "[the scorecard](results/report/scorecard.md)" in text
    assert "- **paper 1**: 1 rows; 1 tests of the paper's claims (0 reproduced, 1 differs" in text
    assert (
        "- **controls**: 4 rows; 4 controls (1 passed, 1 reads position, 1 underpowered, "
        "0 recovered, 1 not recovered)\n"
    ) in text
    assert "- **checks**: 2 rows; 2 checks of identities (1 holds, 1 fails)\n" in text
    # controls and checks never count as reproductions
    assert not re.search(r"\*\*(controls|checks)\*\*.*reproduced", text)
    assert "*Differs* (1):\n- paper 1, Fig. 1 (3,2): 0.15082 (paper: 0.150)\n" in text
    # inconclusive rows are counted, not listed (the scorecard and findings list them)
    assert "Inconclusive" not in text and "Table 9" not in text
    # every control that did not pass, or plant not recovered, with its outcome
    assert (
        "*Controls not passed* (3):\n"
        "- paper 2, positive control (m), not recovered: 0 [0, 0] (paper: 0.1)\n"
        "- paper 2, negative control (w), underpowered: 0 [-5, 5] (paper: 0)\n"
        "- paper 2, negative control (x), reads position: 4 [3, 5] (paper: 0)\n"
    ) in text
    assert "negative control (m)" not in text  # a passed control is counted, not listed
    assert "*Failing checks* (1):\n- paper 2, claim 7 (m, d): 0.3 (paper: 0.0000)\n" in text
    # the CLI rewrites exactly the block between the markers
    csv = tmp_path / "scorecard.csv"
    card.to_csv(csv, index=False)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{S.SUMMARY_BEGIN}\nold\n{S.SUMMARY_END}\nafter\n")
    assert main(["summary", str(csv), "--update", str(readme)]) == 0
    new = readme.read_text()
    assert new.startswith("# x\n\nbefore\n" + S.SUMMARY_BEGIN) and new.endswith("\nafter\n")
    assert "\nold\n" not in new and "The papers' claims: 2 tests (" in new
    with pytest.raises(ValueError, match="no summary block"):
        S.update_readme("# no markers\n", text)
    # a scorecard written before the sections: say what to do
    with pytest.raises(ValueError, match="no section column.*rerun the scorecard rule"):
        S.readme_summary(card.drop(columns="section"))


def test_the_readme_holds_a_generated_summary_block():
    """The README's digest is consistent with itself (its numbers come from a real scorecard,
    which the tests do not have): per section the judged rows add up, the sections add up to the
    total, every *differs* test, control not passed or recovered and failing check is one short
    line under its count and nothing
    else is listed, and it links to the scorecard and docs/findings.md. The README stays a front
    door: at most 180 lines."""
    from causalpos.scorecard.markdown import JUDGED, KIND, SHORT_LINE

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert len(text.splitlines()) <= 180
    i, j = text.index(S.SUMMARY_BEGIN), text.index(S.SUMMARY_END)
    block = text[i:j]
    lines = block.split("\n")
    first = lines[1]
    n_rows = int(re.search(r": (\d+) rows\.", first).group(1))
    n_tests = int(re.search(r"The papers' claims: (\d+) tests \(", first).group(1))
    r, d, inc = _block_counts(first, V.TESTED)
    ctl = _block_counts(first, V.CONTROL)
    passed, reads, under, rec, not_rec = ctl
    holds, fails = _block_counts(first, V.CHECK)
    n_ctl = int(re.search(r"(\d+) controls \(", first).group(1))
    n_chk = int(re.search(r"(\d+) checks of identities", first).group(1))
    rest = int(re.search(r"the other (\d+) rows are not tests", first).group(1))
    assert r + d + inc == n_tests > 0 and sum(ctl) == n_ctl and holds + fails == n_chk
    assert n_tests + n_ctl + n_chk + rest == n_rows
    assert "[docs/findings.md](docs/findings.md#in-short)" in lines[2]
    assert "[the scorecard](results/report/scorecard.md)" in lines[2]
    sections = {}
    for line in lines:
        m = re.match(
            r"- \*\*(.+?)\*\*: (\d+) rows; (\d+) (.+?) \(([^)]*)\)(?:; (\d+) are not tests)?", line
        )
        if m:
            sec, n, k, kind, got = m.group(1, 2, 3, 4, 5)
            assert sec in S.SECTIONS and kind == KIND[sec], line
            assert sum(_block_counts(got, JUDGED[sec])) == int(k), line
            assert int(k) + int(m.group(6) or 0) == int(n), line
            sections[sec] = (int(n), _block_counts(got, JUDGED[sec]))
    assert list(sections) == [s for s in S.SECTIONS if s in sections] and len(sections) == 4
    assert sum(n for n, _ in sections.values()) == n_rows
    paper = [sum(x) for x in zip(sections["paper 1"][1], sections["paper 2"][1])]
    assert paper == [r, d, inc]
    assert sections["controls"][1] == ctl and sections["checks"][1] == [holds, fails]
    # every differs test, control not passed or recovered and failing check is one short line
    # under its count
    named = 0
    for title, count in (
        ("Differs", d),
        ("Controls not passed", reads + under + not_rec),
        ("Failing checks", fails),
    ):
        head = f"*{title}* ({count}):"
        assert (head in block) == (count > 0), head
        if count:
            after = block.split(head, 1)[1].strip().split("\n\n")[0].split("\n")
            assert len(after) == count and all(x.startswith("- ") for x in after), head
            assert all(len(x) <= SHORT_LINE for x in after), head
            named += count
    assert "Inconclusive" not in block
    assert len([x for x in lines if x.startswith("- ") and "**" not in x]) == named


def test_a_digest_line_is_the_rows_first_clause_within_the_short_limit():
    """One line per row: paper, target, the first clause of the measured value (asides in
    brackets and everything after the first ';' dropped), the paper's value; cut after a whole
    interval, never past :data:`SHORT_LINE`, where the row is long."""
    from causalpos.scorecard.markdown import MIN_MEASURED, SHORT_LINE, short_line

    row = {
        "paper": "paper 1",
        "target": "Fig. 5 first keys (m, d)",
        "measured": "keys 1..4: L2 -0.198 [-0.302, -0.0944]; L3 0.926 [0.817, 1.04] (logit units)",
        "paper_value": "first keys lower (text; one reading (heat maps) shows them brighter)",
    }
    assert short_line(row) == (
        "- paper 1, Fig. 5 first keys (m, d): keys 1..4: L2 -0.198 [-0.302, -0.0944] "
        "(paper: first keys lower)"
    )
    # a row of the length the README listed before (386 characters) gets one line within limit
    long = {
        **row,
        "target": "negative control (trained-rope, kjv-heldout128, identity_rope+bidirectional, "
        "logit, landmark modelled)",
        "measured": "-0.00045 [-0.00135, 0.000422] in the model's units (causal run's "
        "expected-map variance); bound 0.000291 (half the model's own estimate); own ratio "
        "-0.0078 [-0.0238, 0.00717]",
        "paper_value": "0",
    }
    line = short_line(long)
    assert len(line) <= SHORT_LINE and "\n" not in line
    assert line.endswith(": -0.00045 [-0.00135, 0.000422]… (paper: 0)")
    # no interval to cut after: a word boundary, and at least MIN_MEASURED characters kept
    words = {**long, "measured": "a measured value in words " * 10}
    line = short_line(words)
    cut = line.split(": ", 1)[1].removesuffix(" (paper: 0)")
    assert len(line) <= SHORT_LINE and cut.endswith("…") and len(cut) >= MIN_MEASURED
    assert words["measured"].startswith(cut[:-1]) and words["measured"][len(cut) - 1] == " "
    # the limit holds even where the target alone fills the line
    huge = {**long, "target": "t" * 300}
    assert len(short_line(huge)) == SHORT_LINE and short_line(huge).endswith("…")
