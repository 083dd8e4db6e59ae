"""``causalpos diff-results``: two results trees compared table by table."""

from __future__ import annotations

import pandas as pd

from causalpos.cli import main
from causalpos.io.compare_trees import compare_trees


def _tree(root, value=0.25, md="| a |\n| 1 |\n", fingerprint="abc"):
    (root / "stats").mkdir(parents=True)
    pd.DataFrame(
        {"x": [1.0, value], "name": ["p", "q"], "code_fingerprint": [fingerprint] * 2}
    ).to_csv(root / "stats" / "t.csv", index=False)
    (root / "stats" / "t.md").write_text(md)
    return root


def test_identical_trees_up_to_code_fingerprints(tmp_path, capsys):
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b", fingerprint="def")
    assert compare_trees(a, b).identical
    assert main(["diff-results", str(a), str(b)]) == 0
    assert "2 tables compared" in capsys.readouterr().out


def test_a_changed_number_line_or_file_is_reported(tmp_path, capsys):
    a = _tree(tmp_path / "a")
    b = _tree(tmp_path / "b", value=0.25 + 1e-12, md="| a |\n| 2 |\n")
    (b / "stats" / "extra.csv").write_text("x\n1\n")
    diff = compare_trees(a, b)
    assert set(diff.differing) == {"stats/t.csv", "stats/t.md"}
    assert "row 1" in diff.differing["stats/t.csv"]
    assert diff.only_b == ["stats/extra.csv"]
    assert compare_trees(a, b, atol=1e-9).differing.keys() == {"stats/t.md"}
    assert main(["diff-results", str(a), str(b)]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


def test_missing_cells_in_text_columns_compare_equal(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.csv").write_text("label,value\nx,\n,1.5\n")
    assert compare_trees(tmp_path / "a", tmp_path / "b").identical
