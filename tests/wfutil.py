"""Helpers for workflow tests: a copy of the pipeline in a temporary directory, and dry-run parsing."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The tests' end-to-end config (tests/conftest.py runs it once per session).
SMOKE = "configs/smoke.yaml"
COPIED = ("Snakefile", "config.yaml", "configs", "workflow", "envs", "profiles", "src", "docs")


def copy_pipeline(dest: Path) -> Path:
    """Copy what a user's clone holds (no results, no caches) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


#: A process with Snakemake imported that forks one child per run (tests/snakemake_server.py):
#: each run is ``python -m snakemake ARGS`` in ``workdir`` with this process's environment, less
#: the interpreter's start and Snakemake's imports (≈ 1.2 CPU-s of a 1.7 CPU-s dry run).
#: ``CAUSALPOS_TEST_FORK=0`` starts each run as its own ``python -m snakemake`` instead.
_SERVER: dict = {}
_SERVER_LOCK = threading.Lock()
#: CPU seconds of the forked runs so far in this process (their own and their jobs'): a forked
#: run is the server's child, not this process's, so resource.RUSAGE_CHILDREN here misses it.
FORKED_CPU_S = [0.0]


def _server() -> subprocess.Popen:
    proc = _SERVER.get(os.getpid())
    if proc is None or proc.poll() is not None:
        script = Path(__file__).with_name("snakemake_server.py")
        proc = subprocess.Popen(
            [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        _SERVER[os.getpid()] = proc
        atexit.register(_stop_server, proc)
    return proc


def _stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.stdin.close()
        proc.wait(timeout=60)


def _forked(workdir: Path, args: tuple[str, ...], timeout: int) -> subprocess.CompletedProcess:
    with _SERVER_LOCK, tempfile.TemporaryDirectory(prefix="snakemake-run-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        request = {"cwd": str(Path(workdir).resolve()), "args": list(args), "env": dict(os.environ)}
        request.update(stdout=str(out), stderr=str(err), timeout=timeout)
        server = _server()
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        reply = server.stdout.readline()
        if not reply:
            raise RuntimeError(f"the Snakemake fork server exited ({server.wait()})")
        reply = json.loads(reply)
        rc = reply["rc"]
        FORKED_CPU_S[0] += reply["cpu_s"]
        stdout = out.read_text(errors="replace")
        stderr = err.read_text(errors="replace")
    cmd = [sys.executable, "-m", "snakemake", *args]
    if rc is None:
        raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(cmd, rc, stdout, stderr)


def snakemake(
    workdir: Path, *args: str, check: bool = True, timeout: int = 2700
) -> subprocess.CompletedProcess:
    """Run ``python -m snakemake`` in ``workdir`` (so its profiles/default applies, as for a user).

    The timeout covers a whole smoke run on a 2-core machine while the other test worker runs its
    own pipeline (the SLURM or paper-shape run): minutes, not seconds."""
    if os.environ.get("CAUSALPOS_TEST_FORK", "1") == "0":
        server = Path(__file__).with_name("snakemake_server.py")
        steady = os.environ.get("CAUSALPOS_TEST_STEADY_STATUS_CHECKS")  # the SLURM tests
        cmd = [str(server), "--run"] if steady else ["-m", "snakemake"]
        proc = subprocess.run(
            [sys.executable, *cmd, *args],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    else:
        proc = _forked(workdir, args, timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}"
            f"\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


_JOB = re.compile(r"^(?:local)?rule (\w+):\s*$")
_WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")


def planned_jobs(workdir: Path, *args: str) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run would execute, sorted."""
    proc = snakemake(workdir, "-n", *args, check=False)
    if proc.returncode != 0:
        raise AssertionError(proc.stderr)
    jobs: list[tuple[str, str]] = []
    for line in (proc.stdout + proc.stderr).splitlines():
        m = _JOB.match(line)
        if m:
            jobs.append((m.group(1), ""))
            continue
        m = _WILDCARDS.match(line)
        if m and jobs:
            jobs[-1] = (jobs[-1][0], m.group(1).strip())
    return sorted(jobs)


def rule_counts(jobs: list[tuple[str, str]]) -> Counter:
    return Counter(rule for rule, _ in jobs if rule != "all")


_REASON = re.compile(r"^\s+reason: (.*)$")


def planned_reasons(workdir: Path, *args: str) -> list[tuple[str, str]]:
    """(rule, reason) of every job a dry run would execute, in the order printed."""
    proc = snakemake(workdir, "-n", *args, check=False)
    if proc.returncode != 0:
        raise AssertionError(proc.stderr)
    out: list[tuple[str, str]] = []
    for line in (proc.stdout + proc.stderr).splitlines():
        m = _JOB.match(line)
        if m:
            out.append((m.group(1), ""))
            continue
        m = _REASON.match(line)
        if m and out:
            out[-1] = (out[-1][0], m.group(1).strip())
    return out
