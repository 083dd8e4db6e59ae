"""Start-up of the light jobs: a rule that runs no model imports neither torch nor transformers
before its work starts (importing torch costs 1.0-1.5 CPU-s, transformers' model classes ~2.5 s,
against well under a second of work in a table or figure job), and of the other libraries only
those its job uses (xarray with pandas ~0.25 CPU-s, matplotlib's figures ~0.3, scipy.special
0.15). Checked twice: statically over the module-level imports of each script's closure (naming
the chain that pulls a package in), and by importing the light stages in fresh interpreters (what
the libraries themselves import)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from causalpos.io.fingerprint import module_file
from tests.wfutil import REPO

PACKAGE = REPO / "src" / "causalpos"
SCRIPTS = sorted((REPO / "workflow" / "scripts").glob("*.py"))

#: The rules whose job runs torch: a model's forward passes or training, the simulation's
#: kernel. Paper 2's statistics (``leakage``) compute in numpy and load no torch.
TORCH_RULES = {
    "extract_scores",
    "prepare_model",
    "train_model",
    "init_twin",
    "gram_panels",
    "length_generalization",
    "simulate",
}
#: Light rules whose closure still imports torch at module level, with the module responsible.
KNOWN: dict[str, str] = {}
HEAVY = ("torch", "transformers")


def _stage(script: Path) -> str:
    m = re.search(r"^from (causalpos\.stages\.\w+) import \w+", script.read_text(), re.M)
    assert m, f"{script.name}: no stage import"
    return m.group(1)


def _module_level_imports(path: Path) -> set[str]:
    """Names ``path`` imports when it is imported: module-level statements, including those
    inside module-level ``if``/``try`` blocks, but not function bodies or ``TYPE_CHECKING``."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for h in node.handlers:
                    visit(h.body)
            elif isinstance(node, ast.ClassDef):
                visit(node.body)

    visit(ast.parse(path.read_text()).body)
    return names


def _heavy_chains(script: Path, heavy: tuple[str, ...] = HEAVY) -> dict[str, list[str]]:
    """Third-party packages in ``heavy`` that importing ``script`` imports at module level,
    each with the chain of modules that leads to it."""
    parent: dict[str, str | None] = {script.name: None}
    todo, found = [script.name], {}
    files = {script.name: script}
    while todo:
        mod = todo.pop()
        for name in sorted(_module_level_imports(files[mod])):
            root = name.split(".")[0]
            if root in heavy and root not in found:
                chain, at = [name], mod
                while at is not None:
                    chain.append(at)
                    at = parent[at]
                found[root] = chain[::-1]
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # the packages on the way run their __init__
                sub = ".".join(parts[:i])
                f = module_file(sub, PACKAGE)
                if f is not None and sub not in parent:
                    parent[sub], files[sub] = mod, f
                    todo.append(sub)
    return found


LIGHT = [s for s in SCRIPTS if s.stem not in TORCH_RULES]


def test_every_rule_is_classified():
    rules = {s.stem for s in SCRIPTS}
    assert TORCH_RULES <= rules and set(KNOWN) <= rules, sorted((TORCH_RULES | set(KNOWN)) - rules)
    assert len(LIGHT) >= 20, [s.stem for s in LIGHT]


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(
            s,
            id=s.stem,
            marks=pytest.mark.xfail(strict=True, reason=KNOWN[s.stem]) if s.stem in KNOWN else (),
        )
        for s in LIGHT
    ],
)
def test_light_rule_imports_no_torch_at_module_level(script):
    chains = _heavy_chains(script)
    assert not chains, (
        f"rule {script.stem} runs no model, but importing its script imports "
        + "; ".join(f"{pkg} via {' -> '.join(chain)}" for pkg, chain in chains.items())
        + ": import it inside the function that needs it, or move that function to a module "
        "of its own"
    )


def test_chain_finder_sees_a_torch_import():
    # the static check can fail: a model rule's closure imports torch at module level
    chains = _heavy_chains(REPO / "workflow" / "scripts" / "extract_scores.py")
    assert chains["torch"][0] == "extract_scores.py" and chains["torch"][-1] == "torch"


def _loaded_in_a_fresh_interpreter(stages: list[str], packages: list[str]) -> list[str]:
    """Which of ``packages`` one fresh interpreter has loaded after importing the job glue
    (``causalpos.io.runlog``) and the stage modules ``stages``."""
    code = (
        "import sys, json\nimport causalpos.io.runlog\n"
        + "".join(f"import {m}\n" for m in stages)
        + f"print(json.dumps([h for h in {packages!r} if h in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": ""},
        check=True,
    )
    return json.loads(out.stdout)


def test_light_stages_import_no_torch_in_a_fresh_interpreter():
    stages = sorted({_stage(s) for s in LIGHT if s.stem not in KNOWN})
    assert _loaded_in_a_fresh_interpreter(stages, list(HEAVY)) == [], stages


#: Libraries beside numpy that a light job may load before its work starts: those it uses.
LIBRARIES = ("pandas", "xarray", "scipy", "matplotlib")
STORE, TABLE, FIGURE = {"xarray", "pandas"}, {"pandas"}, {"matplotlib"}
#: What each light rule's job uses: xarray (pandas under it) where it reads or writes a store,
#: pandas where it reads or writes a table, matplotlib where it draws. scipy is used only by
#: the functions that draw a t interval and imported there (aggregate_sim_stats shares their
#: module and draws none). plot_fig1 (closed forms) and plot_loss_curves (the training logs) read
#: no store.
USES: dict[str, set[str]] = {
    **dict.fromkeys(
        (
            "aggregate_leakage",
            "aggregate_llm_stats",
            "aggregate_sim_stats",
            "compare_trained",
            "diagonal_normalize",
            "gram_table",
            "merge_scores",
            "position0",
            "sample_sequences",
            "theory_check",
        ),
        STORE,
    ),
    # paper 2's statistics: scipy's sparse products (the permutation test), its BLAS and t
    # quantiles (the calibrated intervals)
    "leakage": STORE | {"scipy"},
    "scorecard": TABLE,
    "train_tokenizer": set(),
    "plot_fig1": FIGURE,
    "plot_loss_curves": FIGURE,
    **dict.fromkeys(
        (
            "plot_gram_figures",
            "plot_llm_appendix",
            "plot_llm_fig5",
            "plot_loss_by_position",
            "plot_paper2_heads",
            "plot_paper2_layers",
            "plot_paper2_position0",
            "plot_paper2_shares",
            "plot_simulation",
            "plot_train_comparison",
        ),
        FIGURE | STORE,
    ),
}


def test_every_light_rule_says_what_it_uses():
    assert sorted(USES) == sorted(s.stem for s in LIGHT)


@pytest.mark.parametrize("script", LIGHT, ids=[s.stem for s in LIGHT])
def test_light_rule_imports_only_the_libraries_it_uses(script):
    chains = {
        pkg: chain
        for pkg, chain in _heavy_chains(script, LIBRARIES).items()
        if pkg not in USES[script.stem]
    }
    assert not chains, (
        f"rule {script.stem} uses {sorted(USES[script.stem]) or 'none of them'}, but importing its "
        "script imports "
        + "; ".join(f"{pkg} via {' -> '.join(chain)}" for pkg, chain in chains.items())
        + ": import it inside the function that needs it (TYPE_CHECKING for annotations)"
    )


def test_the_chain_finder_sees_each_library():
    # the static check can fail: it sees what a figure rule reading stores and the scorecard
    # import at module level
    chains = _heavy_chains(REPO / "workflow" / "scripts" / "plot_paper2_heads.py", LIBRARIES)
    assert sorted(chains) == ["matplotlib", "xarray"]
    chains = _heavy_chains(REPO / "workflow" / "scripts" / "scorecard.py", LIBRARIES)
    assert sorted(chains) == ["pandas"]


def test_rules_reading_no_store_or_table_start_without_pandas_in_a_fresh_interpreter():
    scripts = [s for s in LIGHT if not USES[s.stem] & {"xarray", "pandas"}]
    stages = sorted({_stage(s) for s in scripts})
    assert {s.stem for s in scripts} >= {"plot_fig1", "plot_loss_curves", "train_tokenizer"}
    assert _loaded_in_a_fresh_interpreter(stages, [*HEAVY, *STORE, "scipy"]) == [], stages


def test_the_tests_and_the_processes_they_start_write_bytecode():
    """The suite's own start-up (tests/conftest.py): its processes cache bytecode whatever
    PYTHONDONTWRITEBYTECODE says, so pytest rewrites a test module's assertions once, not in
    each worker on every run, and a job's interpreter reads its imports compiled."""
    assert sys.dont_write_bytecode is False
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    out = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_script_holds_the_collector_off_while_it_imports_its_stage(script):
    # the cyclic collector's passes over the libraries' objects while they are imported are ~10 %
    # of a job's start-up (causalpos.io.runlog.collector_off_until_logged)
    lines = script.read_text().splitlines()
    call = lines.index("collector_off_until_logged()  # the stage's imports without collections")
    stage = next(i for i, line in enumerate(lines) if line.startswith("from causalpos.stages."))
    glue = next(i for i, line in enumerate(lines) if line.startswith("from causalpos.io.runlog"))
    assert glue < call < stage, (script.name, glue, call, stage)
