"""The Markdown scorecard and the README digest (causalpos.scorecard.markdown)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from scorecard_tables import (
    _card,
    _p0,
)

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.paper1.theory import theory_table


def _block_counts(line: str, labels) -> list[int]:
    return [int(re.search(rf"(\d+) {v}\b", line).group(1)) for v in labels]


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
    assert "- **controls**: 2 rows; 0 controls (0 passed, 0 failed); 2 are not tests" in md
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
            + ["controls"],
            "paper": ["paper 1", "paper 1", "paper 2", "paper 2", "paper 2", "paper 2", "paper 2"],
            "target": ["Fig. 1 (3,2)", "§3 closed form", "claim 7 (m, d)", "claim 8", "Table 9"]
            + ["negative control (m)", "positive control (m)"],
            "claim": ["c"] * 7,
            "paper_value": ["0.150", "exact", "0.0000", "qualitative", "40 %", "0", "0.1"],
            "measured": ["0.15082", "9e-16", "0.3", "n/a", "12 % [3, 20]", "0 [-1, 1]", "0 [0, 0]"],
            "verdict": ["differs", "holds", "fails", "not applicable", "inconclusive", "passed"]
            + ["failed"],
            "falsified_if": ["x"] * 7,
            "note": [""] * 7,
        }
    )
    text = S.readme_summary(card)
    assert text.startswith(S.SUMMARY_BEGIN) and text.rstrip().endswith(S.SUMMARY_END)
    assert (
        "7 rows. The papers' claims: 2 tests that could have come out *differs* (0 reproduced, "
        "1 differs, 1 inconclusive); beside them, not tests of the papers, 2 controls (1 passed, "
        "1 failed) and 2 checks of identities (1 holds, 1 fails); the other 1 rows are not tests"
    ) in text
    assert "[docs/findings.md](docs/findings.md#in-short)" in text
    assert "- **paper 1**: 1 rows; 1 tests of the paper's claims (0 reproduced, 1 differs" in text
    assert "- **controls**: 2 rows; 2 controls (1 passed, 1 failed)\n" in text
    assert "- **checks**: 2 rows; 2 checks of identities (1 holds, 1 fails)\n" in text
    # controls and checks never count as reproductions
    assert not re.search(r"\*\*(controls|checks)\*\*.*reproduced", text)
    assert "- paper 1, Fig. 1 (3,2): measured 0.15082 (paper: 0.150)" in text
    assert "*Inconclusive* (1):" in text and "Table 9: measured 12 % [3, 20]" in text
    assert "*Failed controls* (1):\n\n- paper 2, positive control (m)" in text
    assert "*Failing checks* (1):\n\n- paper 2, claim 7 (m, d): measured 0.3" in text
    # the CLI rewrites exactly the block between the markers
    csv = tmp_path / "scorecard.csv"
    card.to_csv(csv, index=False)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{S.SUMMARY_BEGIN}\nold\n{S.SUMMARY_END}\nafter\n")
    assert main(["summary", str(csv), "--update", str(readme)]) == 0
    new = readme.read_text()
    assert new.startswith("# x\n\nbefore\n" + S.SUMMARY_BEGIN) and new.endswith("\nafter\n")
    assert "\nold\n" not in new and "2 tests that could" in new
    with pytest.raises(ValueError, match="no summary block"):
        S.update_readme("# no markers\n", text)
    # a scorecard written before the sections: say what to do
    with pytest.raises(ValueError, match="no section column.*rerun the scorecard rule"):
        S.readme_summary(card.drop(columns="section"))


def test_the_readme_holds_a_generated_summary_block():
    """The README's digest is consistent with itself (its numbers come from a real scorecard,
    which the tests do not have): per section the judged rows add up, the sections add up to the
    total, the named findings match their counts, and it links to docs/findings.md."""
    from causalpos.scorecard.markdown import JUDGED, KIND

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    i, j = text.index(S.SUMMARY_BEGIN), text.index(S.SUMMARY_END)
    block = text[i:j]
    lines = block.split("\n")
    first = lines[1]
    n_rows = int(re.search(r": (\d+) rows\.", first).group(1))
    n_tests = int(re.search(r"(\d+) tests that could have come out", first).group(1))
    r, d, inc = _block_counts(first, V.TESTED)
    passed, failed = _block_counts(first, V.CONTROL)
    holds, fails = _block_counts(first, V.CHECK)
    n_ctl = int(re.search(r"(\d+) controls \(", first).group(1))
    n_chk = int(re.search(r"(\d+) checks of identities", first).group(1))
    rest = int(re.search(r"the other (\d+) rows are not tests", first).group(1))
    assert r + d + inc == n_tests > 0 and passed + failed == n_ctl and holds + fails == n_chk
    assert n_tests + n_ctl + n_chk + rest == n_rows
    assert "[docs/findings.md](docs/findings.md#in-short)" in first
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
    assert sections["controls"][1] == [passed, failed] and sections["checks"][1] == [holds, fails]
    # every differs and inconclusive row is named under its count
    for title, count in (("Differs", d), ("Inconclusive", inc)):
        if count:
            head = f"*{title}* ({count}):"
            assert head in block
            after = block.split(head, 1)[1].strip().split("\n\n")[0]
            assert len([x for x in after.split("\n") if x.startswith("- ")]) == count
