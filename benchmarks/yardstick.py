"""The machine's speed as one number, so timings from different days can be compared.

The build machines' speed varies by up to 2x from day to day, and every heavy stage of the pipeline
is single-threaded float32 matrix work (extraction, simulation, training). The yardstick is the
machine's single-thread sgemm rate: torch's float32 matmul of two 1024 x 1024 matrices on one
thread, the best of several timed repeats (the best, not the median: the machine's capability,
not the noise of the moment), in GFLOP/s.

A wall time ``t`` measured at yardstick ``r`` is reported also **at the reference speed**
``REFERENCE_GFLOPS`` (95 GFLOP/s, the rate of these build machines on a good day) as
``t * r / REFERENCE_GFLOPS``: what the same work would take on the reference machine, assuming the
time scales with the sgemm rate. That holds between machines of one kind (the same vector
instructions): the pipeline's jobs are CPU-bound. It does not hold across kinds: a machine whose
torch runs AVX-512 kernels reads about 1.6-1.9 times an AVX2 machine's sgemm rate, while the
pipeline's Python, sparse and memory-bound work (its paper-2 summaries, light jobs, scheduling) is
no faster there (docs/performance.md). The yardstick prints the kernels torch chose
(``torch.backends.cpu.get_cpu_capability()``); a time at the reference speed is stated for a
machine of the reference's kind only.

Beside it, the same matmul in bfloat16 (``bf16_gflops``), the dtype Gemma-3 runs in on the CPU
in the default run: with native bfloat16 instructions (AVX512-BF16, AMX) its matmuls run in
hardware (there Gemma-3 measured faster in bfloat16 than in float32: config.yaml); without them
they are emulated, at about a fifth of the sgemm rate (seen here: 31 against 170 GFLOP/s on an
AVX-512 CPU without AVX512-BF16, where Gemma's extraction took 3x its time elsewhere). A kind is
the kernels and this ratio together.

    python benchmarks/yardstick.py            # prints the rates
    python benchmarks/yardstick.py --json     # {"sgemm_gflops": ..., "reference_gflops": 95.0,
                                              #  "cpu_capability": "AVX2", "bf16_gflops": ...}
"""

from __future__ import annotations

import argparse
import json
import time

#: Single-thread sgemm rate of the build machines on a good day (GFLOP/s): the speed at which the
#: performance goals (default run <= 15 min, test suite <= 6 min) are stated.
REFERENCE_GFLOPS = 95.0


def cpu_capability() -> str:
    """The vector instructions of torch's CPU kernels on this machine ("AVX2", "AVX512", ...):
    the machine's kind, within which a sgemm rate compares machines."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def sgemm_gflops(
    n: int = 1024, repeats: int = 20, threads: int = 1, dtype: str = "float32"
) -> float:
    """Best single-thread matmul rate (GFLOP/s) of ``(n, n) @ (n, n)`` in ``dtype`` (float32:
    sgemm; bfloat16) over ``repeats``.

    One matmul is ``2 n^3`` floating-point operations. The thread count of torch is restored.
    """
    import torch

    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype is float32 or bfloat16, got {dtype!r}")
    if n < 1 or repeats < 1 or threads < 1:
        raise ValueError(f"n, repeats and threads must be >= 1, got {n}, {repeats}, {threads}")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen).to(getattr(torch, dtype))
        b = torch.randn(n, n, generator=gen).to(getattr(torch, dtype))
        out = torch.empty(n, n, dtype=a.dtype)
        torch.mm(a, b, out=out)  # warm-up: page in, pick the kernel
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return 2.0 * n**3 / best / 1e9


def at_reference(seconds: float, gflops: float, reference: float = REFERENCE_GFLOPS) -> float:
    """``seconds`` measured on a machine of sgemm rate ``gflops``, expressed at ``reference``."""
    if gflops <= 0 or reference <= 0:
        raise ValueError(f"rates must be positive, got {gflops} and {reference}")
    return seconds * gflops / reference


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rate = sgemm_gflops(args.n, args.repeats)
    kind = cpu_capability()
    out = {"sgemm_gflops": round(rate, 1), "reference_gflops": REFERENCE_GFLOPS}
    out["cpu_capability"] = kind
    # fewer repeats: an emulated bfloat16 matmul takes ~5x as long
    bf16 = sgemm_gflops(args.n, max(1, args.repeats // 4), dtype="bfloat16")
    out["bf16_gflops"] = round(bf16, 1)
    print(
        json.dumps(out)
        if args.json
        else f"single-thread sgemm: {rate:.1f} GFLOP/s ({kind}); bfloat16 {bf16:.1f} GFLOP/s"
    )
    return out


if __name__ == "__main__":
    main()
