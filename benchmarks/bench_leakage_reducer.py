"""CPU cost of paper 2's extraction-time reducer, by setting, on synthetic scores of SmolLM2's shape.

    python benchmarks/bench_leakage_reducer.py [--batches 6] [--layers 30] [--heads 9] [--seq-len 128]

One update per (batch, layer) of (8, heads, T, T) causal float32 scores, for each setting:

- ``per-prompt``: the default fits × windows ``all, early16, early32, early64, late``, no
  prompt-mean maps (the reducer of a variant the permutation test does not read);
- ``+ maps``: + the summed maps (``mean_maps``);
- ``+ full32``: + the window ``full32`` in every per-prompt fit;
- ``headline``: + the per-prompt sums of windows ``all, full32`` (the default config's reducer).

Settings are interleaved batch by batch in rotating order (a slow spell hits all alike); the
median CPU time per batch of each setting (its first batch, which builds the designs, left out)
is printed, relative to ``per-prompt``, with the yardstick.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from yardstick import sgemm_gflops  # noqa: E402

from causalpos.paper2.extraction.reducers import LeakageReducer  # noqa: E402

FITS = ("saturated+query", "linear+query", "saturated+key")
WINDOWS = ("all", "early16", "early32", "early64", "late")
SETTINGS = {
    "per-prompt": dict(windows=WINDOWS, mean_maps=False),
    "+ maps": dict(windows=WINDOWS, mean_maps=True),
    "+ full32": dict(windows=WINDOWS + ("full32",), mean_maps=True),
    "headline": dict(windows=WINDOWS + ("full32",), expected_stats=["all", "full32"]),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    T = a.seq_len
    g = torch.Generator().manual_seed(0)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    scores = [
        torch.where(causal, torch.randn(a.batch_size, a.heads, T, T, generator=g), torch.nan)
        for _ in range(a.layers)
    ]
    reducers = {k: LeakageReducer(fits=FITS, **kw) for k, kw in SETTINGS.items()}
    times = {k: [] for k in SETTINGS}
    names = list(SETTINGS)
    yard0 = sgemm_gflops()
    for b in range(a.batches):
        ids = np.arange(b * a.batch_size, (b + 1) * a.batch_size)
        order = names[b % len(names) :] + names[: b % len(names)]
        for k in order:
            t0 = time.process_time()
            for layer, s in enumerate(scores):
                reducers[k].update(layer, s, ids)
            times[k].append(time.process_time() - t0)
    yard1 = sgemm_gflops()
    times = {k: v[1:] or v for k, v in times.items()}  # the first batch builds each design
    base = statistics.median(times["per-prompt"])
    print(
        f"{a.layers} layers x {a.heads} heads, T = {T}, batches of {a.batch_size}; "
        f"yardstick {yard0:.1f} / {yard1:.1f} GFLOP/s (before / after)"
    )
    print("| setting | CPU s per batch (median) | relative |")
    print("|---|---|---|")
    for k in names:
        m = statistics.median(times[k])
        print(f"| {k} | {m:.2f} | {m / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
