"""The command line: ``causalpos diff-results`` (two results trees compared table by table, the
jobs' benchmark tables left out), ``summary``, ``findings`` and ``--version``."""

from __future__ import annotations

import pandas as pd
import pytest

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


def test_benchmark_tables_are_timings_left_out_of_the_comparison_and_counted(tmp_path, capsys):
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    for root, seconds in ((a, "1.5"), (b, "2.5")):  # Snakemake's benchmark: differs every run
        table = root / "benchmarks" / "simulate" / "l2_a000.tsv"
        table.parent.mkdir(parents=True)
        table.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:01\t200.0\n")
    (a / "benchmarks" / "plot_fig1.tsv").write_text("s\n1\n")  # only in A: not compared either
    assert not compare_trees(a, b).identical
    diff = compare_trees(a, b, exclude=("benchmarks",))
    assert diff.identical and diff.compared == 2 and diff.skipped == {"benchmarks": 2}
    assert main(["diff-results", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "2 tables compared",
        "not compared: 2 tables under benchmarks/",
        "identical",
    ]


def test_version_is_the_installed_distributions_else_the_packages(monkeypatch, capsys):
    import importlib.metadata
    import tomllib
    from pathlib import Path

    import pytest

    import causalpos

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"causalpos {importlib.metadata.version('causalpos')}\n"

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    monkeypatch.setattr(causalpos, "__version__", "9.8.7")
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == "causalpos 9.8.7\n"
    # the package's version is the one pyproject.toml gives the distribution
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    monkeypatch.undo()
    assert tomllib.loads(pyproject.read_text())["project"]["version"] == causalpos.__version__


# --- usage errors exit 2 with a message, never a traceback or DIFFERENT's 1 -------------


def test_diff_results_of_a_missing_tree_is_a_usage_error(tmp_path, capsys):
    a = _tree(tmp_path / "a")
    assert main(["diff-results", str(a), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert f"diff-results: B = {tmp_path / 'missing'} is not a directory" in err
    assert main(["diff-results", str(tmp_path / "nope"), str(a)]) == 2
    assert "diff-results: A = " in capsys.readouterr().err


def test_summary_without_a_scorecard_or_of_another_csv_is_a_usage_error(tmp_path, capsys):
    missing = tmp_path / "scorecard.csv"
    assert main(["summary", str(missing)]) == 2
    assert f"summary: no scorecard at {missing}; build it first" in capsys.readouterr().err
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    assert main(["summary", str(other)]) == 2
    err = capsys.readouterr().err
    assert (
        "is not a scorecard: it has no column(s) paper, target, measured, paper_value, verdict"
        in err
    )
    card = tmp_path / "card.csv"
    pd.DataFrame(
        {
            "paper": ["1"],
            "target": ["t"],
            "measured": ["0.5"],
            "paper_value": [""],
            "verdict": ["reproduced"],
        }
    ).to_csv(card, index=False)
    # a scorecard from an older causalpos (no section column) is a usage error too
    assert main(["summary", str(card)]) == 2
    assert "no section column" in capsys.readouterr().err
    pd.read_csv(card).assign(section="paper 1").to_csv(card, index=False)
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    assert main(["summary", str(card), "--update", str(readme)]) == 2
    assert "the README has no summary block" in capsys.readouterr().err
    assert readme.read_text() == "no markers here\n"
    assert main(["summary", str(card)]) == 0
    assert "From `" in capsys.readouterr().out


def test_findings_fills_a_template_from_a_results_tree_and_refuses_what_does_not_fill(
    tmp_path, capsys
):
    results = tmp_path / "results"
    (results / "stats").mkdir(parents=True)
    pd.DataFrame({"model": ["m", "m"], "layer": [1, 2], "index": [0.1234, 0.5]}).to_csv(
        results / "stats" / "llm_index.csv", index=False
    )
    template = tmp_path / "t.md"
    template.write_text("index {{llm_index[layer=2].index .2f}}\n")
    out = tmp_path / "page.md"
    args = ["findings", str(results), "--template", str(template)]
    assert main([*args, "--update", str(out)]) == 0
    assert out.read_text().endswith("\nindex 0.50\n")
    template.write_text("index {{llm_index[model=m].index .2f}}\n")
    assert main(args) == 1
    assert "line 1: {{llm_index[model=m].index .2f}}: llm_index[model=m] matches 2 rows" in (
        capsys.readouterr().err
    )
    assert main([*args, "--allow-missing"]) == 0
    assert "⟨not in this run: llm_index[model=m].index .2f" in capsys.readouterr().out
    assert main(["findings", str(tmp_path / "nope"), "--template", str(template)]) == 2
    assert main(["findings", "--template", str(tmp_path / "none.md")]) == 2
    # the template's rule: a typed number is reported, exit 1
    template.write_text("index 0.50\n")
    assert main(["findings", "--check", "--template", str(template)]) == 1
    assert "line 1: number '0.50' typed outside a reference" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--rtol", "--atol"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "-1e-9", "x"])
def test_diff_results_refuses_a_tolerance_that_is_not_a_finite_number_from_zero(
    tmp_path, capsys, option, value
):
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b", value=0.5)
    with pytest.raises(SystemExit) as info:
        main(["diff-results", str(a), str(b), f"{option}={value}"])  # "-inf": not an option
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {option}: {value!r}" in err, err
    said = "is not a number" if value == "x" else "a tolerance is a finite number >= 0"
    assert said in err, err
    with pytest.raises(ValueError, match=f"compare_trees: {option[2:]}="):
        compare_trees(a, b, **{option[2:]: float("nan") if value == "x" else float(value)})


def test_diff_results_takes_zero_and_finite_tolerances(tmp_path):
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b", value=0.25 + 1e-12)
    assert main(["diff-results", str(a), str(b), "--atol", "0"]) == 1
    assert main(["diff-results", str(a), str(b), "--rtol", "1e-9", "--atol", "0.0"]) == 0
