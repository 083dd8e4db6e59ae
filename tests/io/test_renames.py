"""Listed renames (causalpos.io.renames) and diff-results modulo them: a listed rename is no
difference, an unlisted one is."""

from __future__ import annotations

import pandas as pd
import pytest

from causalpos.cli import main
from causalpos.io.compare_trees import compare_trees
from causalpos.io.renames import BEGIN, END, read_renames
from tests.wfutil import REPO

LISTED = f"""# renames

{BEGIN}

| old | new | kind |
|---|---|---|
| `paper2_decomposition.csv` | `paper2_per_prompt_decomposition.csv` | table file |
| `residual` | `residual_stream` | column in paper2_per_prompt_decomposition |
| `residual_lo` | `residual_stream_lo` | column in paper2_decomposition |
| `exp_model` | `leakage_model` | store variable |

{END}
"""


def _trees(tmp_path, new_decomposition: dict):
    old, new = tmp_path / "old" / "stats", tmp_path / "new" / "stats"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    pd.DataFrame(
        {"condition": ["rope"], "residual": [0.25], "residual_lo": [0.125], "total": [1.0]}
    ).to_csv(old / "paper2_decomposition.csv", index=False)
    pd.DataFrame(new_decomposition).to_csv(new / "paper2_per_prompt_decomposition.csv", index=False)
    # a table whose `residual` column is a setting, not the component: not renamed
    for root in (old, new):
        pd.DataFrame({"residual": [True], "index": [0.5]}).to_csv(
            root / "simulation_index.csv", index=False
        )
    # the scorecard names the table, and a Markdown page a store variable in backticks
    pd.DataFrame({"source": ["paper2_decomposition"], "why": ["read from `exp_model`"]}).to_csv(
        old / "scorecard.csv", index=False
    )
    pd.DataFrame(
        {"source": ["paper2_per_prompt_decomposition"], "why": ["read from `leakage_model`"]}
    ).to_csv(new / "scorecard.csv", index=False)
    (old / "page.md").write_text("| `exp_model` | paper2_decomposition.csv |\n")
    (new / "page.md").write_text("| `leakage_model` | paper2_per_prompt_decomposition.csv |\n")
    (tmp_path / "renames.md").write_text(LISTED)
    return tmp_path / "old", tmp_path / "new", tmp_path / "renames.md"


NEW = {"condition": ["rope"], "residual_stream": [0.25], "residual_stream_lo": [0.125]}


def test_listed_renames_are_no_difference(tmp_path):
    old, new, listed = _trees(tmp_path, {**NEW, "total": [1.0]})
    plain = compare_trees(old, new)
    assert plain.only_a == ["stats/paper2_decomposition.csv"]
    assert plain.only_b == ["stats/paper2_per_prompt_decomposition.csv"]
    assert set(plain.differing) == {"stats/scorecard.csv", "stats/page.md"}
    got = compare_trees(old, new, renames=read_renames(listed))
    assert got.identical, got.report()
    assert got.compared == 4


def test_an_unlisted_rename_or_a_changed_value_is_a_difference(tmp_path):
    # `total` renamed to `total_leakage`: not listed
    old, new, listed = _trees(tmp_path, {**NEW, "total_leakage": [1.0]})
    got = compare_trees(old, new, renames=read_renames(listed))
    key = "stats/paper2_decomposition.csv (as stats/paper2_per_prompt_decomposition.csv)"
    assert list(got.differing) == [key]
    assert "'total'" in got.differing[key] and "'total_leakage'" in got.differing[key]
    assert not got.identical
    # the listed names, a value changed
    old, new, listed = _trees(tmp_path / "v", {**NEW, "total": [1.5]})
    got = compare_trees(old, new, renames=read_renames(listed))
    assert list(got.differing) == [key]
    assert "column 'total', row 0: " in got.differing[key] and "1.5" in got.differing[key]


def test_the_command_line_compares_modulo_the_renames(tmp_path, capsys):
    old, new, listed = _trees(tmp_path, {**NEW, "total": [1.0]})
    assert main(["diff-results", str(old), str(new)]) == 1
    assert main(["diff-results", str(old), str(new), "--renames", str(listed)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("identical")
    assert main(["diff-results", str(old), str(new), "--renames", str(tmp_path / "no.md")]) == 2
    assert "--renames" in capsys.readouterr().err


def test_a_malformed_or_repeated_row_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text(LISTED.replace("| `exp_model` | `leakage_model` |", "| exp_model | x |"))
    with pytest.raises(ValueError, match=r"bad.md:10: .* is not a rename row"):
        read_renames(bad)
    twice = LISTED.replace("`exp_model`", "`residual`")
    bad.write_text(twice.replace("store variable", "column in paper2_per_prompt_decomposition"))
    with pytest.raises(ValueError, match="'residual' is listed twice as a column in paper2_per"):
        read_renames(bad)
    bad.write_text("# no block\n")
    with pytest.raises(ValueError, match="lists no renames"):
        read_renames(bad)


def test_docs_outputs_lists_the_summary_format_2_renames():
    r = read_renames(REPO / "docs" / "outputs.md")
    assert r.files["paper2_decomposition.csv"] == "paper2_per_prompt_decomposition.csv"
    assert r.file("stats/paper2_decomposition_by_layer.csv") == (
        "stats/paper2_per_prompt_decomposition_by_layer.csv"
    )
    assert r.columns_of("stats/paper2_rope_controls.csv")["share_residual_lo"] == (
        "share_residual_stream_lo"
    )
    assert r.columns_of("stats/paper2_decomposition.csv")["residual"] == "residual_stream"
    assert "residual" not in r.columns_of("sim/simulation_index.csv")
    # one pass: the old headline name takes the plain name the per-prompt reading gave up
    assert r.ticked["exp_model"] == "leakage_model"
    assert r.ticked["leakage_model"] == "per_prompt_leakage_model"
    assert r.text("`exp_model` and `leakage_model`") == (
        "`leakage_model` and `per_prompt_leakage_model`"
    )
