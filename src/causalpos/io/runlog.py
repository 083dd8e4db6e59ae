"""Glue for Snakemake ``script:`` entry points: log redirection, thread settings, signals.

Kept out of the science modules: scripts call :func:`logged` first, then one library function.

Stopping: Snakemake 9 runs a local ``script:`` job as a child process from a worker thread and, on
Ctrl-C (SIGINT, raised as KeyboardInterrupt in its main thread), only shuts its thread pool down —
it waits for every running job to finish and signals none of them (``executors/local.py``:
``cancel()`` is ``pool.shutdown()``; script jobs are not even registered for ``shell.kill``). A
job therefore stops at once only when the signal reaches it too: a terminal's Ctrl-C does (the
whole foreground process group gets SIGINT), ``kill -INT <snakemake pid>`` did not, and a job
receiving SIGTERM (cluster cancel, ``kill``) died without running its ``finally`` blocks.
:func:`forward_interrupt_to_jobs` (installed by the workflow's common.smk) makes Snakemake send
SIGTERM to its child processes on SIGINT, and :func:`logged` turns SIGTERM into an exception (once:
the echoes of one interrupt cannot cut the clean-up short), so the job stops within a fraction of
a second with its temporary outputs removed (atomic writes, ``causalpos.io.atomic``) and nothing
that looks finished.
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
#: terminal's SIGINT to the process group and the SIGTERM Snakemake forwards arrive together) and
#: are ignored, so they cannot cut the clean-up short; a later one kills the job at once.
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


def terminate_children(sig: int = signal.SIGTERM) -> list[int]:
    """Send ``sig`` to every descendant process of this one; returns their pids."""
    import psutil

    pids = []
    for child in psutil.Process().children(recursive=True):
        try:
            child.send_signal(sig)
            pids.append(child.pid)
        except psutil.Error:
            pass
    return pids


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
        terminate_children(signal.SIGTERM)
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

    After every run Snakemake removes the empty parent directory of each input or output that is
    missing (``DAG.cleanup_workdir``: ``os.removedirs(dirname)``); where that parent is a symbolic
    link to an (empty) directory elsewhere, e.g. ``results/leakage -> /bigdisk/leakage`` after
    its first job failed, ``os.rmdir`` raises ``NotADirectoryError`` and Snakemake ends with that
    traceback instead of its own report. The replacement does what Snakemake's does, except that
    it skips a parent that is a symbolic link (the link and what it points to are the user's) and
    a directory that cannot be removed."""
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
                try:
                    with os.scandir(io_dir) as entries:
                        if next(entries, None) is None:
                            os.removedirs(io_dir)
                except OSError:
                    pass

    cleanup_workdir.causalpos_keeps_links = True
    DAG.cleanup_workdir = cleanup_workdir
    return True


#: glibc ``mallopt`` parameters (malloc.h): ``M_TRIM_THRESHOLD``, ``M_MMAP_THRESHOLD``.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(mmap_threshold: int = 256 << 20, trim_threshold: int = 1 << 30) -> bool:
    """Let glibc's malloc reuse freed blocks of up to ``mmap_threshold`` bytes instead of handing
    every block of a few MB back to the kernel; returns whether the setting took (glibc only).

    By default glibc serves blocks above 128 kB-32 MB with ``mmap`` and unmaps them on ``free``,
    and trims the heap's free top: the next tensor of the same size is mapped again and each of its
    4 kB pages faults on first touch. A job's loops allocate the same few MB-sized tensors over and
    over (a simulation chunk, a batch of scores): measured, ~0.8 M page faults and ~1.4 s of
    system CPU per paper-scale simulation setting (8.2 → 6.6 s CPU in
    ``benchmarks/bench_simulate.py``, which calls this as the jobs do). Freed memory stays with
    the process for reuse, up to ``trim_threshold`` above the heap's live part: the peak does not
    grow with the work done.
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
    which turns it back on (with :data:`JOB_GC_THRESHOLDS`). A job's script calls it before it
    imports its stage: the imports create 10^5-10^6 objects that live as long as the job, and
    with the default thresholds the collector traverses them again and again while they are
    imported (measured: 0.05 CPU-s of a table job's 0.55 of start-up, 0.11 of a paper-2 figure
    job's 1.0, 0.15-0.23 of a model job's 1.6-2.2; 180-500 collections). Nothing but cyclic
    garbage waits: what the imports discard without cycles is freed by reference counting as
    always. A collector already off is left off (and :func:`logged` leaves it so)."""
    if gc.isenabled():
        gc.disable()
        _off_until_logged.append(True)


def _collector_back_on() -> None:
    if _off_until_logged:
        _off_until_logged.clear()
        gc.enable()


_freeze_registered: list[bool] = []


@contextlib.contextmanager
def job_collector():
    """Within the block, the cyclic garbage collector runs less often; at interpreter exit it
    leaves the objects alive then alone.

    Importing torch and transformers creates ~10^6 objects that live as long as the job; with
    the default thresholds the collector traverses them again and again while they are imported
    (measured: 0.5 CPU-s of a 3 CPU-s job that builds a tiny model, as much of a length-generalization
    job), and at exit Python's finalization collects over all of them once more (~1 CPU-s after
    a job that imported torch, most of its wall time past the job's last log line). Garbage
    without cycles is freed by reference counting as always; cyclic garbage waits for up to
    10,000 allocations instead of 700. At exit (an ``atexit`` callback, registered once per
    process, run before the interpreter's finalization) ``gc.freeze()`` takes every object out
    of the collector's sight: the process ends without that last collection, whose only effect
    would be to run finalizers of objects in reference cycles — a job's outputs are complete and
    closed when its block ends (atomic writes), and its log handlers are flushed by
    ``logging``'s own exit callback. The previous thresholds are restored on leaving the block.
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


def _older_store_error(exc: KeyError):
    """A job's ``KeyError`` named as a store written by older code (the store, its format, the
    rebuild command) when the job opened one; None otherwise."""
    store = sys.modules.get("causalpos.io.store")
    return None if store is None else store.older_store_error(exc)


def numpy_small_pages() -> bool:
    """Stop numpy from asking the kernel for transparent huge pages on its large arrays (from
    4 MB on numpy calls ``madvise(MADV_HUGEPAGE)``, its default on Linux); returns whether
    numpy offers the switch.

    Where the kernel's THP ``defrag`` setting is ``madvise`` (the build VM's), the first touch of
    such an array compacts memory synchronously, in the job's system time; with the freed
    memory kept for reuse (:func:`keep_freed_memory`) huge pages save little. Measured on the
    largest ``leakage`` job (SmolLM2's twelve runs, its arrays up to 3.6 GB resident, idle
    build VM otherwise shared): 6.9 → 3.0 s of system CPU, 22.5 → 19.5 s of CPU in all."""
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
    progress bars as lines, never ``\\r`` frames (:class:`causalpos.io.progress.LineFrames`); when
    it succeeds, the log's last line records its wall time, the process's CPU time and start-up,
    its peak resident memory and whether torch was loaded (:func:`done_line`;
    :func:`read_job_logs` reads a run's).

    ``exit_when_done``: a job's process (a Snakemake ``script:``, whose block is its last
    statement) ends as soon as the block has succeeded and the log is closed, with status 0 and
    without the interpreter's teardown (:func:`exit_now`): the finalization of every imported
    module and object, 0.15-0.3 CPU-s in a process that imported xarray, zarr and matplotlib and
    ~0.5 in one that imported torch, measured, which nothing reads. A failing block raises as
    without it.

    Also bounds torch/BLAS threads to ``threads`` (Snakemake's ``threads:``), so a job never uses
    more cores than the scheduler gave it: through the environment, which torch and the BLAS
    libraries read when they load, so a job that needs no model never imports torch (1.3 s of
    CPU per job); torch and OpenBLAS already loaded are set directly
    (:func:`causalpos.io.threads.bound_threads`). Freed memory is kept for reuse
    (:func:`keep_freed_memory`), and the garbage collector, back on where the script's start-up
    held it off (:func:`collector_off_until_logged`), runs less often (:func:`job_collector`);
    ``huge_pages`` False: numpy's arrays are not madvised as huge pages
    (:func:`numpy_small_pages`, for the jobs whose work is numpy's large arrays).
    Exceptions are logged with their traceback and re-raised (one marked ``explained``, such as
    :class:`~causalpos.io.atomic.DiskFullError`, ends a job of ``exit_when_done`` with its
    message alone: the job's status 1, the message on its stderr, no traceback); a
    ``KeyError`` in a job that opened a store of an older format is re-raised as
    :class:`~causalpos.io.integrity.StoreFormatError`, naming that store and its rebuild command.
    """
    _collector_back_on()
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
        except KeyError as exc:
            named = _older_store_error(exc)
            logging.getLogger("causalpos").exception("job failed")
            if named is not None:
                raise named from exc
            raise
        except BaseException as exc:
            if getattr(exc, "explained", False) and exit_when_done:
                # a message that says it all (a full disk, a store that is not what its path and
                # the config say): logged alone and ended on, without the library's traceback
                logging.getLogger("causalpos").error("job failed: %s", exc)
                explained = exc
            else:
                logging.getLogger("causalpos").exception("job failed")
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
    ``os._exit`` (no atexit handlers, no module finalization). For a job whose outputs are all
    written and closed: what is left of the interpreter's work is freeing memory the kernel
    reclaims anyway."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(0)
