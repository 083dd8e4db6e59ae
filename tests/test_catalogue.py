"""The output catalogue (causalpos.catalogue): each table declared once, and the rules' outputs,
the builders, the captions, the scorecard's inputs and docs/outputs.md agreeing with it."""

from __future__ import annotations

import importlib
import re

import pytest
import yaml
from snakemake.utils import validate

import causalpos.catalogue as C
import causalpos.paths as P
from causalpos.config import Resolved
from tests.wfutil import REPO, copy_pipeline, snakemake

SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def _resolved(name: str) -> Resolved:
    cfg = yaml.safe_load((REPO / name).read_text())
    validate(cfg, SCHEMA)
    return Resolved(cfg)


def _regex(pattern: str) -> re.Pattern:
    """``pattern`` with each ``{field}`` as one path component."""
    parts = re.split(r"\{\w+\}", pattern)
    return re.compile("[^/]+".join(map(re.escape, parts)))


def test_every_table_is_declared_once_at_a_pattern_with_a_builder_and_caption():
    names = [t.name for t in C.TABLES]
    assert len(names) == len(set(names)) == len(C.BY_NAME) >= 35
    assert len({t.path for t in C.TABLES}) == len(C.TABLES)
    assert len({(t.rule, t.output) for t in C.TABLES}) == len(C.TABLES)
    for t in C.TABLES:
        assert t.path in P.PATTERNS or _regex(P.PAPER2_TABLE).fullmatch(t.path), t.name
        module, function = t.builder.split(":")
        assert callable(getattr(importlib.import_module(module), function)), t.builder
        if t.caption:
            assert (REPO / "workflow" / "report" / f"{t.caption}.rst").is_file(), t.caption
        assert t.holds and t.reads, t.name
        for pattern in t.reads:
            assert pattern in P.PATTERNS or pattern == P.FINDINGS_TEMPLATE, (t.name, pattern)
    # only the theory table is written without a report entry
    assert [t.name for t in C.TABLES if not t.report] == ["theory"]
    assert C.PAPER2_TABLES[:3] == (
        "leakage_by_model",
        "per_prompt_decomposition",
        "leakage_by_layer",
    )
    paper2 = [t.name for t in C.rule_tables("aggregate_leakage")]
    assert list(C.PAPER2_TABLES) == paper2[:-1] and paper2[-1] == "paper2_tables"
    assert C.paper2_table_paths()[-1] == P.PAPER2_TABLES_MD
    assert C.paper2_table_paths()[0] == "results/stats/paper2_per_prompt_leakage_by_model.csv"


def test_every_caption_file_of_a_table_is_the_catalogues():
    """No caption file is left for a table the catalogue does not declare: each workflow/report
    caption is a catalogue table's or a figure family's (``caption="..."`` in the rules)."""
    rules = "\n".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    figures = set(re.findall(r'caption="(?:\.\./report/)?(\w+)(?:\.rst)?"', rules))
    tables = {t.caption for t in C.TABLES if t.caption}
    files = {p.stem for p in (REPO / "workflow" / "report").glob("*.rst")}
    # the report's front page (the Snakefile) and the caption of a table without a file of its own
    assert files - tables - figures == {"workflow", "table"}
    assert not tables & figures


def test_each_rule_writing_tables_takes_its_outputs_from_the_catalogue():
    """Each rule block that writes a catalogue table has ``**catalogue_outputs("<rule>")`` in its
    ``output:`` and spells none of its tables' path constants or captions there."""
    text = "\n".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    blocks = dict(re.findall(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", text, re.M | re.S))
    for rule in dict.fromkeys(t.rule for t in C.TABLES):
        output = re.search(r"    output:\n(.*?)(?=^    \w)", blocks[rule], re.M | re.S).group(1)
        assert f'**catalogue_outputs("{rule}")' in output, rule
        assert "table_report(" not in output and "_TABLE" not in output, rule
    # defined and called once, in common.smk's catalogue_outputs
    assert text.count("table_report(") == 2


@pytest.mark.slow
def test_the_rules_outputs_are_the_catalogues_tables(tmp_path):
    """The default config's dry run: each rule writing tables plans exactly its catalogue tables
    (with the length generalization's store), in the catalogue's order."""
    pipeline = copy_pipeline(tmp_path / "pipeline")
    proc = snakemake(pipeline, "-n", "--cores", "1")
    planned: dict[str, list[str]] = {}
    rule = None
    for line in (proc.stdout + proc.stderr).splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):\s*$", line):
            rule = m.group(1)
        elif (m := re.match(r"^\s+output: (.*)$", line)) and rule:
            planned.setdefault(rule, [p.strip() for p in m.group(1).split(",")])
    for rule in dict.fromkeys(t.rule for t in C.TABLES):
        tables = [t.path for t in C.rule_tables(rule)]
        extra = [P.LENGTHGEN_STORE] if rule == "length_generalization" else []
        assert sorted(planned[rule]) == sorted(tables + extra), rule
    assert planned["aggregate_leakage"] == C.paper2_table_paths()


@pytest.mark.parametrize("name", ["config.yaml", "configs/smoke.yaml", "configs/paper.yaml"])
def test_what_each_table_reads_covers_its_rules_inputs(name):
    """Every store or table a rule's tables are computed from (their provenance inputs) is an
    instance of a pattern the catalogue says one of them reads; every table of the rule is one
    of the config's table outputs."""
    cfg = _resolved(name)
    jobs = cfg.table_jobs()
    assert {"aggregate_leakage", "scorecard"} <= set(jobs)
    for rule, job in jobs.items():
        tables = C.rule_tables(rule)
        assert {t.path for t in tables} <= set(job["outputs"]), rule
        reads = [_regex(p) for t in tables for p in t.reads]
        unread = [p for p in job["inputs"] if not any(r.fullmatch(p) for r in reads)]
        assert not unread, (rule, unread)


def test_the_scorecard_reads_the_catalogues_scorecard_tables():
    """The scorecard's row families read exactly the tables the catalogue marks (its sources are
    their paths), and a config that runs paper 2 gives it every paper-2 one."""
    from causalpos.scorecard.card import FAMILIES
    from causalpos.scorecard.rows import SOURCES, load_targets

    T = load_targets(None)["targets"]
    read = {i.key for f in FAMILIES for i in f.inputs_for(T)}
    assert read == set(C.SCORECARD_TABLES) == {t.name for t in C.TABLES if t.scorecard}
    assert SOURCES == C.SCORECARD_TABLES
    assert SOURCES["headline"] == "results/stats/paper2_headline.csv"
    assert SOURCES["theory"] == P.THEORY_TABLE
    inputs = _resolved("config.yaml").scorecard_inputs()
    assert set(C.SCORECARD_PAPER2_TABLES) <= set(inputs)
    assert set(inputs) == set(C.SCORECARD_TABLES)
    assert len(C.SCORECARD_PAPER2_TABLES) == 17


def test_docs_outputs_lists_every_table_as_the_catalogue_declares_it():
    text = (REPO / "docs" / "outputs.md").read_text()
    i = text.index(C.BLOCK_BEGIN)
    j = text.index(C.BLOCK_END, i) + len(C.BLOCK_END)
    assert text[i:j] + "\n" == C.tables_block(), (
        "docs/outputs.md's tables are not the catalogue's: run "
        "`causalpos catalogue --update docs/outputs.md`"
    )
    block = C.tables_block()
    assert block.count("\n| `") == len(C.TABLES)
    assert "| `stats/paper2_headline.csv` | `aggregate_leakage` | `leakage/{model}/" in block


def test_catalogue_update_rewrites_the_blocks_and_refuses_a_file_without_them(tmp_path, capsys):
    import causalpos.catalogue_stores as S
    from causalpos.cli import main

    doc = tmp_path / "outputs.md"
    blocks = f"{C.BLOCK_BEGIN}\nold\n{C.BLOCK_END}\n\n{S.BLOCK_BEGIN}\n{S.BLOCK_END}\n"
    doc.write_text(f"# Outputs\n\n{blocks}\nafter\n")
    assert main(["catalogue", "--update", str(doc)]) == 0
    want = f"# Outputs\n\n{C.tables_block()}\n{S.variables_block()}\nafter\n"
    assert doc.read_text() == want
    doc.write_text(f"# Outputs\n\n{C.BLOCK_BEGIN}\n{C.BLOCK_END}\n")
    assert main(["catalogue", "--update", str(doc)]) == 2
    err = capsys.readouterr().err
    assert S.BLOCK_BEGIN in err and "docs/outputs.md" in err
    assert doc.read_text() == f"# Outputs\n\n{C.BLOCK_BEGIN}\n{C.BLOCK_END}\n"  # unchanged
    assert main(["catalogue", "--update", str(tmp_path / "none.md")]) == 2
    assert main(["catalogue"]) == 0
    assert capsys.readouterr().out == C.tables_block() + "\n" + S.variables_block()


def test_a_table_without_a_caption_file_is_captioned_with_what_it_holds():
    """The report's caption of a table with no caption file of its own (common.smk:
    table_caption): workflow/report/table.rst rendered with the catalogue's words."""
    from causalpos.io.captions import render_caption

    template = (REPO / "workflow" / "report" / "table.rst").read_text()
    t = C.BY_NAME["heads"]
    text = render_caption(template, {"holds": t.holds, "rule": t.rule})
    assert text == (
        "Per head: leakage with CI, p and BH q (prompt-mean map), sink attention; reading "
        "per-prompt, layer_kind (rule ``aggregate_leakage``; every column: docs/outputs.md).\n"
    )


def test_contributings_worked_example_applies_to_the_two_files_it_names():
    """CONTRIBUTING.md's "Adding a table" diff: it edits catalogue.py and the builder only, and
    each hunk's old side (context and removed lines) is in its file as written."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    section = text[text.index("## Adding a table") :]
    diff = section[section.index("```diff\n") + 8 :]
    diff = diff[: diff.index("```\n")]
    files = re.findall(r"^\+\+\+ b/(\S+)$", diff, re.M)
    assert files == ["src/causalpos/catalogue.py", "src/causalpos/paper2/tables/assemble.py"]
    hunks = 0
    for path, body in zip(files, re.split(r"^--- a/\S+\n\+\+\+ b/\S+\n", diff, flags=re.M)[1:]):
        source = (REPO / path).read_text()
        for hunk in re.split(r"^@@ .*\n", body, flags=re.M)[1:]:
            old = [ln[1:] for ln in hunk.splitlines() if ln[:1] in (" ", "-") or ln == ""]
            assert "\n".join(old) in source, (path, old)
            hunks += 1
    assert hunks == 3
