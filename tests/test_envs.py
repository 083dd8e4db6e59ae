"""The conda environments (used under --use-conda) pin exactly what requirements.txt pins."""

from __future__ import annotations

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
