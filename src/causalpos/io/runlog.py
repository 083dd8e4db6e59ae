"""Glue for Snakemake ``script:`` entry points: log redirection and thread settings.

Kept out of the science modules: scripts call :func:`setup` first, then one library function.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path


@contextlib.contextmanager
def logged(log_path: str | os.PathLike | None, threads: int | None = None):
    """Send stdout, stderr and ``logging`` to ``log_path`` for the duration of the block.

    Also bounds torch/BLAS threads to ``threads`` (Snakemake's ``threads:``), so a job never uses
    more cores than the scheduler gave it. Exceptions are logged with their traceback and re-raised.
    """
    if threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        try:
            import torch

            torch.set_num_threads(int(threads))
        except ImportError:  # pragma: no cover - torch is a hard dependency of the package
            pass
    if log_path is None:
        yield
        return
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", buffering=1) as fh:
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = fh
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        t0 = time.perf_counter()
        try:
            yield
            print(f"done in {time.perf_counter() - t0:.1f} s", file=fh)
        except BaseException:
            logging.getLogger("causalpos").exception("job failed")
            raise
        finally:
            root.removeHandler(handler)
            sys.stdout, sys.stderr = old_out, old_err
