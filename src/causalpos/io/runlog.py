"""Glue for Snakemake ``script:`` entry points: log redirection, thread settings, signals.

Stopping: on Ctrl-C, Snakemake 9 only waits for its running local ``script:`` jobs and signals
none of them (``executors/local.py``: ``cancel()`` is ``pool.shutdown()``), and a job receiving
SIGTERM died without running its ``finally`` blocks. :func:`forward_interrupt_to_jobs` (installed
by common.smk) makes Snakemake SIGTERM its children on SIGINT, and :func:`logged` turns SIGTERM
into an exception (once: echoes of one interrupt cannot cut the clean-up short), so a job stops
within a fraction of a second with its temporary outputs removed (``causalpos.io.atomic``).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from causalpos.io.joblog import done_line, peak_rss_mib, process_cpu_s
from causalpos.io.progress import LineFrames
from causalpos.io.threads import bound_threads


class Terminated(SystemExit):
    """Raised in a job's main thread on SIGTERM (exit status 128 + 15), so that ``finally``
    blocks and context managers — atomic writes among them — clean up before the job exits."""


#: Seconds after a first stop signal during which more are echoes of the same interrupt (a
#: terminal's SIGINT and the SIGTERM Snakemake forwards) and are ignored; a later one kills.
ECHO_S = 5.0
_first_stop: list[float] = []


def _stop(signum, frame):
    now = time.monotonic()
    if not _first_stop:
        _first_stop.append(now)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(128 + signum)
    if now - _first_stop[0] < ECHO_S:
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def stop_on_sigterm():
    """Within the block, SIGTERM raises :class:`Terminated` (and SIGINT, unless ignored,
    KeyboardInterrupt) in the main thread, once: repeats within :data:`ECHO_S` seconds are
    ignored while the job cleans up, a later one kills it. A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _first_stop.clear()
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _stop)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def forward_interrupt_to_jobs() -> bool:
    """In the Snakemake process: on SIGINT, SIGTERM every child process (the running jobs) before
    Snakemake's own handling of the interrupt, which waits for them. Returns whether the handler
    is in place (not in a thread other than the main one, nor where SIGINT is ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, None):
        return False
    if getattr(previous, "causalpos_forwards", False):
        return True

    def forward(signum, frame):
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGTERM)
        if callable(previous):
            previous(signum, frame)  # Python's default handler: KeyboardInterrupt
        else:
            raise KeyboardInterrupt

    forward.causalpos_forwards = True
    signal.signal(signal.SIGINT, forward)
    return True


def keep_symlinked_output_dirs() -> bool:
    """Make Snakemake's end-of-run clean-up leave a symbolic link to a directory alone; returns
    whether the patch is in place.

    ``DAG.cleanup_workdir`` removes the empty parent directory of each missing input or output;
    where that parent is a link (``results/leakage -> /bigdisk/leakage``), ``os.rmdir`` raises
    ``NotADirectoryError`` and Snakemake ends on that traceback. The replacement does the same
    but skips a link and a directory that cannot be removed."""
    try:
        from snakemake.dag import DAG
    except ImportError:
        return False
    if getattr(DAG.cleanup_workdir, "causalpos_keeps_links", False):
        return True

    def cleanup_workdir(self):
        from itertools import chain

        for job in self.jobs:
            if self.is_edit_notebook_job(job):
                continue
            for io_dir in {
                os.path.dirname(f) for f in chain(job.output, job.input) if not os.path.exists(f)
            }:
                if not io_dir or os.path.islink(io_dir) or not os.path.isdir(io_dir):
                    continue
                with contextlib.suppress(OSError), os.scandir(io_dir) as entries:
                    if next(entries, None) is None:
                        os.removedirs(io_dir)

    cleanup_workdir.causalpos_keeps_links = True
    DAG.cleanup_workdir = cleanup_workdir
    return True


#: glibc ``mallopt`` parameters (malloc.h): ``M_TRIM_THRESHOLD``, ``M_MMAP_THRESHOLD``.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(mmap_threshold: int = 256 << 20, trim_threshold: int = 1 << 30) -> bool:
    """Let glibc's malloc reuse freed blocks of up to ``mmap_threshold`` bytes (kept up to
    ``trim_threshold`` above the heap's live part) instead of unmapping each on ``free``; returns
    whether the setting took (glibc only).

    A job's loops allocate the same MB-sized tensors over and over; with glibc's defaults each
    is mapped again and its pages fault on first touch (measured: ~1.4 s of system CPU per
    paper-scale simulation setting, 8.2 → 6.6 s CPU in ``benchmarks/bench_simulate.py``).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other libcs have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
    return mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)) == 1 and ok


#: The cyclic garbage collector's thresholds during a job (Python's defaults: 700, 10, 10).
JOB_GC_THRESHOLDS = (10_000, 10, 10)


#: True while :func:`collector_off_until_logged` holds the collector off.
_off_until_logged: list[bool] = []


def collector_off_until_logged() -> None:
    """The cyclic garbage collector off from here until :func:`logged` starts the job's block,
    which turns it back on. A job's script calls it before importing its stage, whose 10^5-10^6
    long-lived objects the collector would otherwise traverse again and again (measured:
    0.05-0.23 CPU-s of a job's start-up). A collector already off is left off."""
    if gc.isenabled():
        gc.disable()
        _off_until_logged.append(True)


_freeze_registered: list[bool] = []


@contextlib.contextmanager
def job_collector():
    """Within the block, the cyclic garbage collector runs less often (:data:`JOB_GC_THRESHOLDS`,
    restored after); at exit (``atexit``, once per process) ``gc.freeze()`` spares the
    finalization's last collection.

    torch and transformers create ~10^6 long-lived objects, traversed again and again with the
    default thresholds (measured: 0.5 CPU-s of a 3 CPU-s job) and once more at exit (~1 CPU-s),
    whose only effect would be to run finalizers of cyclic objects after the outputs are closed.
    """
    previous = gc.get_threshold()
    gc.set_threshold(*JOB_GC_THRESHOLDS)
    if not _freeze_registered:
        atexit.register(gc.freeze)
        _freeze_registered.append(True)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def numpy_small_pages() -> bool:
    """Stop numpy from madvising its arrays of 4 MB and more as transparent huge pages; returns
    whether numpy offers the switch. Where THP ``defrag`` is ``madvise``, a first touch compacts
    memory in the job's system time (measured on the largest ``leakage`` job: 6.9 → 3.0 s of
    system CPU); with freed memory kept (:func:`keep_freed_memory`) huge pages save little."""
    import numpy as np

    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:
        return False
    switch(False)
    return True


@contextlib.contextmanager
def logged(
    log_path: str | os.PathLike | None,
    threads: int | None = None,
    *,
    exit_when_done: bool = False,
    huge_pages: bool = True,
):
    """Send stdout, stderr and ``logging`` to ``log_path`` for the duration of the block, with
    progress bars as lines (:class:`causalpos.io.progress.LineFrames`); on success the log's
    last line is :func:`done_line` (read back by :func:`read_job_logs`).

    ``exit_when_done``: the process ends with status 0 once the block succeeded and the log is
    closed, without the interpreter's teardown (:func:`exit_now`; 0.15-0.5 CPU-s measured).
    ``threads`` (Snakemake's ``threads:``) bounds torch/BLAS threads
    (:func:`causalpos.io.threads.bound_threads`); freed memory is kept (:func:`keep_freed_memory`)
    and the collector, back on after :func:`collector_off_until_logged`, runs less often
    (:func:`job_collector`); ``huge_pages`` False: :func:`numpy_small_pages`. Exceptions are
    logged with their traceback and re-raised; one marked ``explained`` (e.g.
    :class:`~causalpos.io.atomic.DiskFullError`) ends an ``exit_when_done`` job with its message
    alone; a ``KeyError`` after opening a store of an older format is re-raised as
    :class:`~causalpos.io.integrity.StoreFormatError` naming it.
    """
    if _off_until_logged:
        _off_until_logged.clear()
        gc.enable()
    keep_freed_memory()
    if not huge_pages:
        numpy_small_pages()
    if "causalpos.io.store" in sys.modules:  # what an earlier job in this process opened
        sys.modules["causalpos.io.store"]._OLDER.clear()
    if threads:
        bound_threads(int(threads))
    if log_path is None:
        with stop_on_sigterm(), job_collector():
            yield
        if exit_when_done:
            exit_now()
        return
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", buffering=1) as raw, stop_on_sigterm(), job_collector():
        fh = LineFrames(raw)  # other libraries' progress bars as lines, no \r frames
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = fh
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        t0, cpu0 = time.perf_counter(), process_cpu_s()
        explained = None
        try:
            yield
            torch_note = "torch loaded" if "torch" in sys.modules else "no torch"
            wall, cpu = time.perf_counter() - t0, process_cpu_s()
            fh.finish()  # a frame still held: its own line, before the last one
            print(done_line(wall, cpu, cpu0, torch_note, peak_rss_mib()), file=fh)
        except (Terminated, KeyboardInterrupt) as exc:
            how = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
            logging.getLogger("causalpos").error(
                "job stopped by %s after %.1f s; temporary outputs removed",
                how,
                time.perf_counter() - t0,
                exc_info=True,
            )
            raise
        except BaseException as exc:
            if getattr(exc, "explained", False) and exit_when_done:
                # a message that says it all (a full disk, a store that is not what its path and
                # the config say): logged alone and ended on, without the library's traceback
                logging.getLogger("causalpos").error("job failed: %s", exc)
                explained = exc
            else:
                logging.getLogger("causalpos").exception("job failed")
                store = sys.modules.get("causalpos.io.store")
                if isinstance(exc, KeyError) and store is not None:
                    named = store.older_store_error(exc)
                    if named is not None:
                        raise named from exc
                raise
        finally:
            fh.finish()
            root.removeHandler(handler)
            sys.stdout, sys.stderr = old_out, old_err
    if explained is not None:
        raise SystemExit(f"{type(explained).__name__}: {explained}")
    if exit_when_done:  # reached only when the block succeeded; the log is closed
        exit_now()


def exit_now() -> None:
    """End this process with status 0 at once: stdout, stderr and ``logging`` flushed, then
    ``os._exit`` (no atexit handlers, no module finalization), for a job whose outputs are closed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(0)
