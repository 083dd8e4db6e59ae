"""The plan of configs/paper.yaml on one H100 per job: per model, each extraction stage's
GPU-hours, GPU memory, host memory and disk, from stated arithmetic and the measurements in
docs/paper-shape.md and docs/performance.md. Prints the Markdown table of docs/paper-shape.md.

    python benchmarks/paper_plan.py [--config configs/paper.yaml]

The arithmetic (every constant below is a measurement, named where it was made):

- time of one extraction job = load + Σ over its variants of tokens × per-token cost; load =
  weights / 2 GB/s + 10 s; per token: the forward pass ∝ parameters (H100, Llama-3.1-8B, bf16:
  34,457 tokens/s at T = 1,024, 35,993 at 256), paper 1's maps ∝ layers × heads × T (8B at
  1,024: 1.39 forward-times more), paper 2's reducers ∝ layers × heads (8B at 256: 244 µs a
  token for its 1,024 layer-heads; Llama-3.2-1B: 115 µs for 512);
- GPU memory = weights + the reducers' state + one sequence (``footprint.extract_request``'s
  ``gpu_mb``, ``sequence_bytes``); ``batch_size: auto`` then fills 80 % of what is free;
- host memory = ``extract_scores``' ``mem_mb`` (``footprint.extract_request``);
- host memory = the largest request of the model's jobs (``extract_scores``, which merges a
  dataset of one shard in memory, ``merge_scores`` where a dataset is several,
  ``diagonal_normalize``, ``leakage``: ``causalpos.config.resources``);
- disk = the prepared weights (bf16) + paper 1's stores (a dataset of one shard: the final ones;
  of several: one per shard until the merge, and the merged one) at 0.47 of their float32 size, and the normalized maps at 0.50 of the mean maps'
  (the 1B stand-in's stores on 2026-11-26: 2.06 GB for 4.43 GB, 1.07 GB for 2.15 GB: the masked
  half of every causal map is NaN and compresses away) + paper 2's summed maps (float32 logits
  and float64 log Z per query row, per variant, per shard and merged; measured 0.95 of their size
  bidirectional, 0.52 causal: counted whole).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from causalpos.config import Resolved  # noqa: E402
from causalpos.models import footprint as F  # noqa: E402

H100_FWD_TOKENS_S = {1024: 34_457.0, 256: 35_993.0}  # Llama-3.1-8B, bf16 (2026-11-22)
H100_REF_PARAMS = 8_030_261_248
MAPS_X_FORWARD = 1.39  # + paper 1's maps at T = 1,024, 1,024 layer-heads
P2_S_PER_TOKEN_LAYERHEAD = 244e-6 / 1024  # paper 2's reducers at T = 256
LOAD_BYTES_S = 2e9
STORE_COMPRESSION = 0.47
NORMALIZED_COMPRESSION = 0.50
CARD_MB = 80_000


def job_seconds(shape: F.Shape, n: int, seq_len: int, n_seq: int, variants: dict) -> float:
    tokens = seq_len * n_seq
    fwd = (n / H100_REF_PARAMS) / H100_FWD_TOKENS_S.get(seq_len, H100_FWD_TOKENS_S[1024])
    lh = shape.layers * shape.heads
    total = 0.0
    for names in variants.values():
        per = fwd
        if "moments" in names:
            per += MAPS_X_FORWARD / H100_FWD_TOKENS_S[1024] * lh / 1024 * seq_len / 1024
        if "leakage" in names:
            per += P2_S_PER_TOKEN_LAYERHEAD * lh * (seq_len / 256) ** 2
        total += tokens * per
    return 2 * n / LOAD_BYTES_S + 10 + total


def plan(config: dict) -> list[dict]:
    """One row per (model, stage): GPU-hours, GPU GB (batch 1), host GB (the job's ``mem_mb``),
    disk GB the stage leaves (shards until the merge counted)."""
    r = Resolved(config)
    pairs = {(m, d) for m, d, _ in r.map_triples()} | set(r.leakage_pairs())
    rows = []
    for model in r.configured_models():
        found = r.model_footprint(model)
        if found is None:
            continue
        shape, n, stored = found
        prep = r.prepare_resources(model)
        rows.append(_row(model, "prepare_model", 0.0, 0.0, prep["mem_mb"], prep["disk_mb"] * 1e6))
        for m, d in sorted(pairs):
            if m != model:
                continue
            ds, params = r.dataset_spec(d), r.extraction_params(m, d)
            variants = {v: p["reducers"] for v, p in params.items()}
            n_shards = r.n_shards(d)
            shard = min(r.config["extract"]["shard_size"], ds["n_sequences"])
            T = ds["seq_len"]
            secs = n_shards * job_seconds(shape, n, T, shard, variants)
            req = r.extract_resources(m, d)
            one = F.sequence_bytes(shape.heads, shape.hidden, shape.intermediate, T, 2)
            groups = min(r.config["extract"]["n_groups"], ds["n_sequences"])
            cells = shape.layers * shape.heads * T**2
            stores = 0.0
            for names in variants.values():
                stores += STORE_COMPRESSION * F.map_store_bytes(shape, T, names, n_groups=groups)
                if "leakage" in names:  # the summed logits (float32) and log Z (float64)
                    stores += F.leakage_sums_bytes(shape.layers, shape.heads, T, 4)
            what = f"{d}, {len(variants)} variant{'s' * (len(variants) > 1)}, {n_shards} shard"
            rows.append(
                _row(
                    model,
                    f"extract_scores ({what})",
                    secs / 3600,
                    req["gpu_mb"] + one / 1e6,
                    req["mem_mb"],
                    stores * n_shards,
                )
            )
            if n_shards > 1:  # the shards' stores, then their merge (one shard: the final stores)
                merge = max(r.merge_resources(m, d, v)["mem_mb"] for v in variants)
                rows.append(_row(model, f"merge_scores ({d})", 0.0, 0.0, merge, stores))
            if any("moments" in v for v in variants.values()):
                norm = r.normalize_resources(m, d)["mem_mb"]
                disk = NORMALIZED_COMPRESSION * cells * 4
                rows.append(_row(model, f"diagonal_normalize ({d})", 0.0, 0.0, norm, disk))
            if (m, d) in r.leakage_pairs():
                mem = r.leakage_resources(m, d)["mem_mb"]
                rows.append(_row(model, f"leakage ({d})", 0.0, 0.0, mem, 0.0))
    return rows


def _row(model, stage, gpu_h, gpu_mb, host_mb, disk_bytes) -> dict:
    return {
        "model": model,
        "stage": stage,
        "gpu_h": gpu_h,
        "gpu_gb": gpu_mb / 1e3,
        "host_gb": host_mb / 1e3,
        "disk_gb": disk_bytes / 1e9,
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | stage | GPU-hours | GPU memory, batch 1 | host memory (`mem_mb`) | disk |",
        "|---|---|---|---|---|---|",
    ]
    for x in rows:
        gpu_h = f"{x['gpu_h']:.3f}" if x["gpu_h"] > 0 else "—"
        gpu_gb = f"{x['gpu_gb']:.1f} GB" if x["gpu_h"] > 0 else "—"
        lines.append(
            f"| {x['model']} | {x['stage']} | {gpu_h} | {gpu_gb} | {x['host_gb']:.1f} GB | "
            f"{x['disk_gb']:.1f} GB |"
        )
    by_model: dict[str, list[dict]] = {}
    for x in rows:
        by_model.setdefault(x["model"], []).append(x)
    lines += ["", "| model | GPU-hours | largest GPU memory | largest host memory | disk |"]
    lines += ["|---|---|---|---|---|"]
    for model, xs in by_model.items():
        lines.append(
            f"| {model} | {sum(x['gpu_h'] for x in xs):.3f} | "
            f"{max(x['gpu_gb'] for x in xs):.1f} GB | {max(x['host_gb'] for x in xs):.1f} GB | "
            f"{sum(x['disk_gb'] for x in xs):.1f} GB |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=REPO / "configs" / "paper.yaml")
    args = p.parse_args(argv)
    from snakemake.utils import validate

    cfg = yaml.safe_load(args.config.read_text())
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    print(markdown(plan(cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
