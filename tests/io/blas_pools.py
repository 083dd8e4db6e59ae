"""The source of ``pools()`` for a child interpreter: each loaded OpenBLAS's pool size, read through
OpenBLAS's own getter (independent of causalpos.io.threads, which sets them)."""

POOLS = r"""
import ctypes, re

def pools():
    maps = open("/proc/self/maps").read()
    out = {}
    for path in sorted(set(re.findall(r"(/\S*openblas\S*\.so[.\d]*)", maps))):
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                     "openblas_get_num_threads64_", "openblas_get_num_threads"):
            get = getattr(lib, name, None)
            if get is not None:
                out[path] = get()
                break
    return out
"""
