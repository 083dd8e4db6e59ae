"""The findings page filled from a run's tables (causalpos.findings): a synthetic results tree,
references that fill, and the ones refused (no row, several rows, a table or column the run
lacks, a malformed reference); the repository's page generated from its template."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from causalpos.findings.refs import LITERALS, RefError, parse
from causalpos.findings.render import (
    REF,
    FindingsError,
    Tables,
    render,
    strip_directives,
    table_pattern,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def results(tmp_path) -> Path:
    """A results tree: paper 2's headline for two models, an index table, a scorecard."""
    stats = tmp_path / "results" / "stats"
    stats.mkdir(parents=True)
    pd.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "target": ["logit", "logattn", "logit", "logattn"],
            "leakage": [0.0090269, -0.00004, 0.365, 0.5343],
            "leakage_lo": [0.0059987, -0.0009, 0.3406, 0.5234],
            "leakage_hi": [0.0123386, 0.0007, 0.3897, 0.5458],
            "share": [0.6283, 0.93, 1.0, ""],
            "init_of": ["", "", "a", "a"],
        }
    ).to_csv(stats / "paper2_headline.csv", index=False)
    pd.DataFrame(
        {
            "model": ["m"] * 4,
            "layer": [1, 2, 3, 4],
            "index": [0.02, 0.7, 0.36, 1.38],
            "ci_lo": [0.0, 0.65, 0.35, 1.35],
            "ci_hi": [0.05, 0.75, 0.38, 1.39],
            "n_sequences": [17826, 17826, 17826, 17826],
        }
    ).to_csv(stats / "llm_index.csv", index=False)
    report = tmp_path / "results" / "report"
    report.mkdir()
    pd.DataFrame(
        {
            "target": ["claim 1 (a, d)", "claim 1 (b, d)"],
            "verdict": ["reproduced", "not applicable"],
        }
    ).to_csv(report / "scorecard.csv", index=False)
    return tmp_path / "results"


def _fill(text: str, results: Path, **kw) -> str:
    return render(text, Tables.of_results(results), name="t.md", **kw).split("\n", 1)[1]


def test_references_fill_from_the_tables(results):
    text = (
        "<!-- let A = paper2_headline[model=a] -->\n"
        "<!-- template: an editor's note, {{not a reference}} -->\n"
        "a: {{A[target=logit].leakage ci.4f}}; {{A[target=logit].leakage ci%.1f}}; "
        "{{A[target=logattn].leakage +.4f}}; {{A[target=logattn].leakage .3f}}; "
        "{{A[target=logit].share %.0f}}; "
        '{{scorecard[target="claim 1 (a, d)"].verdict}}; '
        "{{count(llm_index[model=m][layer>=2][ci_lo>0])}} of {{count(llm_index[layer>=2])}}; "
        "{{list(llm_index[ci_lo>0.3].layer)}}; {{median(llm_index.index) .3f}}; "
        "{{llm_index[max(index)].layer}}; {{llm_index[layer=1].n_sequences ,d}}; "
        "{{llm_index[layer=2].index ci.2f}}; {{count(paper2_headline[leakage_hi>.leakage])}}; "
        '{{count(paper2_headline[init_of=""])}}; {{count(scorecard[target~"(b,"])}}; '
        "{{paper: 64–82 %}} {{setting: 32}} {{from tests/x.py: 4.5 SE}} {{term: differs}}; "
        "{{paper2_headline[model=b, target=logit].share pp+.0f}} points\n"
    )
    assert _fill(text, results) == (
        "a: 0.0090 [0.0060, 0.0123]; 0.9 % [0.6, 1.2]; 0.0000; 0.000; 63 %; reproduced; "
        "3 of 3; 2, 3 and 4; 0.530; 4; 17,826; 0.70 [0.65, 0.75]; 4; 2; 1; "
        "64–82 % 32 4.5 SE differs; +100 points\n"
    )


def test_a_text_filled_into_a_table_row_is_one_cell(results):
    """A value with a ``|`` keeps its table row's columns (escaped there, as every table cell
    the project writes) and prints as it is in prose."""
    card = pd.read_csv(results / "report" / "scorecard.csv")
    card.loc[0, "verdict"] = "a | b"
    card.to_csv(results / "report" / "scorecard.csv", index=False)
    ref = '{{scorecard[target="claim 1 (a, d)"].verdict}}'
    text = f"| target | verdict |\n|---|---|\n| claim 1 | {ref} |\nIn prose: {ref}.\n"
    assert _fill(text, results) == (
        "| target | verdict |\n|---|---|\n| claim 1 | a \\| b |\nIn prose: a | b.\n"
    )


def test_a_reference_with_no_row_or_several_is_refused_naming_it(results):
    with pytest.raises(FindingsError) as e:
        _fill(
            "x\n{{paper2_headline[model=c].leakage .3f}}\n{{paper2_headline[model=a].leakage .3f}}",
            results,
        )
    msg = str(e.value)
    assert "2 reference(s) of t.md did not fill" in msg
    # the condition that left no row, and the values the column holds
    assert "line 2: {{paper2_headline[model=c].leakage .3f}}" in msg
    assert "meets model=c (model holds 'a', 'b')" in msg
    # several rows: the columns in which they differ, names first
    assert "line 3:" in msg and "matches 2 rows" in msg and "target: 'logit', 'logattn'" in msg


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("train_index[variant=rope].index .3f", "this run has no table train_index"),
        ("llm_index[layer=1].band .3f", "llm_index has no column 'band'"),
        ("paper2_headline[model=b, target=logattn].share .2f", "is '', not a number"),
        ("llm_index[layer=1].index ci.2f x", "is not [ci][%|pp]SPEC"),
        ("llm_index[layer=1].index", "not an integer: give a format"),
        ("nonesuch[a=1].b .2f", "no table is named 'nonesuch'"),
        ("count(llm_index.index)", "count(rows) takes rows"),
        ("llm_index[layer=1 .index .2f", "to close the selector"),
        ("paper2_headline[share>x].leakage .2f", "compares numbers"),
    ],
)
def test_what_cannot_fill_is_refused_with_its_reason(results, ref, reason):
    with pytest.raises(FindingsError, match=re.escape(reason)):
        _fill(f"{{{{{ref}}}}}", results)


def test_a_partial_run_marks_what_it_lacks_but_not_a_malformed_reference(results):
    text = "{{train_index[variant=rope].index .3f}} and {{llm_index[layer=9].index .2f}}; {{llm_index[layer=1].index .2f}}\n"
    page = render(text, Tables.of_results(results), strict=False, name="t.md")
    assert "**2 reference(s) of t.md have no value in this run**" in page
    assert "⟨not in this run: train_index[variant=rope].index .3f — this run has no table" in page
    assert (
        "⟨not in this run: llm_index[layer=9].index .2f — llm_index[layer=9] matches no row" in page
    )
    assert page.endswith("; 0.02\n")
    with pytest.raises(FindingsError, match="no table is named"):
        render("{{nonesuch.x .2f}}", Tables.of_results(results), strict=False)


def test_aliases_are_defined_once():
    with pytest.raises(FindingsError, match="alias 'A' is defined twice"):
        render("<!-- let A = x -->\n<!-- let A = y -->\n", Tables({}))


def test_every_table_the_pipeline_writes_has_a_name():
    from causalpos import paths

    for p in (paths.LLM_INDEX_TABLE, paths.SCORECARD_CSV, paths.THEORY_TABLE):
        assert table_pattern(Path(p).stem) == p
    assert table_pattern("paper2_heads") == paths.paper2_table("heads")
    with pytest.raises(RefError, match="tables: theory, simulation_index"):
        table_pattern("heads")


def test_literal_spans_say_where_their_text_comes_from():
    assert {parse(f"{k}: x").body.kind for k in ("paper", "setting", "term")} < set(LITERALS)
    assert parse("from tests/test_x.py: 1e-10").body.source == "tests/test_x.py"
    with pytest.raises(RefError, match="from PATH: text"):
        parse("paper tests/x.py: 1")


def test_the_repositorys_findings_page_is_its_template_filled():
    """docs/findings.md is docs/findings.template.md with every reference filled (by
    `causalpos findings --update docs/findings.md RESULTS`): the template's text between
    references appears in the page in order, so an edit of the page alone, or of the template
    without regenerating the page, fails here."""
    template = (REPO / "docs" / "findings.template.md").read_text()
    page = (REPO / "docs" / "findings.md").read_text()
    assert page.startswith("<!-- Generated by `causalpos findings` from docs/findings.template.md")
    text = strip_directives(template)
    pos = 0
    for piece in REF.split(text)[::2]:  # the text around the references
        found = page.find(piece, pos)
        assert found >= 0, f"the page does not hold the template's text {piece[:80]!r}"
        pos = found + len(piece)
