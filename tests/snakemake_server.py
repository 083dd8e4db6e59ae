"""``python -m snakemake`` without the interpreter's start and Snakemake's imports, for the tests
(tests/wfutil.py): Snakemake and its plugin registries are loaded once, then each request (one
JSON line on stdin: ``cwd``, ``args``, ``env``, ``stdout``, ``stderr``, ``timeout``) runs in a
forked child, in its own process group, that enters ``cwd``, takes ``env`` as its environment,
writes its output to the two files and calls Snakemake's command line with ``args``. The
reply (one JSON line on stdout) is ``{"rc": exit code, "cpu_s": CPU seconds}``, ``rc`` null
when the run passed ``timeout`` seconds (its process group is killed). Nothing of the project
is imported here, so each run imports the copy's own ``src/`` as ``python -m snakemake`` would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback


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
    main()
