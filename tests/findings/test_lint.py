"""The findings template's rule (causalpos.findings.lint): no measured number and no verdict
typed outside a reference; the repository's template keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from causalpos.findings.lint import check_template

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["findings", "decide"])
def test_the_repositorys_template_keeps_the_rule(name):
    template = (REPO / "docs" / f"{name}.template.md").read_text()
    assert check_template(template, root=REPO) == []


@pytest.mark.parametrize(
    "line",
    [
        "SmolLM2-135M on `kjv-chunks128-bos` at layer 3 (Fig. 5, Figs. 2, 4 and 6, §2/§4, Eq. 5)",
        "claims 2 and 3 of paper 2 at layers 3–4 and from layer 2 on; S(3,2) by Table 9",
        "a share of 1 by construction; the interval excludes 0",
        "1. an ordered list's item",
        "# Heading 42: 0.5 %",
        "{{paper: 64–82 %}} {{setting: T = 128}} {{from tests/findings/test_lint.py: 4.5 SE}}",
        '{{llm_index[layer=2].index ci.2f}} against {{scorecard[target="x"].verdict}}',
        "[see](performance.md#runs-2026) and <!-- a comment 0.3 -->",
        "it is {{term: reproduced}} as a word",
    ],
)
def test_what_is_not_a_typed_measurement_passes(line):
    assert check_template(line + "\n", root=REPO) == []


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("SmolLM2 reads 0.0090 [0.0060, 0.0123]", "number '0.0090'"),
        ("the paper's reading is above it at 25 of 30 layers", "number '25'"),
        ("at layers 3, 8, 9 and 21", "number '8'"),
        ("matching to 1e-10", "number '1e-10'"),
        ("−68 % of the sink heads", "number '68'"),
        ("the row is reproduced", "verdict word 'reproduced'"),
        ("the control Underpowered", "verdict word 'Underpowered'"),
        ("{{from tests/nonesuch.py: 4.5 SE}}", "'from tests/nonesuch.py': no such file"),
        ("{{llm_index[layer=2.index}}", "to close the selector"),
    ],
)
def test_a_typed_measurement_or_verdict_is_found(line, found):
    problems = check_template("# Title\n\n" + line + "\n", root=REPO)
    assert problems and problems[0].startswith("line 3: ") and found in problems[0], problems


def test_verdict_words_are_allowed_where_the_verdicts_are_defined():
    text = "## How the scorecard decides\n\nreproduced if lo > 0, differs if hi < 0\n## Next\ndiffers\n"
    assert [p.split(":")[0] for p in check_template(text)] == ["line 5"]
