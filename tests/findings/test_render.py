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

REPO = Path(__file__).resolve().parents[2]


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
    assert table_pattern("paper2_per_prompt_heads") == paths.paper2_table("per_prompt_heads")
    with pytest.raises(RefError, match="tables: theory, simulation_index"):
        table_pattern("heads")


def test_literal_spans_say_where_their_text_comes_from():
    assert {parse(f"{k}: x").body.kind for k in ("paper", "setting", "term")} < set(LITERALS)
    assert parse("from tests/test_x.py: 1e-10").body.source == "tests/test_x.py"
    with pytest.raises(RefError, match="from PATH: text"):
        parse("paper tests/x.py: 1")


#: The repository's generated pages: the findings (the default run's) and the powered overlay's
#: decisions (configs/decide.yaml's run), each beside its template.
PAGES = ("findings", "decide")


@pytest.mark.parametrize("page_name", PAGES)
def test_the_repositorys_findings_page_is_its_template_filled(page_name):
    """docs/findings.md is docs/findings.template.md with every reference filled (by
    `causalpos findings --update docs/findings.md RESULTS`), docs/decide.md likewise from
    docs/decide.template.md: the template's text between references appears in the page in
    order, so an edit of the page alone, or of the template without regenerating the page,
    fails here."""
    template = (REPO / "docs" / f"{page_name}.template.md").read_text()
    page = (REPO / "docs" / f"{page_name}.md").read_text()
    assert page.startswith(
        f"<!-- Generated by `causalpos findings` from docs/{page_name}.template.md"
    )
    text = strip_directives(template)
    pos = 0
    for piece in REF.split(text)[::2]:  # the text around the references
        found = page.find(piece, pos)
        assert found >= 0, f"the page does not hold the template's text {piece[:80]!r}"
        pos = found + len(piece)


def test_the_decide_page_refuses_a_missing_row_of_the_overlays_tables(tmp_path):
    """docs/decide.template.md's references on a results tree whose headline lacks the Gemma
    row: the SmolLM2 references fill, the Gemma one fails by its template line, with the
    condition that left no row (so a page made from a run that did not decide a claim cannot
    print a stale number)."""
    template = (REPO / "docs" / "decide.template.md").read_text().split("\n")
    # the aliases of the headline and the lines of the prompts (each model's n_sequences)
    keep = [
        i
        for i, line in enumerate(template)
        if "let H" in line or "{{HS.n_sequences}}" in line or "{{HG.n_sequences}}" in line
    ]
    text = "\n".join(line if i in keep else "" for i, line in enumerate(template))
    stats = tmp_path / "results" / "stats"
    stats.mkdir(parents=True)
    pd.DataFrame(
        {
            "model": ["smollm2-135m"],
            "dataset": ["kjv-decide128-bos"],
            "variant": ["causal"],
            "window": ["all"],
            "target": ["logit"],
            "leakage": [0.0115],
            "leakage_lo": [0.0099],
            "leakage_hi": [0.0132],
            "n_sequences": [128],
        }
    ).to_csv(stats / "paper2_headline.csv", index=False)
    hg = next(i for i, line in enumerate(template) if "{{HG.n_sequences}}" in line) + 1
    with pytest.raises(FindingsError) as e:
        render(text, Tables.of_results(tmp_path / "results"), name="docs/decide.template.md")
    msg = str(e.value)
    assert "1 reference(s) of docs/decide.template.md did not fill" in msg
    assert f"line {hg}: {{{{HG.n_sequences}}}}" in msg
    assert "meets model=gemma3-270m (model holds 'smollm2-135m')" in msg
    # with the row there, every one of them fills
    df = pd.read_csv(stats / "paper2_headline.csv")
    gemma = df.assign(model="gemma3-270m", dataset="kjv-decide640-bos", n_sequences=96)
    pd.concat([df, gemma]).to_csv(stats / "paper2_headline.csv", index=False)
    page = render(text, Tables.of_results(tmp_path / "results"), name="docs/decide.template.md")
    assert "Prompts: 128 SmolLM2-135M" in page and "96 Gemma-3 270M" in page
