"""Stage-level functions: stores in, stores out. What each Snakemake script calls.

Thin on purpose: each function opens its inputs, calls the science in the other modules and
writes one store atomically. Kept importable and unit-tested like the rest of the library, so the
scripts under ``workflow/scripts`` stay one call long.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import xarray as xr

log = logging.getLogger("causalpos.stages")

#: Reducer sets by name; extraction jobs list the ones they need.
REDUCER_NAMES = ("moments", "groups", "leakage", "sink")


# --------------------------------------------------------------------------------------------
# Devices and batch sizes
# --------------------------------------------------------------------------------------------


def resolve_device(device: str) -> str:
    """``cpu`` | ``cuda`` | ``auto`` -> a torch device string; a clear error if cuda is missing."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "config `device: cuda` but torch sees no CUDA device (torch "
            f"{torch.__version__}); use `device: cpu` or `auto`, or install the CUDA build of torch"
        )
    return device


def bytes_per_sequence(config: Any, seq_len: int, dtype_bytes: int) -> int:
    """Estimated peak bytes one sequence adds to an extraction forward pass.

    The capture holds one float32 (head, T, T) score buffer per sequence and the attention
    kernel and reducers a few more of the same size (softmax, float64 accumulators work per
    sequence); activations are (T, hidden) and (T, intermediate) per layer in the model dtype.
    The factor 4 on the scores and 6 on the activations are deliberately generous.
    """
    heads = int(config.num_attention_heads)
    hidden = int(config.hidden_size)
    inter = int(getattr(config, "intermediate_size", 4 * hidden) or 4 * hidden)
    scores = 4 * heads * seq_len * seq_len * 4
    acts = 6 * seq_len * (hidden + inter) * dtype_bytes
    return scores + acts


def auto_batch_size(model: Any, seq_len: int, *, fraction: float = 0.8, cap: int = 256) -> tuple[int, dict]:
    """Batch size from the memory left beside the model: ``(batch, estimate)``.

    On CUDA the free memory is ``torch.cuda.mem_get_info`` after the model is loaded; on CPU the
    available memory (psutil). ``estimate`` records the numbers for the job log.
    """
    import psutil
    import torch

    param = next(model.parameters())
    dtype_bytes = param.element_size()
    per_seq = bytes_per_sequence(model.config, seq_len, dtype_bytes)
    if param.device.type == "cuda":
        free, total = torch.cuda.mem_get_info(param.device)
        where = f"cuda free {free / 2**30:.1f} / {total / 2**30:.1f} GiB"
    else:
        free = psutil.virtual_memory().available
        where = f"cpu available {free / 2**30:.1f} GiB"
    budget = int(free * fraction)
    batch = max(1, min(cap, budget // per_seq))
    estimate = {
        "memory": where,
        "budget_bytes": budget,
        "bytes_per_sequence": per_seq,
        "batch_size": int(batch),
    }
    return int(batch), estimate


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------


def sample_dataset(tokenizer_dir: str | os.PathLike, spec: dict, out: str | os.PathLike, *, seed: int) -> xr.Dataset:
    """``sample_sequences`` with the tokenizer of a prepared model directory; writes ``out``."""
    from transformers import AutoTokenizer

    from causalpos.data import sample_sequences
    from causalpos.store import write_dataset

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    ds = sample_sequences(
        tokenizer,
        spec["corpus"],
        seq_len=int(spec["seq_len"]),
        n_sequences=int(spec["n_sequences"]),
        mode=spec.get("mode", "first"),
        seed=int(spec.get("seed", seed)),
    )
    ds.attrs["tokenizer_dir"] = Path(tokenizer_dir).name
    write_dataset(ds, out)
    log.info("sampled %d sequences x %d tokens (bos=%s)", ds.sizes["sequence"], ds.sizes["position"], ds.attrs.get("bos"))
    return ds


def build_reducers(names: Sequence[str], *, n_sequences: int, n_groups: int, leakage: dict | None = None,
                   seed: int = 0) -> list:
    """Reducer objects for an extraction job from their names (:data:`REDUCER_NAMES`)."""
    from causalpos.capture import GroupMeans, ScoreMoments, group_labels

    unknown = set(names) - set(REDUCER_NAMES)
    if unknown:
        raise ValueError(f"unknown reducer(s) {sorted(unknown)}; allowed: {REDUCER_NAMES}")
    out: list = []
    for name in names:
        if name == "moments":
            out.append(ScoreMoments())
        elif name == "groups":
            out.append(GroupMeans(group_labels(n_sequences, scheme="modulo", n_groups=min(n_groups, n_sequences))))
        elif name == "leakage":
            from causalpos.leakage import LeakageReducer

            out.append(LeakageReducer(seed=seed, **(leakage or {})))
        elif name == "sink":
            from causalpos.position0 import SinkReducer

            out.append(SinkReducer())
    return out


def extract_shard(
    model_dir: str | os.PathLike,
    data_store: str | os.PathLike,
    out: str | os.PathLike,
    *,
    start: int,
    stop: int,
    variant: str,
    reducers: Sequence[str],
    batch_size: int | str,
    n_groups: int,
    seed: int,
    device: str = "cpu",
    dtype: str = "float32",
    memory_fraction: float = 0.8,
    leakage: dict | None = None,
    attrs: dict | None = None,
) -> xr.Dataset:
    """Extract sequences ``[start, stop)`` of ``data_store`` under ``variant``; write ``out``.

    Group labels are computed from global sequence ids, so shards merge into exactly the groups
    a single pass would make.
    """
    from causalpos.capture import extract_scores
    from causalpos.models import load_model
    from causalpos.store import open_dataset, write_dataset

    data = open_dataset(data_store)
    n_total = int(data.sizes["sequence"])
    if not 0 <= start < stop <= n_total:
        raise ValueError(f"extract_shard: sequences [{start}, {stop}) outside the dataset's {n_total}")
    tokens = np.asarray(data["tokens"].isel(sequence=slice(start, stop)).values)
    dev = resolve_device(device)
    model, _tok = load_model(model_dir, device=dev, dtype=dtype)
    if batch_size == "auto":
        batch_size, estimate = auto_batch_size(model, tokens.shape[1], fraction=memory_fraction)
        log.info("batch_size auto: %s", estimate)
    objs = build_reducers(reducers, n_sequences=n_total, n_groups=n_groups, leakage=leakage, seed=seed)
    meta = {
        "dataset": data.attrs.get("corpus", ""),
        "sequence_first": int(start),
        "sequence_last": int(stop - 1),
        "batch_size": int(batch_size),
        "reducers": list(reducers),
        **(attrs or {}),
    }
    ds = extract_scores(
        model, tokens, variant=variant, batch_size=int(batch_size), reducers=objs, seed=seed,
        seq_ids=np.arange(start, stop, dtype=np.int64), attrs=meta,
    )
    write_dataset(ds, out)
    return ds


def merge_score_shards(shards: Sequence[str | os.PathLike], out: str | os.PathLike) -> xr.Dataset:
    """Merge shard stores exactly (reducers' merges) and write the per-variant store."""
    from causalpos.store import merge_shards, write_dataset

    ds = merge_shards(list(shards))
    write_dataset(ds, out)
    return ds


def normalize_scores(ds: xr.Dataset) -> xr.Dataset:
    """Diagonal normalization (paper 1 §5) of a score store's maps.

    ``score_normalized`` (layer, head, query, key) from ``score_mean``; the head average
    ``score_normalized_mean`` (layer, query, key) — equal to normalizing the head-averaged map,
    since the operation is linear; ``score_mean_head_avg`` (layer, query, key), the raw head
    average (App. E's raw maps). float32 maps, NaN where masked.
    """
    from causalpos.diagonal import normalize

    out = xr.Dataset(attrs=dict(ds.attrs))
    dims = ds["score_mean"].dims
    norm = normalize(np.asarray(ds["score_mean"].values, dtype=np.float64))
    head_axis = dims.index("head")
    reduced = tuple(d for d in dims if d != "head")
    out["score_normalized"] = (dims, norm.astype(np.float32))
    # Every head of a layer shares the mask, so a plain mean keeps NaN exactly where masked.
    out["score_normalized_mean"] = (reduced, norm.mean(axis=head_axis).astype(np.float32))
    out["score_mean_head_avg"] = (
        reduced,
        np.asarray(ds["score_mean"].values, dtype=np.float64).mean(axis=head_axis).astype(np.float32),
    )
    out.attrs["normalization"] = "diagonal (paper 1 §5): each offset band minus its mean"
    return out


def diagonal_normalize_store(src: str | os.PathLike, out: str | os.PathLike) -> xr.Dataset:
    from causalpos.store import open_dataset, write_dataset

    ds = normalize_scores(open_dataset(src))
    write_dataset(ds, out)
    return ds


def llm_index_table(stores: dict[tuple[str, str, str], xr.Dataset], *, confidence: float = 0.95,
                    n_boot: int = 2000, seed: int = 0):
    """Per (model, dataset, variant, layer) non-relativeness index of the head-averaged map.

    ``stores``: (model, dataset, variant) -> merged score store with ``score_group_mean``
    (group, layer, query, key), the raw head-averaged maps of groups of sequences. Bootstrap over
    groups (:func:`causalpos.diagonal.index_ci`, which normalizes them).
    """
    import pandas as pd

    from causalpos.diagonal import index_ci

    rows = []
    for (model, dataset, variant), ds in stores.items():
        if "score_group_mean" not in ds:
            raise KeyError(f"score store of {model}/{dataset}/{variant} has no 'score_group_mean' "
                           "(extract with the 'groups' reducer)")
        g = np.asarray(ds["score_group_mean"].transpose("group", "layer", "query", "key").values, dtype=np.float64)
        ci = index_ci(g, level=confidence, n_boot=n_boot, seed=seed)
        for layer in range(g.shape[1]):
            rows.append({
                "model": model, "dataset": dataset, "variant": variant, "layer": layer + 1,
                "index": float(ci.estimate[layer]), "index_debiased": float(ci.debiased[layer]),
                "noise_floor": float(ci.noise_floor[layer]),
                "index_over_floor": float(ci.estimate[layer] / ci.noise_floor[layer]) if ci.noise_floor[layer] > 0 else math.nan,
                "ci_lo": float(ci.lo[layer]), "ci_hi": float(ci.hi[layer]), "se": float(ci.se[layer]),
                "n_groups": int(ci.n_groups), "n_sequences": int(ds.attrs.get("n_sequences", -1)),
            })
    return pd.DataFrame(rows)
