"""Tests of causalpos.markdown, the one Markdown renderer: pipe tables (one cell per column, `|`
escaped), cells of numbers (NaN and inf as a dash, four significant digits), estimates with their
intervals, and blocks replaced between markers; the renderers that call it (paper 2's digest, the
scorecard) against tables written out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from causalpos import markdown as md
from causalpos.paper2.tables.markdown import paper2_markdown
from causalpos.scorecard import to_markdown


def _columns(line: str) -> int:
    """The cells of a table line: its unescaped ``|`` less one."""
    return line.replace("\\|", "").count("|") - 1


def test_a_table_is_its_header_a_rule_and_one_line_per_row():
    out = md.table(["a", "b c"], [["1", "x"], ["", "y"]])
    assert out == "| a | b c |\n|---|---|\n| 1 | x |\n|  | y |"
    assert md.table(["only"], []) == "| only |\n|---|"


def test_every_line_has_one_cell_per_column_whatever_the_cells_hold():
    rows = [["a|b", "c"], ["|", "||x|"], ["plain", "a \\ b"]]
    lines = md.table(["h|1", "h2"], rows).split("\n")
    assert [_columns(line) for line in lines] == [2] * 5
    assert lines[0] == "| h\\|1 | h2 |"
    assert lines[3] == "| \\| | \\|\\|x\\| |"


def test_a_row_of_another_width_is_refused_naming_the_columns():
    with pytest.raises(ValueError, match=r"row 1 has 1 cells for 2 columns \(a, b\)"):
        md.table(["a", "b"], [["1", "2"], ["3"]])
    with pytest.raises(ValueError, match="row 0 has 3 cells"):
        md.table(["a", "b"], [["1", "2", "3"]])


@pytest.mark.parametrize(
    "x, spec, text",
    [
        (0.0090269, ".4g", "0.009027"),
        (-9.0484e-05, ".4g", "-9.048e-05"),
        (12345.678, ".4g", "1.235e+04"),
        (np.float32(0.5), ".4g", "0.5"),
        (np.float64(1 / 3), ".2f", "0.33"),
        (float("nan"), ".4g", "–"),
        (np.inf, ".4g", "–"),
        (-np.inf, ".2f", "–"),
        (3, ".4g", "3"),
        (np.int64(123456), ".4g", "123456"),
        (True, ".4g", "True"),
        ("reads position", ".4g", "reads position"),
    ],
)
def test_a_number_cell(x, spec, text):
    assert md.cell(x, spec) == text


def test_an_estimate_with_its_interval():
    assert md.interval_cell(0.0090269, 0.0059987, 0.0123386) == "0.009027 [0.005999, 0.01234]"
    assert md.interval_cell(0.62834, 0.5912, 0.66549, percent=True) == "62.8 % [59.1, 66.5]"
    assert md.interval_cell(-0.00004, -0.0009, np.nan) == "-4e-05 [-0.0009, nan]"
    assert md.interval_cell(np.nan, 0.1, 0.2) == md.MISSING
    assert md.interval_cell(np.nan, 0.1, 0.2, percent=True) == md.MISSING
    assert md.with_interval("0.70", "0.65", "0.75") == "0.70 [0.65, 0.75]"


def test_a_frame_formats_each_cell_and_says_when_it_has_no_rows():
    df = pd.DataFrame({"model": ["a|b", "c"], "x": [0.123456, np.nan], "n": ["3", "4"]})
    assert md.frame(df) == (
        "| model | x | n |\n|---|---|---|\n| a\\|b | 0.1235 | 3 |\n| c | – | 4 |\n"
    )
    assert md.frame(df.iloc[:0]) == "_(none)_\n"
    # read row by row: an integer beside floats in an all-number row is a float of that row
    assert md.frame(pd.DataFrame({"n": [123456], "x": [0.5]})).endswith("| 1.235e+05 | 0.5 |\n")


def test_a_block_is_replaced_between_its_markers_and_refused_without_them():
    markers = ("<!-- b -->", "<!-- /b -->")
    text = "top\n<!-- b -->\nold\n<!-- /b -->\nend\n"
    assert md.replace_block(text, "<!-- b -->\nnew\n<!-- /b -->\n", markers, "x") == (
        "top\n<!-- b -->\nnew\n<!-- /b -->\nend\n"
    )
    with pytest.raises(ValueError, match=r"no x block: put the lines .* where it belongs \(here\)"):
        md.replace_block("top\n<!-- /b -->\n<!-- b -->\n", "", markers, "x", " (here)")


def test_paper2s_digest_renders_its_tables_through_the_renderer():
    leak = pd.DataFrame(
        {
            "model": ["m"],
            "dataset": ["d"],
            "variant": ["causal"],
            "target": ["logit"],
            "estimate": [0.0123456],
            "lo": [0.01],
            "hi": [0.015],
            "raw": [0.5],
            "null_floor": [np.nan],
            "fraction_significant": [0.25],
        }
    )
    empty = pd.DataFrame()
    names = ["per_prompt_decomposition", "rope_controls", "bos_effects", "observational_split"]
    names += ["sink_heads", "position0", "position0_probes"]
    tabs = {k: empty for k in names} | {"leakage_by_model": leak}
    out = paper2_markdown(tabs, title="T")
    assert out.endswith(
        "\n## Leakage per run and fraction of significant heads (BH q < α)\n\n"
        "| model | dataset | variant | target | leakage | raw ΔR² | null floor | "
        "significant heads |\n|---|---|---|---|---|---|---|---|\n"
        "| m | d | causal | logit | 0.01235 [0.01, 0.015] | 0.5 | – | 0.25 |\n"
    )


def test_the_scorecards_tables_are_one_cell_per_column_with_the_note_after_the_verdict():
    card = pd.DataFrame(
        {
            "section": ["paper 1"],
            "paper": ["1"],
            "target": ["Fig. 5"],
            "claim": ["a | b"],
            "paper_value": ["0.7"],
            "measured": [np.nan],
            "reading": ["r"],
            "verdict": ["reproduced"],
            "note": ["why"],
            "falsified_if": ["x"],
        }
    )
    table = to_markdown(card).split("## paper 1\n\n")[1]
    assert table == (
        "| paper | target | claim | paper value | measured | reading | verdict | falsified if |\n"
        "|---|---|---|---|---|---|---|---|\n"
        "| 1 | Fig. 5 | a \\| b | 0.7 |  | r | reproduced: why | x |\n"
    )
