"""Listed renames (causalpos.io.renames) and diff-results modulo them: a listed rename is no
difference, an unlisted one is."""

from __future__ import annotations

from pathlib import Path

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


def _csv(path, columns: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(columns).to_csv(path, index=False)


#: The headline decomposition takes the plain name the per-prompt one gave up (a permutation),
#: and a column the old per-prompt table alone renamed (scoped by that table's old stem).
PERMUTED = LISTED.replace(
    "| `residual` |",
    "| `paper2_decomposition_headline.csv` | `paper2_decomposition.csv` | table file |\n"
    "| `residual` |",
)


def test_permuted_table_names_map_old_to_new_in_one_step(tmp_path):
    old, new = tmp_path / "old" / "stats", tmp_path / "new" / "stats"
    _csv(
        old / "paper2_decomposition.csv",
        {"condition": ["rope"], "residual": [0.25], "residual_lo": [0.125]},
    )
    _csv(old / "paper2_decomposition_headline.csv", {"residual_lo": [0.5], "share": [0.75]})
    _csv(old / "scorecard.csv", {"source": ["paper2_decomposition_headline, paper2_decomposition"]})
    _csv(new / "paper2_per_prompt_decomposition.csv", NEW)
    # the headline's own `residual_lo` is no rename: the scope names the old per-prompt table
    _csv(new / "paper2_decomposition.csv", {"residual_lo": [0.5], "share": [0.75]})
    _csv(
        new / "scorecard.csv", {"source": ["paper2_decomposition, paper2_per_prompt_decomposition"]}
    )
    (tmp_path / "renames.md").write_text(PERMUTED)
    r = read_renames(tmp_path / "renames.md")
    assert r.file("stats/paper2_decomposition_headline.csv") == "stats/paper2_decomposition.csv"
    assert r.file("stats/paper2_decomposition.csv") == "stats/paper2_per_prompt_decomposition.csv"
    assert r.text("paper2_decomposition_headline.csv") == "paper2_decomposition.csv"
    assert "residual_lo" not in r.columns_of("stats/paper2_decomposition_headline.csv")
    assert r.columns_of("stats/paper2_decomposition.csv")["residual_lo"] == "residual_stream_lo"
    got = compare_trees(tmp_path / "old", tmp_path / "new", renames=r)
    assert got.identical and got.compared == 3, got.report()
    # the new headline table under the per-prompt table's new name is a difference
    _csv(new / "paper2_per_prompt_decomposition.csv", {"residual_lo": [0.5], "share": [0.75]})
    got = compare_trees(tmp_path / "old", tmp_path / "new", renames=r)
    assert list(got.differing) == [
        "stats/paper2_decomposition.csv (as stats/paper2_per_prompt_decomposition.csv)"
    ]


REMOVED = f"""{BEGIN}

| old | new | kind |
|---|---|---|
| `negative_control` | `—` | removed column in paper2_controls |
| `—` | `per_prompt_margin` | added column in paper2_controls |
| `negative control` | `—` | removed column in paper2_tables |

{END}
"""

OLD_MD = """## Controls

| run | margin | negative control |
|---|---|---|
| ring | 0.001 | passed |

| run | negative control |
|---|---|
| ring | underpowered |
"""

NEW_MD = """## Controls

| run | margin |
|---|---|
| ring | 0.001 |

| run |
|---|
| ring |
"""


def _removed_trees(tmp_path, new_controls: dict, new_md: str = NEW_MD):
    old, new = tmp_path / "old" / "stats", tmp_path / "new" / "stats"
    _csv(old / "paper2_controls.csv", {"variant": ["ring"], "negative_control": ["passed"]})
    _csv(new / "paper2_controls.csv", new_controls)
    (old / "paper2_tables.md").write_text(OLD_MD)
    (new / "paper2_tables.md").write_text(new_md)
    (tmp_path / "renames.md").write_text(REMOVED)
    return tmp_path / "old", tmp_path / "new", read_renames(tmp_path / "renames.md")


def test_a_listed_removed_or_added_column_is_no_difference(tmp_path):
    old, new, r = _removed_trees(tmp_path, {"variant": ["ring"], "per_prompt_margin": [0.01]})
    assert r.removed_of("stats/paper2_controls.csv") == {"negative_control"}
    assert r.added_of("stats/paper2_controls.csv") == {"per_prompt_margin"}
    assert r.removed_of("stats/paper2_headline.csv") == set()
    assert set(compare_trees(old, new).differing) == {
        "stats/paper2_controls.csv",
        "stats/paper2_tables.md",
    }
    got = compare_trees(old, new, renames=r)
    assert got.identical and got.compared == 2, got.report()


def test_an_unlisted_removed_column_or_a_listed_one_still_written_is_a_difference(tmp_path):
    # `variant` removed too: not listed
    old, new, r = _removed_trees(tmp_path, {"per_prompt_margin": [0.01]})
    got = compare_trees(old, new, renames=r)
    assert list(got.differing) == ["stats/paper2_controls.csv"]
    assert "['variant'] vs []" in got.differing["stats/paper2_controls.csv"]
    # the listed removed column still written by the new tree
    both = {"variant": ["ring"], "negative_control": ["passed"], "per_prompt_margin": [0.01]}
    old, new, r = _removed_trees(tmp_path / "w", both)
    got = compare_trees(old, new, renames=r)
    assert list(got.differing) == ["stats/paper2_controls.csv"]
    # a Markdown table that lost an unlisted column (`margin`)
    md = NEW_MD.replace("| run | margin |\n|---|---|\n| ring | 0.001 |", "| run |\n|---|\n| ring |")
    old, new, r = _removed_trees(
        tmp_path / "m", {"variant": ["ring"], "per_prompt_margin": [0]}, md
    )
    got = compare_trees(old, new, renames=r)
    assert list(got.differing) == ["stats/paper2_tables.md"]
    assert "line 3: '| run | margin |' vs '| run |'" in got.differing["stats/paper2_tables.md"]


def test_a_removed_column_with_a_new_name_is_refused(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text(REMOVED.replace("| `negative_control` | `—` |", "| `negative_control` | `x` |"))
    with pytest.raises(ValueError, match=r"bad.md:5: .*has no new name: write `—` there"):
        read_renames(bad)
    bad.write_text(
        REMOVED.replace("| `—` | `per_prompt_margin` |", "| `x` | `per_prompt_margin` |")
    )
    with pytest.raises(ValueError, match=r"bad.md:6: .*has no old name: write `—` there"):
        read_renames(bad)


def test_docs_outputs_lists_the_table_files_and_removed_columns():
    import causalpos.catalogue as C

    r = read_renames(REPO / "docs" / "outputs.md")
    files = {Path(t.path).name for t in C.TABLES}
    assert set(r.files.values()) <= files  # every rename names a table the catalogue declares
    assert not set(r.files) & (files - set(r.files.values()))  # no old name is still written
    for name in ("leakage_by_model", "heads", "rope_controls", "depth_trend"):
        assert r.files[f"paper2_{name}.csv"] == Path(C.BY_NAME[name].path).name
        assert C.BY_NAME[name].path.endswith(f"/paper2_per_prompt_{name}.csv")
    assert r.file("stats/paper2_decomposition_headline.csv") == "stats/paper2_decomposition.csv"
    assert r.removed_of("stats/paper2_headline.csv") == {"control", "control_verdict"}
    assert {"dose0_control", "positive_control"} == r.removed_of("stats/paper2_plant_doses.csv")
    assert r.added_of("stats/paper2_plant_doses.csv") == {"dose0_is_control"}
    assert "negative control" in r.removed_of("stats/paper2_tables.md")
