"""The workflow passes `snakemake --lint` and `snakefmt --check` (as the catalog workflows' CI does);
the Python passes `ruff check` and `ruff format --check` (line length 100, pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.wfutil import REPO


@pytest.mark.slow
def test_snakemake_lint_is_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "-n"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Lints for" not in out, out


def test_snakefmt_check_is_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


PYTHON_TREES = ("src", "tests", "workflow/scripts", "benchmarks")


def test_ruff_check_is_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", *PYTHON_TREES],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_check_is_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *PYTHON_TREES],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
