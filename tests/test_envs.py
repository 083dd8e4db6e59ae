"""The lock and the conda environments: requirements.txt pins every package the README's install
brings in (transitive ones included), the installed set is exactly the lock, and the conda
environments (used under --use-conda) pin what the lock pins."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

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
    assert pins["torch"] == "2.13.0"  # no local label: PyPI's CUDA build on a GPU cluster
    assert pins["zarr"].startswith("3.1.")


def _installed() -> dict[str, md.Distribution]:
    """Every distribution of this environment but the installer's own and the project."""
    out = {}
    for dist in md.distributions():
        name = _norm(dist.metadata["Name"])
        if name not in ("pip", "causalpos"):
            out[name] = dist
    return out


def _public(version: str) -> str:
    return version.split("+", 1)[0]  # torch's CPU build is 2.13.0+cpu


#: What a CUDA build of torch adds to its requirements (a GPU cluster's install, not this lock's).
CUDA_EXTRAS = re.compile(r"^(nvidia-.*|triton|cuda-.*)$")


def test_installed_set_is_exactly_the_lock():
    """The README's install gives the locked versions and nothing else: a package that floats in
    (a new transitive requirement) or a version that moved fails here."""
    pins, installed = requirements(), _installed()
    extra = {
        n: d.version for n, d in installed.items() if n not in pins and not CUDA_EXTRAS.match(n)
    }
    missing = sorted(set(pins) - set(installed))
    moved = {
        n: (pins[n], _public(d.version))
        for n, d in installed.items()
        if n in pins and _public(d.version) != pins[n]
    }
    assert not extra, f"installed but not in requirements.txt (regenerate the lock): {extra}"
    assert not missing, f"in requirements.txt but not installed: {missing}"
    assert not moved, f"installed versions differ from the lock (lock, installed): {moved}"


def _requires(dist: md.Distribution) -> list[str]:
    """The names a distribution requires on this interpreter and platform (no extras)."""
    env = {"extra": "", "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    out = []
    for text in dist.requires or ():
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            out.append(_norm(req.name))
    return out


def test_lock_is_closed_under_requirements():
    """Every requirement of every locked package is itself locked, so `pip install -r
    requirements.txt` has nothing left to choose."""
    pins, installed = requirements(), _installed()
    unlocked = {
        (name, dep)
        for name in pins
        if name in installed
        for dep in _requires(installed[name])
        if dep not in pins and not CUDA_EXTRAS.match(dep)
    }
    assert not unlocked, f"(package, requirement) pairs the lock leaves open: {sorted(unlocked)}"


def test_lock_keeps_the_direct_pins_of_requirements_in():
    """requirements.txt is generated from requirements.in: each direct pin there is the lock's."""
    direct = {}
    for line in (REPO / "requirements.in").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            m = PIN.match(line)
            assert m, f"requirements.in: {line!r} is not an exact pin (name==version)"
            direct[_norm(m.group(1))] = m.group(2)
    pins = requirements()
    assert {n: pins.get(n) for n in direct} == direct
    assert "torch" in direct and "snakemake" in direct


def test_the_install_check_fails_on_a_floating_package(monkeypatch):
    """The check above is not vacuous: a lock without one installed package, or with another
    version of one, is found out."""
    pins = requirements()
    monkeypatch.setattr(sys.modules[__name__], "requirements", lambda: {
        **{k: v for k, v in pins.items() if k != "platformdirs"}, "numpy": "0.0.1"
    })  # fmt: skip
    with pytest.raises(AssertionError, match="platformdirs"):
        test_installed_set_is_exactly_the_lock()
    monkeypatch.setattr(sys.modules[__name__], "requirements", lambda: {**pins, "numpy": "0.0.1"})
    with pytest.raises(AssertionError, match="numpy"):
        test_installed_set_is_exactly_the_lock()


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


def test_env_pip_sections_are_the_locks_closure():
    """Each envs/*.yaml pins its roots and everything they pull in, as benchmarks/lock.py
    derives them from the lock (a regenerated lock must regenerate the environments)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import lock

    derived = lock.derived_files()
    for env_file in ENV_FILES:
        assert env_file.read_text() == derived[env_file], f"{env_file.name}: run benchmarks/lock.py"
    models = set(lock.env_pins(lock.read_lock(), "models"))
    assert {"filelock==" + requirements()["filelock"], "torch==2.13.0"} <= models
    assert not any(p.startswith(("torch==", "transformers==")) for p in lock.env_pins(
        lock.read_lock(), "analysis"))  # fmt: skip


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
