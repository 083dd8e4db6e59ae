"""The conda environments (used under --use-conda) pin exactly what requirements.txt pins."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = PIN.match(line)
        assert m, f"requirements.txt: {line!r} is not an exact pin (name==version)"
        pins[_norm(m.group(1))] = m.group(2)
    return pins


ENV_FILES = sorted((REPO / "envs").glob("*.yaml"))


def test_requirements_pin_the_torch_cpu_build_version():
    pins = requirements()
    assert pins["torch"] == "2.13.0"
    assert pins["zarr"].startswith("3.1.")


@pytest.mark.parametrize("env_file", ENV_FILES, ids=[p.name for p in ENV_FILES])
def test_env_pins_match_requirements(env_file):
    env = yaml.safe_load(env_file.read_text())
    reqs = requirements()
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert "python=3.11" in conda, f"{env_file.name}: python must be 3.11 like the build machines"
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert pip, f"{env_file.name}: empty pip section"
    for entry in pip:
        m = PIN.match(entry)
        assert m, f"{env_file.name}: {entry!r} is not an exact pin"
        name, version = _norm(m.group(1)), m.group(2)
        assert name in reqs, f"{env_file.name}: {name} is not in requirements.txt"
        assert reqs[name] == version, (
            f"{env_file.name}: {name}=={version}, requirements.txt has {reqs[name]}"
        )


def test_every_env_is_used_by_a_rule():
    rules = "\n".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    for env_file in ENV_FILES:
        assert f"envs/{env_file.name}" in rules, f"{env_file.name} is used by no rule"


def _rules_by_env() -> dict[str, list[tuple[str, Path]]]:
    """{env constant: [(rule, script)]} of every rule with a `conda:` and a `script:`."""
    out: dict[str, list[tuple[str, Path]]] = {}
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=rule )", smk.read_text()):
            rule = re.match(r"rule (\w+):", block)
            env = re.search(r"conda:\s*\n\s*(ENV_\w+)", block)
            script = re.search(r'script:\s*\n\s*"\.\./scripts/(\w+\.py)"', block)
            if rule and env and script:
                path = REPO / "workflow" / "scripts" / script.group(1)
                out.setdefault(env.group(1), []).append((rule.group(1), path))
    return out


def _imported_roots(path: Path) -> set[str]:
    """Top-level names of every module a file imports (nested imports included)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_analysis_env_rules_never_import_torch():
    from causalpos.io.fingerprint import import_closure

    env = yaml.safe_load((REPO / "envs" / "analysis.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    # the CUDA build of torch (GBs) only where a job imports it
    assert not any(_norm(PIN.match(e).group(1)) in ("torch", "transformers") for e in pip)
    rules = _rules_by_env()
    assert len(rules["ENV_ANALYSIS"]) >= 15 and len(rules["ENV_MODELS"]) >= 5
    for rule, script in rules["ENV_ANALYSIS"]:
        for path in (script, *import_closure(script)):
            heavy = _imported_roots(path) & {"torch", "transformers"}
            assert not heavy, f"rule {rule} ({script.name}) imports {heavy} via {path.name}"
    # and the rules that do import torch have it
    models = {rule for rule, _ in rules["ENV_MODELS"]}
    assert {"simulate", "leakage", "aggregate_leakage", "compare_trained"} <= models
