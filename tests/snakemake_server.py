"""``python -m snakemake`` without the interpreter's start and Snakemake's imports, for the tests
(tests/wfutil.py): Snakemake and its plugin registries are loaded once, then each request (one
JSON line on stdin: ``cwd``, ``args``, ``env``, ``stdout``, ``stderr``, ``timeout``) runs in a
forked child, in its own process group, that enters ``cwd``, takes ``env`` as its environment,
writes its output to the two files and calls Snakemake's command line with ``args``. The
reply (one JSON line on stdout) is ``{"rc": exit code, "cpu_s": CPU seconds}``, ``rc`` null
when the run passed ``timeout`` seconds (its process group is killed). Nothing of the project
is imported here, so each run imports the copy's own ``src/`` as ``python -m snakemake`` would.
Runs of the SLURM tests check their jobs' states at a steady interval (:func:`steady_status_checks`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback

#: Set (to anything) in a run's environment: the SLURM executor plugin checks its jobs' states
#: every ``--seconds-between-status-checks`` throughout (tests/cluster/slurm.py sets it).
STEADY_STATUS_CHECKS = "CAUSALPOS_TEST_STEADY_STATUS_CHECKS"


def steady_status_checks() -> None:
    """Hold the SLURM executor plugin's wait between status checks at
    ``--seconds-between-status-checks``: the plugin (2.8) lengthens it by 10 s after every round
    in which none of its jobs ended (up to 180 s) and shortens it to
    ``--slurm-init-seconds-before-status-checks`` after a round in which one did. With jobs of
    seconds the waits grew to 12, 22, 32 s between checks: an ended job was seen up to half a
    minute late. The states are still read from ``squeue`` by the plugin, each second."""
    try:
        from snakemake_executor_plugin_slurm import Executor
    except ImportError:
        return

    def configured(self):
        return self.workflow.remote_execution_settings.seconds_between_status_checks

    Executor.next_seconds_between_status_checks = property(configured, lambda self, value: None)


def _child(request: dict, cli, workflow) -> int:
    os.setpgrp()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the requests' pipe stays the server's
    os.close(null)
    os.chdir(request["cwd"])
    workflow.Workflow._rundir = os.getcwd()  # read at Snakemake's import, for its log header
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.argv = [sys.executable, "-m", "snakemake", *request["args"]]
    if os.environ.get(STEADY_STATUS_CHECKS):
        steady_status_checks()
    try:
        cli.main(request["args"])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def _wait(pid: int, timeout: float) -> tuple[int | None, float]:
    """(exit code or None past ``timeout``, CPU seconds of the child and what it waited for)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            _, _, usage = os.wait4(pid, 0)
            return None, usage.ru_utime + usage.ru_stime
        time.sleep(0.02)


def run_once(args: list[str]) -> None:
    """``python -m snakemake ARGS`` in this process (``CAUSALPOS_TEST_FORK=0``), with
    :data:`STEADY_STATUS_CHECKS` honoured as in the forked runs."""
    import snakemake.cli as cli

    sys.argv = [sys.executable, "-m", "snakemake", *args]
    if os.environ.get(STEADY_STATUS_CHECKS):
        steady_status_checks()
    cli.main(args)


def main() -> None:
    import snakemake.api  # noqa: F401
    import snakemake.cli as cli
    import snakemake.dag  # noqa: F401
    import snakemake.persistence  # noqa: F401
    import snakemake.workflow as workflow

    cli.get_argument_parser()  # fills the plugin registries (singletons) once
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request, cli, workflow)
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        rc, cpu = _wait(pid, request["timeout"])
        sys.stdout.write(json.dumps({"rc": rc, "cpu_s": cpu}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        run_once(sys.argv[2:])
    else:
        main()
