"""A job's thread bounds: the environment torch and the BLAS libraries read when they load, and
the pools already loaded (torch's, numpy's and scipy's OpenBLAS) set directly
(:func:`causalpos.io.runlog.logged` applies them with Snakemake's ``threads:``)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

#: Thread counts torch (OpenMP, MKL) and numpy's BLAS read when they load.
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

#: The C functions that set an OpenBLAS pool's threads: numpy's and scipy's bundled builds
#: (``scipy_openblas``, 64- and 32-bit integers), a system OpenBLAS.
_OPENBLAS_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def bound_loaded_blas(threads: int) -> list[str]:
    """Set the threads of every OpenBLAS already loaded in this process (numpy's, scipy's) to
    ``threads``; returns the libraries set (Linux: found in ``/proc/self/maps``). OpenBLAS reads
    ``OPENBLAS_NUM_THREADS`` only when it loads, so a script that imported numpy first would keep
    a pool of one thread per core (measured: five 640 × 640 ``eigh``, 2.95 → 0.28 CPU-s).
    """
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    import ctypes

    done = []
    for path in sorted(set(re.findall(r"(/\S*openblas\S*\.so[.\d]*)", maps))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _OPENBLAS_SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                setter(int(threads))
                done.append(path)
                break
    return done


def bound_threads(threads: int) -> None:
    """Bound this process's torch/BLAS threads to ``threads``: through the environment (read when
    they load, so a job that needs no model never imports torch), and directly for torch and an
    OpenBLAS already loaded (:func:`bound_loaded_blas`)."""
    for var in _THREAD_VARS:
        os.environ[var] = str(int(threads))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))
    if "numpy" in sys.modules:  # its BLAS already loaded: set its pool directly
        bound_loaded_blas(int(threads))
