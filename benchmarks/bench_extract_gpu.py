"""Paper-scale extraction on one GPU: tokens/s and peak GPU memory of every reducer set vs a plain
forward pass of the same model, batch by batch, interleaved.

The papers' models are not reachable offline, so the model is a random-init one of a paper
model's exact architecture (:data:`PRESETS`; weights do not change the cost), in the config's
dtype (default bfloat16) on ``cuda``. Modes, as ``extract_scores`` runs them:

- ``forward``: the model's own forward (sdpa, ``logits_to_keep=1``, inference mode);
- ``capture``: the capture with a reducer that does nothing (float32 scores, NaN mask, sdpa);
- ``maps``: + paper 1's reducers (:class:`ScoreMoments`, :class:`GroupMeans`);
- ``paper2``: + paper 2's (:class:`LeakageReducer` with the default config's fits and windows,
  :class:`SinkReducer`) — every reducer on.

Each batch runs every mode in rotating order (a slow spell hits all alike); the first batch of
each mode (allocation of reducer state, cuBLAS heuristics) is reported apart. Peak memory is
``torch.cuda.max_memory_allocated`` over one batch of the mode, minus the memory held before it
(weights, inputs), next to the forward pass's own. Runs on CPU too (``--device cpu --preset
tiny``: the test of this script), where peak memory is not measured.

    .venv/bin/python benchmarks/bench_extract_gpu.py --preset llama-3.2-1b --seq-len 1024
    .venv/bin/python benchmarks/bench_extract_gpu.py --preset llama-3.1-8b --batch auto
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_extract import _batch, _Noop  # noqa: E402  (the same timed batch as on CPU)

from causalpos.capture.reducers import GroupMeans, ScoreMoments, group_labels  # noqa: E402
from causalpos.models.architectures import architecture_config, file_config  # noqa: E402
from causalpos.models.device import auto_batch_size  # noqa: E402
from causalpos.paper2.extraction.reducers import LeakageReducer, SinkReducer  # noqa: E402
from causalpos.stages.extract import reducer_memory  # noqa: E402

MODES = ("forward", "capture", "maps", "paper2")

#: The papers' models' architectures (their published config.json's architecture fields, kept in
#: configs/architectures/), for random-init stand-ins; "tiny" is a 2-layer model for the CPU test.
ARCHITECTURES_DIR = Path(__file__).resolve().parents[1] / "configs" / "architectures"
PRESETS: dict[str, Path | None] = {
    **{p.stem: p for p in sorted(ARCHITECTURES_DIR.glob("*.json"))},
    "tiny": None,
}


def preset_config(preset: str):
    """The transformers config of ``preset`` (:data:`PRESETS`)."""
    path = PRESETS[preset]
    return architecture_config("llama", "tiny") if path is None else file_config(path)


N_GROUPS = 16
FITS = ("saturated+query", "linear+query", "saturated+key")
WINDOWS = ("all", "early16", "early32", "early64", "late")


#: The reducers of each mode, by their extraction names (causalpos.stages.extract.REDUCER_NAMES).
REDUCER_NAMES = {
    "capture": [],
    "maps": ["moments", "groups"],
    "paper2": ["moments", "groups", "leakage", "sink"],
}


def _reducers(mode: str, n: int) -> list:
    if mode == "forward":
        return []
    if mode == "capture":
        return [_Noop()]
    maps = [ScoreMoments(), GroupMeans(group_labels(n, n_groups=N_GROUPS))]
    if mode == "maps":
        return maps
    return maps + [LeakageReducer(fits=FITS, windows=WINDOWS, mean_maps=True), SinkReducer()]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="llama-3.2-1b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", default="8", help="sequences per batch, or 'auto'")
    p.add_argument("--n-batches", type=int, default=4)
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        type=lambda s: tuple(m for m in MODES if m in s.split(",")),
        help="comma-separated subset of " + ",".join(MODES) + " (forward always runs)",
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    cfg = preset_config(args.preset)
    cfg._attn_implementation = "sdpa"
    t0 = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            cfg, dtype=getattr(torch, args.dtype), trust_remote_code=False
        )
    model.eval()
    load_s = time.perf_counter() - t0
    if args.batch == "auto":  # each mode's reducers keep their state across batches: all of it
        reserved = sum(
            reducer_memory(cfg, args.seq_len, names, n_groups=N_GROUPS, device=args.device)
            for mode, names in REDUCER_NAMES.items()
            if mode in args.modes
        )
        batch, estimate = auto_batch_size(model, args.seq_len, reserved=reserved)
        print(f"# batch_size auto: {estimate}", flush=True)
    else:
        batch = int(args.batch)
    n = batch * args.n_batches
    rng = np.random.default_rng(0)
    tokens = torch.from_numpy(rng.integers(3, cfg.vocab_size, size=(n, args.seq_len))).to(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"# {args.preset} ({cfg.model_type}, L={cfg.num_hidden_layers} H={cfg.num_attention_heads}"
        f" KV={cfg.num_key_value_heads}) {args.dtype} on {name} | {args.n_batches} batches of "
        f"{batch} x {args.seq_len} tokens | model built in {load_s:.1f} s",
        flush=True,
    )
    _batch("forward", model, tokens[:1, :16], 0, [])  # warm-up
    modes = tuple(m for m in MODES if m == "forward" or m in args.modes)
    reducers = {m: _reducers(m, n) for m in modes}
    times: dict[str, list[float]] = {m: [] for m in modes}
    peak: dict[str, float] = {}
    for b in range(args.n_batches):
        ids = tokens[b * batch : (b + 1) * batch]
        order = modes[b % len(modes) :] + modes[: b % len(modes)]
        for mode in order:
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
            times[mode].append(_batch(mode, model, ids, b * batch, reducers[mode]))
            if device.type == "cuda":
                extra = (torch.cuda.max_memory_allocated(device) - before) / 2**20
                peak[mode] = max(peak.get(mode, 0.0), extra)
        print(f"# batch {b}: " + ", ".join(f"{m} {times[m][-1]:.3f}s" for m in modes), flush=True)
    steady = slice(1, None) if args.n_batches > 1 else slice(None)
    tok = batch * args.seq_len
    fmin = min(times["forward"][steady])
    rows = {}
    print(f"{'mode':<8} {'tokens/s':>10} {'x forward':>10} {'1st batch s':>11} {'peak MB':>9}")
    for mode in modes:
        best = min(times[mode][steady])
        ratio = statistics.median(
            t / f for t, f in zip(times[mode][steady], times["forward"][steady])
        )
        rows[mode] = {
            "tokens_per_s": tok / best,
            "x_forward_min": best / fmin,
            "x_forward_median": ratio,
            "first_batch_s": times[mode][0],
            "peak_extra_mb": peak.get(mode),
        }
        mem = f"{peak[mode]:9.0f}" if mode in peak else f"{'-':>9}"
        print(f"{mode:<8} {tok / best:10.0f} {best / fmin:10.2f} {times[mode][0]:11.2f} {mem}")
    out = {
        "preset": args.preset,
        "device": name,
        "dtype": args.dtype,
        "batch": batch,
        "seq_len": args.seq_len,
        "modes": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
