"""The library's shape: science <- stages <- scripts, no import cycles, a config resolver that
only the workflow reads (pure but for its checks module), one script per rule that calls one stage
function of the same name, and code fingerprints that follow the import graph."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from causalpos.io.fingerprint import code_fingerprint, import_closure
from tests.wfutil import REPO

PACKAGE = REPO / "src" / "causalpos"
SCRIPTS = REPO / "workflow" / "scripts"


def _name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = ["causalpos", *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path) -> set[str]:
    """Library modules ``path`` imports (nested imports too), resolved to module names."""
    closure_one = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        closure_one.update(n for n in names if n in MODULES and n != "causalpos")
    return closure_one


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def test_no_relative_imports():
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{name}: relative import (line {node.lineno})"


def test_science_never_imports_a_stage():
    for name, deps in GRAPH.items():
        if name.startswith(("causalpos.stages", "causalpos.api")):
            continue  # the notebook API sits on top, beside the scripts
        stages = sorted(d for d in deps if d.startswith("causalpos.stages"))
        assert not stages, f"{name} imports the stage module(s) {stages}"


def test_the_notebook_api_sits_on_top_and_no_rule_runs_it():
    """causalpos.api imports stages and science as the scripts do; no library module imports it
    (the packages' notebook names reach it through importlib at first use), so no rule's code
    fingerprint includes it, and it imports neither the config resolver nor a script."""
    api = {n for n in MODULES if n == "causalpos.api" or n.startswith("causalpos.api.")}
    assert {"causalpos.api.scores", "causalpos.api.paper1", "causalpos.api.paper2"} <= api
    for name, deps in GRAPH.items():
        if name not in api:
            assert not deps & api, (name, sorted(deps & api))
        else:
            assert not any(d.startswith("causalpos.config") for d in deps), name
    reached = {
        script.stem: {_name(f) for f in import_closure(script, PACKAGE)} & api
        for script in SCRIPTS.glob("*.py")
    }
    assert not {k: v for k, v in reached.items() if v}
    assert {"causalpos.stages.extract", "causalpos.stages.leakage"} <= set().union(
        *(GRAPH[n] for n in api)
    )  # the rules' own stage code, no second implementation


def test_io_is_a_leaf():
    for name, deps in GRAPH.items():
        if name.startswith("causalpos.io"):
            assert all(d.startswith("causalpos.io") for d in deps), (name, sorted(deps))


def test_no_import_cycles():
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep) :] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for name in GRAPH:
        if name not in state:
            visit(name, [name])


#: What the scorecard may import: it judges the pipeline's tables against targets.yaml with the
#: verdict rules, computes paper 1's layers 3-4 exactly (a closed form, no model), and writes
#: its Markdown through the one renderer.
SCORECARD_MAY_IMPORT = {"causalpos.verdicts", "causalpos.paper1.theory", "causalpos.paths"}
SCORECARD_MAY_IMPORT |= {"causalpos.markdown", "causalpos.catalogue", "causalpos.settings"}
# the leakage jobs' cost records, which price the power notes (standard library only)
SCORECARD_MAY_IMPORT |= {"causalpos.io.jobcost"}
# paper 2's materiality thresholds, a settings dataclass (standard library only)
SCORECARD_MAY_IMPORT |= {"causalpos.paper2.settings"}
HEAVY = {"torch", "transformers", "xarray", "zarr", "matplotlib"}


def _third_party(path: Path) -> set[str]:
    """Top-level names of the packages ``path`` imports when run (nested imports too; not those
    under ``if TYPE_CHECKING:``, which only a type checker reads)."""
    names = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return names


def test_the_scorecard_reads_tables_and_loads_no_model_or_store():
    scorecard = {n: p for n, p in MODULES.items() if n.startswith("causalpos.scorecard")}
    assert {"causalpos.scorecard.card", "causalpos.scorecard.rows"} <= set(scorecard)
    for name, path in scorecard.items():
        outside = {d for d in GRAPH[name] if not d.startswith("causalpos.scorecard")}
        assert outside <= SCORECARD_MAY_IMPORT, (name, sorted(outside - SCORECARD_MAY_IMPORT))
        assert not _third_party(path) & HEAVY, (name, sorted(_third_party(path) & HEAVY))
    for name in SCORECARD_MAY_IMPORT:
        assert not _third_party(MODULES[name]) & HEAVY, name


#: What the training wing (the models trained here) may import: itself, the pretrained side it
#: shares code with (models/: loading, device), data, io, stats and inference. It sits beside
#: models/.
TRAINING_MAY_IMPORT = (
    "causalpos.training",
    "causalpos.models",
    "causalpos.data",
    "causalpos.io",
    "causalpos.stats",
    "causalpos.inference",
    "causalpos.settings",
)


def test_the_training_wing_sits_beside_models():
    """causalpos.training imports only models/, data, io, stats and inference (its comparison
    tables also paper 1's paired index); models/ (the pretrained side) never imports it; its settings module
    imports nothing of the library and nothing heavy, so config derives its keys without torch."""
    training = [n for n in GRAPH if n.startswith("causalpos.training")]
    assert "causalpos.training.loop" in training and "causalpos.training.settings" in training
    for name in training:
        allowed = TRAINING_MAY_IMPORT
        if name == "causalpos.training.compare":
            allowed += ("causalpos.paper1",)
        bad = sorted(d for d in GRAPH[name] if not d.startswith(allowed))
        assert not bad, f"{name} imports {bad}"
    for name, deps in GRAPH.items():
        if name.startswith("causalpos.models"):
            assert not any(d.startswith("causalpos.training") for d in deps), (name, sorted(deps))
    settings = ast.parse(MODULES["causalpos.training.settings"].read_text())
    top = set()
    for node in ast.walk(settings):
        if isinstance(node, ast.ImportFrom):
            top.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            top.update(a.name.split(".")[0] for a in node.names)
    assert top <= {"__future__", "collections", "dataclasses", "typing", "causalpos"}, sorted(top)


#: The settings modules: frozen dataclasses of what the config chooses, built once by the stages
#: (their fields and builders: causalpos.settings, the one they may import).
SETTINGS_MODULES = (
    "causalpos.settings",
    "causalpos.training.settings",
    "causalpos.paper1.settings",
    "causalpos.paper2.settings",
    "causalpos.capture.settings",
)


def test_settings_modules_import_nothing():
    """Each settings module imports the standard library's pure helpers only (nothing of the
    library, nothing heavy): the config reads defaults from them without torch, and a settings
    object travels to any job."""
    allowed = {"__future__", "collections", "collections.abc", "dataclasses", "re", "typing"}
    allowed |= {"types", "causalpos.settings"}
    for name in SETTINGS_MODULES:
        tree = ast.parse(MODULES[name].read_text())
        mods = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mods.add(node.module)
            elif isinstance(node, ast.Import):
                mods.update(a.name for a in node.names)
        assert mods <= allowed, (name, sorted(mods - allowed))


#: Imports allowed in the pure modules of causalpos.config (all but ``checks``): the standard
#: library's pure helpers, the torch-free variant names and the training settings (standard library
#: only: test_the_training_wing_sits_beside_models).
CONFIG_PURE_IMPORTS = {"__future__", "re", "math", "itertools", "typing", "collections.abc"}
CONFIG_PURE_IMPORTS |= {"causalpos.models.variants", "causalpos.training.settings"}
CONFIG_PURE_IMPORTS |= {"causalpos.models.footprint"}  # the requests' arithmetic, torch-free
CONFIG_PURE_IMPORTS |= {"causalpos.paths"}  # the path patterns (tests/test_paths.py)
CONFIG_PURE_IMPORTS |= {"causalpos.catalogue"}  # the tables (paths only: tests/test_catalogue.py)
# the figures' label table (standard library only: tests/figures/test_labels.py)
CONFIG_PURE_IMPORTS |= {"causalpos.figures.labels"}
# the simulation settings' defaults (standard library only: test_settings_modules_import_nothing)
CONFIG_PURE_IMPORTS |= {"causalpos.paper1.settings", "causalpos.paper2.settings"}
CONFIG_PURE_IMPORTS |= {"causalpos.settings", "causalpos.capture.settings"}
# the names of paper 2's runs the summary and the tables share (its ring twins), torch-free
CONFIG_PURE_IMPORTS |= {"causalpos.paper2.labels"}


def test_the_config_resolver_is_read_by_the_workflow_only():
    """No library module outside causalpos.config imports it: the Snakefile resolves the config
    and hands jobs plain values, so editing the resolver changes no job's code fingerprint. The
    command line (causalpos.cli, which no job imports) reads a store's config for `verify`."""
    for name, deps in GRAPH.items():
        if not name.startswith("causalpos.config") and name != "causalpos.cli":
            assert not any(d.startswith("causalpos.config") for d in deps), (name, sorted(deps))


def test_config_sections_are_pure_and_only_checks_reads_the_disk():
    """Each section module of causalpos.config imports only the package's shared helpers and pure
    standard-library modules, and opens nothing; causalpos.config.checks (with disk and strict)
    reads corpora and (with shapes) local models' files, provenance and existing the existing stores' root
    metadata, yamlfile the config files."""
    sections = [n for n in MODULES if n.startswith("causalpos.config.")]
    assert "causalpos.config.checks" in sections and len(sections) >= 10, sections
    for name in sections:
        if name in (
            "causalpos.config.checks",
            "causalpos.config.shapes",
            "causalpos.config.disk",
            "causalpos.config.strict",
            "causalpos.config.provenance",
            "causalpos.config.existing",
            "causalpos.config.yamlfile",
            "causalpos.config.resolved",
        ):
            continue
        tree = ast.parse(MODULES[name].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                mods = []
            for mod in mods:
                ok = mod in CONFIG_PURE_IMPORTS or mod.startswith("causalpos.config.")
                assert ok, f"{name} imports {mod} (line {node.lineno}): pure modules import none"
                if name != "causalpos.config" and mod.startswith("causalpos.config."):
                    assert mod == "causalpos.config.common", f"{name} imports {mod}"
            if isinstance(node, (ast.Name, ast.Attribute)):
                word = node.id if isinstance(node, ast.Name) else node.attr
                assert word not in {"open", "read_text", "read_bytes"}, (name, node.lineno)


def _rule_scripts() -> dict[str, str]:
    out = {}
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", smk.read_text(), re.S | re.M):
            s = re.search(r'script:\n\s+"\.\./scripts/(\w+)\.py"', m.group(2))
            if s:
                out[m.group(1)] = s.group(1)
    return out


def test_the_snakefiles_table_of_contents_names_every_stage_and_is_included():
    """The Snakefile opens with one line per stage (``#   <stage>  what it makes``), one for each
    rule file but common.smk, and includes every rule file."""
    text = (REPO / "Snakefile").read_text()
    header = text[: text.index("\nimport ")]
    listed = re.findall(r"^#   (\w+)  ", header, re.M)
    stems = sorted(p.stem for p in (REPO / "workflow" / "rules").glob("*.smk"))
    assert sorted(listed) == [s for s in stems if s != "common"], listed
    included = re.findall(r'^include: "workflow/rules/(\w+)\.smk"', text, re.M)
    assert sorted(included) == stems


def test_every_rule_runs_the_script_of_its_name_which_calls_one_stage_function():
    rules = _rule_scripts()
    assert rules, "no rule with a script found"
    assert {r: s for r, s in rules.items() if r != s} == {}
    assert sorted(p.stem for p in SCRIPTS.glob("*.py")) == sorted(rules.values())
    for script in SCRIPTS.glob("*.py"):
        imports = _imports(script)
        stages = [m for m in imports if m.startswith("causalpos.stages.")]
        assert imports - set(stages) == {"causalpos.io.runlog"}, (script.name, imports)
        assert len(stages) == 1, (script.name, stages)
        stage = ast.parse(MODULES[stages[0]].read_text())
        defined = {n.name for n in stage.body if isinstance(n, ast.FunctionDef)}
        assert script.stem in defined, f"{stages[0]} defines no function {script.stem}()"


def test_no_public_name_is_defined_in_two_modules():
    """A stage keeps its rule's name and the science function it calls has its own (e.g. the
    ``extract_scores`` stage calls ``capture.hook.capture_scores``), so a traceback or a grep
    names one definition."""
    where: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(name)
    twice = {n: mods for n, mods in where.items() if len(mods) > 1}
    assert not twice, twice


#: Rules whose rerun costs minutes on CPU (hours on a GPU at paper scale).
EXPENSIVE = {
    "prepare_model",
    "train_tokenizer",
    "train_model",
    "init_twin",
    "simulate",
    "extract_scores",
    "gram_panels",
    "length_generalization",
    "leakage",
}


def test_an_expensive_rule_shares_no_library_code_with_the_analyses_after_it():
    """An expensive rule's stage module serves no cheap rule: editing a cheap rule's stage code (a
    Gram panel, the merge, the theory check...) never reruns training or extraction. (The tokenizer
    and the models trained with it share one module: a new tokenizer retrains them anyway.)"""
    users: dict[str, set[str]] = {}
    for script in SCRIPTS.glob("*.py"):
        for mod in _imports(script):
            if mod.startswith("causalpos.stages."):
                users.setdefault(mod, set()).add(script.stem)
    for rule in EXPENSIVE:
        (stage,) = [m for m, rules in users.items() if rule in rules]
        assert users[stage] <= EXPENSIVE, (rule, stage, sorted(users[stage]))
        closure = {_name(f) for f in import_closure(SCRIPTS / f"{rule}.py", PACKAGE)}
        for other, rules in users.items():
            if other != stage and not rules <= EXPENSIVE:
                # no expensive rule reaches the stage module of a cheaper one
                assert other not in closure, (rule, other)


def test_every_rule_fingerprints_its_own_script():
    text = "".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    for rule, script in _rule_scripts().items():
        body = re.search(rf"^rule {rule}:\n(.*?)(?=^rule |\Z)", text, re.S | re.M).group(1)
        assert f'code=code_fingerprint("{script}")' in body, rule


# ---------------------------------------------------------------------------------------------
# The fingerprint on a package made up here: a change reaches exactly the importing scripts.


@pytest.fixture
def fake(tmp_path):
    pkg = tmp_path / "causalpos"
    (pkg / "sci").mkdir(parents=True)
    (pkg / "stages").mkdir()
    files = {
        "__init__.py": "",
        "sci/__init__.py": "",
        "sci/a.py": "X = 1\n",
        "sci/b.py": "from causalpos.sci.a import X\n",
        "sci/c.py": "def f():\n    from causalpos.sci import a  # lazy\n    return a\n",
        "sci/unused.py": "Y = 2\n",
        "stages/__init__.py": "",
        "stages/one.py": "from causalpos.sci import b\n",
        "stages/two.py": "import causalpos.sci.c\n",
        "stages/three.py": "import json\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    scripts = {}
    for stage in ("one", "two", "three"):
        scripts[stage] = tmp_path / f"{stage}.py"
        scripts[stage].write_text(f"from causalpos.stages.{stage} import run\n")
    return pkg, scripts


def test_import_closure_follows_direct_transitive_and_lazy_imports(fake):
    pkg, scripts = fake
    rel = lambda s: sorted(p.relative_to(pkg).as_posix() for p in import_closure(s, pkg))  # noqa: E731
    assert rel(scripts["one"]) == [
        "__init__.py",
        "sci/__init__.py",
        "sci/a.py",
        "sci/b.py",
        "stages/__init__.py",
        "stages/one.py",
    ]
    assert "sci/a.py" in rel(scripts["two"])  # through c's function-level import
    assert rel(scripts["three"]) == ["__init__.py", "stages/__init__.py", "stages/three.py"]


@pytest.mark.parametrize(
    "module, changed",
    [("sci/a.py", {"one", "two"}), ("sci/b.py", {"one"}), ("sci/unused.py", set())],
)
def test_editing_a_module_changes_exactly_the_fingerprints_of_its_importers(fake, module, changed):
    pkg, scripts = fake
    before = {k: code_fingerprint(s, pkg) for k, s in scripts.items()}
    (pkg / module).write_text((pkg / module).read_text() + "# edit\n")
    after = {k: code_fingerprint(s, pkg) for k, s in scripts.items()}
    assert {k for k in scripts if before[k] != after[k]} == changed


def test_the_real_scripts_closures_are_what_the_layout_promises():
    closure = {p.stem: {_name(f) for f in import_closure(p, PACKAGE)} for p in SCRIPTS.glob("*.py")}
    # paper 2's tables and their Markdown digest reach only the rule that writes them
    tables = {m for m in MODULES if m.startswith("causalpos.paper2.tables.")}
    assert len(tables) >= 5, tables
    for module in tables:
        assert {s for s, mods in closure.items() if module in mods} == {"aggregate_leakage"}
    # paper 1's tables reach only the rules that write them; the trained-vs-twin tables likewise
    assert {s for s, mods in closure.items() if "causalpos.paper1.tables" in mods} == {
        "aggregate_sim_stats",
        "aggregate_llm_stats",
    }
    assert {s for s, mods in closure.items() if "causalpos.training.compare" in mods} == {
        "compare_trained"
    }
    # the leakage metric runs inside extraction (LeakageReducer) and in the summary
    metric = {s for s, mods in closure.items() if "causalpos.paper2.extraction.metric" in mods}
    assert {"extract_scores", "leakage"} <= metric
    # the expensive stage (extraction, GPU-hours at paper scale) reaches none of the analyses that
    # follow it: editing normalization, summaries, tables, figures or the scorecard re-extracts nothing
    after = {"causalpos.paper1.diagonal", "causalpos.paper2.prompts"}
    after |= {"causalpos.paper2.inference", "causalpos.paper2.decomposition"}
    after |= {
        m
        for m in MODULES
        if m.startswith(("causalpos.paper2.summary", "causalpos.paper2.tables"))
        or m.startswith("causalpos.paper2.estimator")
    }
    after |= {"causalpos.paper1.tables"}
    after |= {"causalpos.scorecard", "causalpos.stages.normalize", "causalpos.paper2.position0"}
    after |= {m for m in MODULES if m.startswith("causalpos.scorecard.")}
    assert closure["extract_scores"] & after == set()
    # a row's text and a verdict rule reach only the rule that writes the scorecard: the tables
    # carry numbers (estimate, interval, margin), the scorecard decides
    for module, rules in (
        ("causalpos.scorecard.paper2", {"scorecard"}),
        ("causalpos.verdicts", {"scorecard"}),
    ):
        assert {s for s, mods in closure.items() if module in mods} == rules, module
    assert not any(m.startswith("causalpos.figures") for m in closure["extract_scores"])
    # figures never reach a model stage; no model stage reaches a figure module
    for s, mods in closure.items():
        if any(m.startswith("causalpos.figures") for m in mods):
            assert s.startswith("plot_"), s


def test_every_script_imports_the_library_of_its_own_checkout():
    """Snakemake hands a script ``scriptdir`` unnormalized (``workflow/rules/../scripts``): the
    path a script puts first on sys.path must be the checkout's src/ all the same, or jobs of a
    copied or second checkout run another checkout's (installed) library."""
    from types import SimpleNamespace

    scriptdir = str(REPO / "workflow" / "rules" / ".." / "scripts")
    for script in sorted((REPO / "workflow" / "scripts").glob("*.py")):
        line = next(
            ln for ln in script.read_text().splitlines() if ln.startswith("sys.path.insert(0, ")
        )
        expr = line[len("sys.path.insert(0, ") : -1]
        got = eval(
            expr, {"Path": Path, "str": str, "snakemake": SimpleNamespace(scriptdir=scriptdir)}
        )
        assert Path(got) == REPO / "src", (script.name, got)


@pytest.mark.slow
def test_import_scan_finds_what_a_full_ast_walk_finds():
    # the scan visits statements only; every import in the package, the scripts, the tests and
    # a file with imports in each kind of block must be the ones ast.walk finds
    import ast

    from causalpos.io.fingerprint import _import_statements

    nested = (
        "import a\nif x:\n    import b\nelse:\n    import c\nfor i in y:\n    import d\n"
        "else:\n    import e\nwhile z:\n    import f\ntry:\n    import g\nexcept E:\n"
        "    import h\nelse:\n    import i\nfinally:\n    import j\nwith w:\n    import k\n"
        "class C:\n    def m(self):\n        import l\nasync def g():\n    async with v:\n"
        "        import m\nmatch q:\n    case 1:\n        import n\n"
    )
    sources = [nested] + [
        p.read_text()
        for root in (PACKAGE, SCRIPTS, SCRIPTS.parents[1] / "tests")
        for p in sorted(root.rglob("*.py"))
    ]
    for source in sources:
        tree = ast.parse(source)
        dump = lambda nodes: sorted(ast.dump(n) for n in nodes)  # noqa: E731
        walked = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert dump(_import_statements(tree.body)) == dump(walked)
    assert len(_import_statements(ast.parse(nested).body)) == 14


def test_the_import_cache_gives_the_same_fingerprints_and_follows_edits(
    fake, tmp_path, monkeypatch
):
    import json

    import causalpos.io.fingerprint as fp

    pkg, scripts = fake
    cache = tmp_path / "cache" / "imports.json"
    # a fresh process each time: no parsed lists in memory, the cache file (if any) read anew
    monkeypatch.setattr(fp, "_NAMES", {})
    monkeypatch.setattr(fp, "_CACHE", {"path": None, "entries": {}, "dirty": False})

    def fresh_process():
        fp._NAMES.clear()
        fp.use_cache(cache)

    plain = {k: code_fingerprint(s, pkg) for k, s in scripts.items()}  # no disk cache
    fresh_process()
    assert {k: code_fingerprint(s, pkg) for k, s in scripts.items()} == plain
    assert cache.is_file()
    # a warm start reads every list from the file, parsing nothing
    parsed = []
    real_scan = fp._scan_imports
    monkeypatch.setattr(fp, "_scan_imports", lambda *a: parsed.append(a[0]) or real_scan(*a))
    fresh_process()
    assert {k: code_fingerprint(s, pkg) for k, s in scripts.items()} == plain
    assert parsed == []
    # an edit that adds an import: only the edited files are parsed again, the closure follows
    (pkg / "sci" / "unused.py").write_text("from causalpos.sci import a\n")
    (pkg / "stages" / "three.py").write_text("import causalpos.sci.unused\n")
    fresh_process()
    after = {k: code_fingerprint(s, pkg) for k, s in scripts.items()}
    assert sorted(p.name for p in parsed) == ["three.py", "unused.py"]
    assert after["three"] != plain["three"] and after["one"] == plain["one"]
    closure = {p.relative_to(pkg).as_posix() for p in import_closure(scripts["three"], pkg)}
    assert "sci/a.py" in closure
    # one entry per file: the edited files' old lists are gone
    keys = list(json.loads(cache.read_text()))
    assert len(keys) == len({k.rsplit("|", 1)[0] for k in keys})
    # an unreadable cache is an empty one
    cache.write_text("{not json")
    fp.use_cache(cache)
    assert fp._CACHE["entries"] == {}


# --------------------------------------------------------------------------------------------
# Limits enforced, not remembered (CONTRIBUTING: src/causalpos <= 26,000 code lines, modules <=
# 450 lines, functions <= 100, at most 8 parameters)

MODULE_LINES, FUNCTION_LINES, PARAMETERS = 450, 100, 8


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """A function's parameters, ``self`` and ``cls`` aside (``*args`` and ``**kwargs`` count)."""
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [f"*{a.vararg.arg}"] if a.vararg else []
    names += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return [n for n in names if n not in ("self", "cls")]


def _over_limits(name: str, src: str) -> list[str]:
    too_long = []
    n = len(src.splitlines())
    if n > MODULE_LINES:
        too_long.append(f"{name}: {n} lines")
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_LINES:
                too_long.append(f"{name}.{node.name}: {length} lines")
            params = _parameters(node)
            if len(params) > PARAMETERS:
                too_long.append(f"{name}.{node.name}: {len(params)} parameters")
    return too_long


def test_modules_and_functions_keep_contributings_limits():
    too_long = [
        msg for name, path in MODULES.items() for msg in _over_limits(name, path.read_text())
    ]
    assert not too_long, too_long


def test_the_limits_check_finds_a_long_function_and_a_long_parameter_list():
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    assert _over_limits("m", f"def f():\n{body}\n") == [f"m.f: {FUNCTION_LINES + 1} lines"]
    nine = ", ".join(f"a{i}" for i in range(PARAMETERS)) + ", *, b=1"
    assert _over_limits("m", f"def g({nine}):\n    pass\n") == ["m.g: 9 parameters"]
    eight = "self, " + ", ".join(f"a{i}" for i in range(PARAMETERS))
    assert _over_limits("m", f"class C:\n    def h({eight}):\n        pass\n") == []
    assert _over_limits("m", "x = 1\n" * (MODULE_LINES + 1)) == [f"m: {MODULE_LINES + 1} lines"]


# The library's size in code lines, counted as cloc counts them (the issue's "room under the
# limits"): a line that is not blank, not a `#` comment and not in a docstring; YAML files
# (targets.yaml) by their non-comment lines.
SRC_CODE_LINES = 26_000
_DOCUMENTED = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def code_lines(text: str, python: bool = True) -> int:
    """The lines of ``text`` that are code: not blank, not a ``#`` comment, not a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(text)) if python else ():
        first = node.body[0] if isinstance(node, _DOCUMENTED) and node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            if isinstance(first.value.value, str):
                docstrings.update(range(first.lineno - 1, first.end_lineno))
    return sum(
        1
        for i, ln in enumerate(text.splitlines())
        if i not in docstrings and ln.strip() and not ln.lstrip().startswith("#")
    )


def test_the_library_stays_within_its_code_lines():
    src = REPO / "src" / "causalpos"
    n = sum(code_lines(p.read_text()) for p in src.rglob("*.py"))
    n += sum(code_lines(p.read_text(), python=False) for p in src.rglob("*.yaml"))
    assert n <= SRC_CODE_LINES, f"src/causalpos holds {n:,} code lines (limit {SRC_CODE_LINES:,})"


def test_code_lines_leave_out_blank_lines_comments_and_docstrings_only():
    text = (
        '"""A module.\n\nIts docstring."""\n\n# a comment\nx = 1  # code\n\n\n'
        'class C:\n    """One line."""\n\n    def f(self):\n        """Two\n        lines."""\n'
        '        return """a string,\n        not a docstring"""\n'
    )
    assert code_lines(text) == 5  # x = 1, class C, def f, the two lines of the return
    assert code_lines("a: 1\n# a comment\n\n  b: 2  # code\n", python=False) == 2


# --------------------------------------------------------------------------------------------
# Tests mirror the library: tests/<package>/test_<module>.py tests causalpos.<package>.<module>

TESTS = REPO / "tests"

#: Test modules of the pipeline as a whole or of a tool beside the library (not of one module),
#: by their path under tests/: the repository's checks at the top, the pipeline's (Snakefile,
#: workflow/) in workflow/, benchmarks/' in benchmarks/, the SLURM profile's in cluster/.
NOT_A_MODULE = {
    "test_architecture.py": "the library's layout, import rules and limits",
    "test_lint.py": "ruff, snakefmt and snakemake --lint over the repository",
    "test_envs.py": "the conda environments' pins against requirements.txt",
    "test_gpu.py": "the CUDA checks (marker gpu)",
    "workflow/test_smoke.py": "configs/smoke.yaml end to end",
    "workflow/test_edits.py": "what an edit reruns",
    "workflow/test_leakage.py": "paper 2's rules end to end",
    "workflow/test_shards.py": "extraction over several shards",
    "workflow/test_train.py": "the training rules end to end",
    "workflow/test_provenance.py": "stores refused by their path and config, end to end",
    "workflow/test_failures.py": "what a failed or interrupted run leaves behind",
    "workflow/test_inputs.py": "inputs that changed or vanished between runs",
    "workflow/test_paper_shape.py": "configs/paper-shape.yaml's DAG",
    "workflow/test_report_categories.py": "snakemake --report's categories",
    "workflow/test_profiles.py": "the Snakemake profiles (profiles/)",
    "workflow/test_startup.py": "what each light rule's job imports",
    "workflow/test_errors.py": "the messages of failures across stages",
    "benchmarks/test_benchmarks.py": "benchmarks/",
    "benchmarks/test_budget.py": "benchmarks/budget.py",
    "benchmarks/test_coverage_dependent.py": "benchmarks/coverage_dependent.py: the headline's "
    "interval coverage",
    "benchmarks/test_gpu_rehearsal.py": "benchmarks/gpu_rehearsal.sh",
    "cluster/test_slurm.py": "profiles/slurm on a one-node SLURM cluster (tests/cluster)",
}

#: Packages whose every module has its test module.
MIRRORED = ("causalpos.paper2", "causalpos.scorecard")


def _tested_module(rel: str) -> str | None:
    """The library module the test module ``tests/<rel>`` is named after: ``a/b/test_c.py`` ->
    ``causalpos.a.b.c`` (a module, or a package, whose test module sits in its parent
    package's directory); None where that names no module."""
    parts = Path(rel).with_suffix("").parts
    if not parts[-1].startswith("test_"):
        return None
    name = ".".join(["causalpos", *parts[:-1], parts[-1].removeprefix("test_")])
    return name if name in MODULES else None


def _test_modules() -> list[str]:
    return sorted(
        p.relative_to(TESTS).as_posix()
        for p in TESTS.rglob("test_*.py")
        if "__pycache__" not in p.parts
    )


def test_every_test_module_is_named_after_a_module_of_its_package():
    rels = _test_modules()
    unnamed = [r for r in rels if r not in NOT_A_MODULE and _tested_module(r) is None]
    assert not unnamed, f"move them to tests/<package>/test_<module>.py or list them: {unnamed}"
    assert not set(NOT_A_MODULE) - set(rels), sorted(set(NOT_A_MODULE) - set(rels))


def test_every_test_directory_is_a_package():
    """Each directory of tests/ has an ``__init__.py``: test modules are imported by their
    dotted path (``tests.config.test_provenance`` beside ``tests.io.test_provenance``) and
    helpers as ``tests.<path>``, never as top-level modules."""
    dirs = {p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(str(d.relative_to(REPO)) for d in dirs if not (d / "__init__.py").exists())
    assert not missing, missing


def test_no_test_file_imports_a_helper_as_a_top_level_module():
    own = {p.stem for p in TESTS.rglob("*.py")} - {"__init__"}
    bad = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in own]
    assert not bad, bad


def test_the_modules_the_scheduler_hands_out_first_and_last_exist():
    """tests/conftest.py orders modules by their path under tests/ (longest first for
    pytest-xdist): a module it names that is not there (moved, renamed) would silently lose
    its place."""
    from tests import conftest

    named = [
        *conftest._FIRST,
        *conftest._LAST,
        *conftest.SHARED_SCOPES,
        *conftest.SHARED_SCOPES.values(),
    ]
    assert [m for m in named if not (TESTS / f"{m}.py").is_file()] == []
    assert conftest._scope("tests/paper2/test_inference.py::t") == "paper2/replicates_world"
    assert conftest._scope("tests/paper2/test_prompts.py::t") == "paper2/test_prompts"
    assert conftest._module("tests/workflow/test_smoke.py::test_a[x/y.py]") == "workflow/test_smoke"
    assert conftest._module("tests/test_models.py::test_b") == "test_models"


def test_paper2_and_the_scorecard_have_a_test_module_per_module():
    have = {_tested_module(r) for r in _test_modules()}
    want = {
        m for m, path in MODULES.items() if m.startswith(MIRRORED) and path.name != "__init__.py"
    }
    assert not want - have, sorted(want - have)


def test_the_mirror_rule_maps_a_test_modules_path_to_its_module():
    assert _tested_module("paper2/estimator/test_expected.py") == (
        "causalpos.paper2.estimator.expected"
    )
    assert _tested_module("scorecard/test_paper2_claim4.py") == "causalpos.scorecard.paper2_claim4"
    assert _tested_module("models/test_footprint.py") == "causalpos.models.footprint"
    assert _tested_module("test_paper2.py") == "causalpos.paper2"  # the package
    assert _tested_module("test_stats.py") == "causalpos.stats"
    assert _tested_module("test_footprint.py") is None  # outside its package's directory
    assert _tested_module("test_paper2_estimator_expected.py") is None  # the flat name
    assert _tested_module("paper2/estimator/test_nothing.py") is None
    assert _tested_module("paper2/maps.py") is None  # a helper


# --------------------------------------------------------------------------------------------
# Docs that cannot go stale: every causalpos.x.y named in docs, docstrings and captions resolves

REFERENCE = re.compile(
    r"causalpos(?:\.[A-Za-z_][A-Za-z_0-9]*)+(?![\w:\"])"
)  # not a store's "module:Class"
DOC_FILES = [
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "README.md",
    REPO / "CONTRIBUTING.md",
    *sorted((REPO / "workflow" / "report").glob("*.rst")),
    *sorted((REPO / "workflow" / "rules").glob("*.smk")),
    *MODULES.values(),
    *sorted(SCRIPTS.glob("*.py")),
]


def resolves(reference: str) -> bool:
    """Whether ``causalpos.a.b.c`` names a module or an attribute of one (the longest importable
    module prefix, then attributes)."""
    import importlib

    parts = reference.rstrip(".").split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_causalpos_reference_in_docs_and_docstrings_resolves():
    stale = {}
    for path in DOC_FILES:
        for ref in set(REFERENCE.findall(path.read_text())):
            if ref.startswith("causalpos.egg") or resolves(ref):
                continue
            stale.setdefault(ref, []).append(str(path.relative_to(REPO)))
    assert not stale, stale


def test_the_reference_check_refuses_a_missing_module_or_attribute():
    assert resolves("causalpos.paper2.decomposition.combine")
    assert resolves("causalpos.paper2")
    assert not resolves("causalpos.leakage.leakage_summary")  # no such module
    assert not resolves("causalpos.paper2.extraction.metric.query_window")  # no such attribute


# --------------------------------------------------------------------------------------------
# Measurements live in one ledger, docs/performance.md; other docs link to its sections

LEDGER = REPO / "docs" / "performance.md"
LEDGER_HEAD = "| date | machine | commit | command | figure | yardstick |"
LEDGER_LINES, LEDGER_WIDTH = 300, 400
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
#: A link to a section of a Markdown file, in a Markdown link or named in a comment.
SECTION_LINK = re.compile(r"(?:\]\(|\b)((?:[\w.-]+/)*[\w.-]+\.md)?#([\w-]+)\)?")


def ledger_problems(text: str) -> list[str]:
    """What keeps ``text`` from being the ledger: more than :data:`LEDGER_LINES` lines, a line
    over :data:`LEDGER_WIDTH` characters, a dated row outside a table headed
    :data:`LEDGER_HEAD`, or a ledger row without its six cells (date, machine, commit of 7+ hex
    digits, command, figure, yardstick)."""
    lines = text.splitlines()
    problems = [f"{len(lines)} lines"] if len(lines) > LEDGER_LINES else []
    head = None
    for n, line in enumerate(lines, 1):
        if len(line) > LEDGER_WIDTH:
            problems.append(f"line {n}: {len(line)} characters")
        if not line.startswith("|"):
            head = None
            continue
        head = head or line
        if head != LEDGER_HEAD or line == head or line.startswith("|---"):
            if DATE.match(line.lstrip("| ")) and head != LEDGER_HEAD:
                problems.append(f"line {n}: a dated row outside a ledger table")
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        ok = (
            len(cells) == 6 and DATE.fullmatch(cells[0]) and re.fullmatch(r"[0-9a-f]{7,}", cells[2])
        )
        if not ok or not all(cells):
            problems.append(f"line {n}: not a ledger row (date, machine, commit, ...)")
    return problems


def slugs(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings."""
    heads = re.findall(r"^#+ (.+)$", markdown, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_performance_md_is_a_ledger():
    assert not ledger_problems(LEDGER.read_text())


def test_the_ledger_check_refuses_what_is_not_a_ledger():
    row = "| 2026-11-26 | build VM | 64c81bc | `snakemake --cores 8` | 11 min 31 s wall | 111.5 |"
    good = f"# P\n\n{LEDGER_HEAD}\n|---|---|---|---|---|---|\n{row}\n"
    assert not ledger_problems(good)
    assert ledger_problems(good.replace("11 min 31 s wall", " "))  # no figure
    assert ledger_problems(good.replace("64c81bc", "the one before"))  # no commit
    assert ledger_problems(good.replace("| 111.5 |", "|"))  # five cells
    assert ledger_problems(good.replace(LEDGER_HEAD, "| date | what | value |"))  # not a ledger
    assert ledger_problems(good.replace("`snakemake --cores 8`", "x" * LEDGER_WIDTH))
    assert ledger_problems(good + "\n" * LEDGER_LINES)


def test_no_other_doc_dates_a_measurement():
    """Dated measurements are rows of the ledger; the other docs link to its sections."""
    dated = {
        str(p.relative_to(REPO)): DATE.findall(p.read_text())
        for p in [REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")]
        if p != LEDGER
    }
    assert not {k: v for k, v in dated.items() if v}


def test_every_link_to_a_docs_section_resolves():
    files = [REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")]
    files += [p for p in (REPO / "benchmarks").iterdir() if p.suffix in {".py", ".sh", ".txt"}]
    files += list(MODULES.values())
    broken = []
    for path in files:
        for target, anchor in SECTION_LINK.findall(path.read_text()):
            if not target and path.suffix != ".md":
                continue
            doc = (
                path
                if not target
                else next(
                    (
                        d
                        for d in (
                            path.parent / target,
                            REPO / target,
                            REPO / "docs" / Path(target).name,
                        )
                        if d.is_file()
                    ),
                    None,
                )
            )
            if doc is None or anchor not in slugs(doc.read_text()):
                broken.append(f"{path.relative_to(REPO)}: {target}#{anchor}")
    assert not broken, broken


# --------------------------------------------------------------------------------------------
# No dead or test-only code in src/: every top-level definition is used outside the tests

#: Top-level definitions that only tests use, kept on purpose (each with its reason). A name
#: here that something outside the tests uses again fails the test too: the list stays true.
TEST_ONLY_KEPT = {
    "causalpos.paths.PATTERNS": "the path patterns tests/test_paths.py holds every output against",
    "causalpos.io.fingerprint.import_closure": "the import closure the fingerprint rules check",
    "causalpos.capture.stream.STREAM_ATTRS": "the stream plant's store attrs, cited by doses.py",
}

_IDENT = re.compile(r"[A-Za-z_]\w*")


def _top_level(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        else:
            continue
        for name in names:
            if not name.startswith("__"):
                yield name, node


def _uses(tree: ast.AST, skip: set = frozenset()) -> dict[str, int]:
    """Identifiers ``tree`` uses: names, attributes, imported names, and strings that are one
    identifier (a name looked up at run time)."""
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Name):
            word = node.id
        elif isinstance(node, ast.Attribute):
            word = node.attr
        elif isinstance(node, ast.alias):
            word = node.name.rsplit(".", 1)[-1]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            word = node.value if _IDENT.fullmatch(node.value) else None
        else:
            word = None
        if word:
            out[word] = out.get(word, 0) + 1
    return out


def _test_only_definitions() -> list[str]:
    """Top-level definitions of the package (outside the notebook API, which is public) that no
    library module, workflow script, rule file or benchmark names, other than by their own
    definition and ``__all__``. By name: a name used anywhere counts as used."""
    used: dict[str, int] = {}
    found = []

    def count(words):
        for w, n in words.items():
            used[w] = used.get(w, 0) + n

    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        exports = [
            n
            for n in tree.body
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
        ]
        count(_uses(tree, {x for n in exports for x in ast.walk(n)}))
        if not name.startswith("causalpos.api"):
            found += [(f"{name}.{d}", d, node) for d, node in _top_level(tree)]
    others = [*SCRIPTS.glob("*.py"), *(REPO / "benchmarks").rglob("*.py")]
    for path in [*others, *(REPO / "examples").rglob("*.py")]:
        count(_uses(ast.parse(path.read_text())))
    for path in [REPO / "Snakefile", *(REPO / "workflow" / "rules").glob("*.smk")]:
        code = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#")]
        count({w: 1 for w in _IDENT.findall("\n".join(code))})
    return sorted(q for q, d, node in found if used.get(d, 0) <= _uses(node).get(d, 0))


def test_every_library_definition_is_used_outside_the_tests():
    """Dead code and code only tests use stay out of src/: an oracle that tests need lives in
    tests/ (e.g. tests/leakage_fit_oracle.py), a definition nothing calls is deleted."""
    found = _test_only_definitions()
    assert sorted(set(found) - set(TEST_ONLY_KEPT)) == []
    assert sorted(set(TEST_ONLY_KEPT) - set(found)) == []
