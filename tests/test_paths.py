"""causalpos.paths: every results/ and resources/ path pattern is written once. No other module,
script or rule file spells one (docstrings and comments may name them), and every output a rule
writes, and every target of the configs, is one of the module's patterns."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

import causalpos.paths as P
from causalpos.catalogue import BY_NAME, PAPER2_TABLES
from causalpos.config import Resolved
from tests.wfutil import REPO, copy_pipeline, snakemake

#: The path prefixes only causalpos.paths may spell.
ROOTS = ("results/", "resources/")
PATHS_MODULE = REPO / "src" / "causalpos" / "paths.py"
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")

#: Literal paths still spelled in rules that are restructured apart from this module's adoption
#: (the merge and the plot rules), by rule: each entry must still be there (a converted rule
#: leaves the list), and no other rule may spell one.
PENDING: dict[str, set[str]] = {}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def python_paths(source: str) -> list[tuple[int, str]]:
    """(line, string) of every string literal of Python ``source`` (f-string parts included)
    naming a results/ or resources/ path; docstrings and comments are left out."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and any(root in node.value for root in ROOTS)
    ]
    return [(n.lineno, n.value) for n in sorted(found, key=lambda n: (n.lineno, n.col_offset))]


def smk_paths(source: str) -> list[tuple[str, int, str]]:
    """(rule or "", line, string) of every string literal of a Snakemake file naming a results/
    or resources/ path, with the rule it sits in ("" outside rules); comments are left out."""
    rules = [(m.start(), m.group(1)) for m in re.finditer(r"^rule (\w+):", source, re.M)]
    line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.STRING:
            continue
        value = (
            ast.literal_eval(tok.string)
            if not tok.string.lstrip("rRbB").startswith(("f", "F"))
            else tok.string
        )
        if not any(root in value for root in ROOTS):
            continue
        offset = line_starts[tok.start[0] - 1]
        # the last top-level statement before the string: a rule, or something else
        top = [m.start() for m in re.finditer(r"^\S", source[:offset], re.M)]
        last = max(top, default=-1)
        rule = next((name for start, name in rules if start == last), "")
        out.append((rule, tok.start[0], value))
    return out


def _sources() -> list[Path]:
    files = sorted((REPO / "src").rglob("*.py")) + sorted((REPO / "workflow").rglob("*.py"))
    return [f for f in files if f != PATHS_MODULE]


def _smk_files() -> list[Path]:
    return [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]


def test_no_results_or_resources_path_is_spelled_outside_the_paths_module():
    spelled = [
        f"{f.relative_to(REPO)}:{line}: {value!r}"
        for f in _sources()
        for line, value in python_paths(f.read_text())
    ]
    pending_seen: dict[str, set[str]] = {}
    for f in _smk_files():
        for rule, line, value in smk_paths(f.read_text()):
            if value in PENDING.get(rule, ()):
                pending_seen.setdefault(rule, set()).add(value)
            else:
                spelled.append(f"{f.relative_to(REPO)}:{line} (rule {rule or '-'}): {value!r}")
    assert not spelled, "spell these with causalpos.paths (import causalpos.paths):\n" + "\n".join(
        spelled
    )
    # an entry of PENDING that its rule no longer spells leaves the list
    assert pending_seen == PENDING


def test_the_scan_finds_a_path_in_code_and_skips_docstrings_and_comments():
    py = (
        '"""Writes results/stats/x.csv."""\n'
        "def f(m):\n"
        '    """Reads resources/models/m."""\n'
        "    # results/in/a/comment\n"
        '    return f"results/scores/{m}.zarr", "resources/tokenizers/t"\n'
    )
    assert python_paths(py) == [(5, "results/scores/"), (5, "resources/tokenizers/t")]
    smk = (
        "# results/in/a/comment\n"
        "X = 'results/top.csv'\n\n\n"
        "rule a:\n"
        "    output:\n"
        '        "results/a/{model}.zarr",\n'
        "    log:\n"
        '        "logs/a.log",\n\n\n'
        "def g(w):\n"
        '    return "results/g.csv"\n'
    )
    assert smk_paths(smk) == [
        ("", 2, "results/top.csv"),
        ("a", 7, "results/a/{model}.zarr"),
        ("", 13, "results/g.csv"),
    ]


def test_the_paths_module_imports_nothing_of_the_library():
    tree = ast.parse(PATHS_MODULE.read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else a.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for a in getattr(node, "names", [])
    }
    assert imported == {"__future__"}


_BLOCK = re.compile(r"^(?:rule (\w+)|use rule (\w+) as (\w+) with):\n(.*?)(?=^\S|\Z)", re.M | re.S)
_LOG = re.compile(r'^    log:\n        "logs/(.+)\.log",\n', re.M)
_BENCHMARK = re.compile(r'^    benchmark:\n        PATHS\.benchmark\("(.+)"\)\n', re.M)


def rule_blocks() -> dict[str, tuple[str | None, str]]:
    """Every rule of the workflow's .smk files: name -> (the rule it is declared from with ``use
    rule``, else None; its block's text)."""
    out = {}
    for f in _smk_files():
        for m in _BLOCK.finditer(f.read_text()):
            name, parent = (m.group(1), None) if m.group(1) else (m.group(3), m.group(2))
            out[name] = (parent, m.group(4))
    return out


def test_every_rule_that_runs_a_job_writes_a_benchmark_table_named_as_its_log():
    """Each rule but ``all`` runs a script (one declared with ``use rule`` runs its parent's), so
    each declares Snakemake's ``benchmark:``, a :func:`causalpos.paths.benchmark` path named as
    its log (``logs/{job}.log`` -> ``results/benchmarks/{job}.tsv``, the job below the rule's
    directory); a ``use rule`` that moves its log moves its benchmark with it."""
    blocks = rule_blocks()
    assert len(blocks) >= 30 and "all" in blocks
    missing, unpaired = [], []
    for name, (parent, body) in sorted(blocks.items()):
        runs = re.search(r"^    (script|shell|run):", body, re.M) or parent is not None
        if name == "all":
            assert not runs and "benchmark:" not in body  # the targets: no job of its own
            continue
        assert runs, f"rule {name} runs nothing: is it an aggregation of targets, like all?"
        log, bench = _LOG.search(body), _BENCHMARK.search(body)
        if bench is None:
            missing.append(name)
        elif log is None or log.group(1) != bench.group(1):
            unpaired.append(f"{name}: log {log and log.group(1)}, benchmark {bench.group(1)}")
        elif bench.group(1).split("/")[0] != (parent or name):
            unpaired.append(f"{name}: benchmark {bench.group(1)} outside its rule's directory")
    assert not missing, f"rules without a benchmark: {missing}"
    assert not unpaired, unpaired
    assert P.benchmark("simulate/{setting}") == "results/benchmarks/simulate/{setting}.tsv"
    assert P.BENCHMARKS_ROOT.startswith(P.RESULTS_ROOT + "/")
    # the leakage jobs' cost records sit beside their benchmark tables (the scorecard reads them)
    assert P.LEAKAGE_COST == P.benchmark("leakage/{model}/{dataset}").replace(".tsv", ".cost.json")
    assert "cost=PATHS.LEAKAGE_COST" in blocks["leakage"][1]


#: What each wildcard of a pattern may be when filled in.
FIELDS = {
    "shard": r"\d{4}",
    "fmt": r"[a-z]+",
    # a paper-2 table's file stem after ``paper2_`` (not always its catalogue key)
    "name": "|".join(
        re.escape(Path(BY_NAME[n].path).stem.removeprefix("paper2_")) for n in PAPER2_TABLES
    ),
}


def pattern_regex(pattern: str) -> re.Pattern:
    """``pattern`` with each ``{field}`` as the values it may take (:data:`FIELDS`, else one path
    component)."""
    parts = re.split(r"\{(\w+)\}", pattern)
    body = "".join(
        re.escape(p) if i % 2 == 0 else f"(?:{FIELDS.get(p, r'[^/]+')})"
        for i, p in enumerate(parts)
    )
    return re.compile(body)


REGEXES = [pattern_regex(p) for p in P.PATTERNS]


def unmatched(paths: list[str]) -> list[str]:
    return [p for p in paths if not any(r.fullmatch(p) for r in REGEXES)]


def test_pattern_regexes_match_their_own_instances_only():
    assert (
        unmatched(
            [
                P.score_shard("smollm2-135m", "kjv", 12),
                P.paper2_table("headline"),
                P.figure(P.PAPER2_HEADS_FIGURE.format(model="m", dataset="d"), "png"),
                P.SCORE_STORE.format(model="m", dataset="d", variant="causal"),
            ]
        )
        == []
    )
    assert unmatched(
        [
            "results/scores/m/d/shard-12",  # four digits
            "results/stats/paper2_nonesuch.csv",  # no such paper-2 table
            "results/figures/nonesuch.png",  # no such figure
            "results/scores/m/d/e/causal.zarr",  # one directory too many
            "results/elsewhere/m.zarr",
        ]
    ) == [
        "results/scores/m/d/shard-12",
        "results/stats/paper2_nonesuch.csv",
        "results/figures/nonesuch.png",
        "results/scores/m/d/e/causal.zarr",
        "results/elsewhere/m.zarr",
    ]


def test_figures_spell_one_pattern_per_format():
    assert P.figures(P.SIM_FIGURE, ["png", "pdf"]) == [
        "results/figures/sim_{figure}.png",
        "results/figures/sim_{figure}.pdf",
    ]


@pytest.mark.parametrize(
    "name", ["config.yaml", "configs/smoke.yaml", "configs/paper.yaml", "configs/paper-shape.yaml"]
)
def test_every_target_and_scorecard_input_of_a_config_is_a_pattern(name):
    cfg = yaml.safe_load((REPO / name).read_text())
    validate(cfg, SCHEMA)
    cfg_resolved = Resolved(cfg)
    targets = cfg_resolved.all_targets()
    assert len(targets) > 20
    assert unmatched(targets) == []
    assert unmatched(list(cfg_resolved.scorecard_inputs().values())) == []


_RULE = re.compile(r"^(?:local)?rule (\w+):\s*$")
_OUTPUT = re.compile(r"^\s+output: (.*)$")
_LOG_OR_BENCHMARK = re.compile(r"^\s+(log|benchmark): (.*)$")


@pytest.mark.slow
def test_every_output_of_every_rule_is_a_pattern(tmp_path):
    """The default config's dry run, with shards that split some datasets and not others, runs
    every rule of the workflow; each output it plans is an instance of one of
    causalpos.paths.PATTERNS."""
    pipeline = copy_pipeline(tmp_path / "pipeline")
    # 64 sequences a shard: kjv-first256 (128) is two, kjv-chunks128 (32) one
    cfg = yaml.safe_load((pipeline / "config.yaml").read_text())
    cfg["extract"]["shard_size"] = 64
    (pipeline / "shards.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(pipeline, "-n", "--cores", "1", "--configfile", "shards.yaml")
    outputs: dict[str, list[str]] = {}
    jobs: list[dict[str, str]] = []  # each job's rule, log and benchmark
    rule = None
    for line in (proc.stdout + proc.stderr).splitlines():
        if m := _RULE.match(line):
            rule = m.group(1)
            outputs.setdefault(rule, [])
            jobs.append({"rule": rule})
        elif (m := _OUTPUT.match(line)) and rule:
            outputs[rule] += [p.strip() for p in m.group(1).split(",")]
        elif (m := _LOG_OR_BENCHMARK.match(line)) and rule:
            jobs[-1][m.group(1)] = m.group(2).strip()
    defined = {
        m.group(1)
        for f in _smk_files()
        for m in re.finditer(r"^(?:rule|use rule \w+ as) (\w+)", f.read_text(), re.M)
    }
    assert set(outputs) == defined, sorted(defined ^ set(outputs))
    assert sum(map(len, outputs.values())) > 200
    bad = {r: unmatched(paths) for r, paths in outputs.items() if unmatched(paths)}
    assert not bad, bad
    # every job but all's writes its benchmark table, named as its log
    assert len(jobs) > 100 and [j for j in jobs if j["rule"] == "all"] == [{"rule": "all"}]
    unpaired = [
        j
        for j in jobs
        if j["rule"] != "all"
        and j.get("benchmark") != P.benchmark(j["log"].removeprefix("logs/").removesuffix(".log"))
    ]
    assert not unpaired, unpaired[:5]
