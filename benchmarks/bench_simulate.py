"""Benchmark of :func:`causalpos.paper1.simulate.run_simulation` at paper scale (100,000 × 50 positions × d = 64, 4 layers).

Prints the median wall time over ``--repeats`` runs (after one warm-up run unless ``--no-warmup``),
the CPU time, the peak resident memory of the whole process (``ru_maxrss``: Python, torch and the
result included) and the load average, as a Markdown table for docs/performance.md.

    .venv/bin/python benchmarks/bench_simulate.py --repeats 5
    .venv/bin/python benchmarks/bench_simulate.py --rope --repeats 3

Other processes on the machine slow the wall time (CPU time much less): the load average is printed
so a reader can judge. Runs are seeded identically, so every run computes the same thing.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import time


def _rss_mb() -> float:
    # ru_maxrss is in KiB on Linux, bytes on macOS
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-samples", type=int, default=100_000)
    ap.add_argument("--seq-len", type=int, default=50)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=0.0)
    ap.add_argument("--norm", choices=("l2", "layernorm"), default="l2")
    ap.add_argument("--scaling", choices=("none", "sqrt_d", "d"), default="none")
    ap.add_argument("--rope", action="store_true")
    ap.add_argument("--bidirectional", action="store_true")
    ap.add_argument("--chunk-size", type=int, default=None)
    ap.add_argument(
        "--threads", type=int, default=None, help="workers (default: torch.get_num_threads())"
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--malloc-default",
        action="store_true",
        help="leave glibc's malloc as it is (jobs keep freed memory: runlog.keep_freed_memory)",
    )
    args = ap.parse_args(argv)
    if not args.malloc_default:
        from causalpos.io.runlog import keep_freed_memory

        keep_freed_memory()

    import torch

    from causalpos.paper1.settings import SimulationSettings
    from causalpos.paper1.simulate import DEFAULT_CHUNK, run_simulation

    kw = dict(
        alpha=args.alpha,
        norm=args.norm,
        scaling=args.scaling,
        rope=args.rope,
        causal=not args.bidirectional,
        n_samples=args.n_samples,
        seq_len=args.seq_len,
        dim=args.dim,
        n_layers=args.layers,
        seed=args.seed,
    )
    run = dict(chunk_size=args.chunk_size, num_threads=args.threads)
    rss_imports = _rss_mb()
    load_before = os.getloadavg()
    if not args.no_warmup:
        run_simulation(SimulationSettings(**kw), **run)
    walls, cpus = [], []
    for r in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        run_simulation(SimulationSettings(**kw), **run)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        print(
            f"run {r + 1}/{args.repeats}: wall {walls[-1]:.2f} s, cpu {cpus[-1]:.2f} s",
            file=sys.stderr,
            flush=True,
        )
    load_after = os.getloadavg()
    flags = (", RoPE" if args.rope else "") + (", bidirectional" if args.bidirectional else "")
    setting = (
        f"{args.n_samples:,} seqs × {args.seq_len} pos × d={args.dim}, {args.layers} layers, "
        f"α={args.alpha:g}, {args.norm}/{args.scaling}{flags}"
    )
    workers = args.threads or torch.get_num_threads()
    print(f"\ncommand: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"{workers} workers, chunk {args.chunk_size or DEFAULT_CHUNK}"
    )
    print(f"load average (1 min) before/after: {load_before[0]:.2f} / {load_after[0]:.2f}\n")
    print(
        "| setting | runs | median wall (s) | min–max wall (s) | median CPU (s) | peak RSS (MB) "
        "| RSS after imports (MB) |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {setting} | {len(walls)} | {statistics.median(walls):.2f} | {min(walls):.2f}–{max(walls):.2f} | "
        f"{statistics.median(cpus):.2f} | {_rss_mb():.0f} | {rss_imports:.0f} |"
    )


if __name__ == "__main__":
    main()
