"""Stage of score extraction: one shard of sequences of a (model, dataset), every variant; where
the shard holds every sequence of the pair, its stores are the pair's final stores."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from causalpos.capture.settings import CaptureRun, ExtractSettings
from causalpos.models.device import (
    advise_on_oom,
    auto_batch_size,
    available_memory,
    bytes_per_sequence,
    refuse_batch_that_cannot_fit,
    resolve_device,
)

log = logging.getLogger("causalpos.stages.extract")


#: Reducer sets by name; extraction jobs list the ones they need ("position0" reads the residual
#: stream at position 0 instead of scores: :class:`causalpos.capture.position0.Position0States`;
#: "maps" keeps every sequence's maps, for the notebook API only: :mod:`causalpos.api`).
REDUCER_NAMES = ("moments", "groups", "leakage", "sink", "position0", "maps")


def build_reducers(
    names: Sequence[str],
    *,
    n_sequences: int,
    n_groups: int,
    leakage: dict | None = None,
    seed: int = 0,
    position0_values: bool = False,
    layers: Sequence[int] | None = None,
) -> list:
    """Reducer objects for an extraction job from their names (:data:`REDUCER_NAMES`);
    ``position0_values``: the position-0 reader also keeps the value vectors at key 0;
    ``layers``: the layers whose per-sequence maps "maps" keeps (default every layer)."""
    from causalpos.capture.reducers import GroupMeans, ScoreMaps, ScoreMoments, group_labels

    unknown = set(names) - set(REDUCER_NAMES)
    if unknown:
        raise ValueError(f"unknown reducer(s) {sorted(unknown)}; allowed: {REDUCER_NAMES}")
    out: list = []
    for name in names:
        if name == "moments":
            out.append(ScoreMoments())
        elif name == "groups":
            out.append(GroupMeans(group_labels(n_sequences, n_groups=min(n_groups, n_sequences))))
        elif name == "leakage":
            from causalpos.paper2.extraction.reducers import LeakageReducer

            out.append(LeakageReducer(seed=seed, **(leakage or {})))
        elif name == "sink":
            from causalpos.paper2.extraction.reducers import SinkReducer

            out.append(SinkReducer())
        elif name == "position0":
            from causalpos.capture.position0 import Position0States

            out.append(Position0States(values=position0_values))
        elif name == "maps":
            out.append(ScoreMaps(layers))
    return out


def reducer_memory(
    config,
    seq_len: int,
    names: Sequence[str],
    *,
    n_groups: int,
    leakage: dict | None = None,
    batch_size: int | None = None,
    device: str = "cpu",
    n_sequences: int = 0,
) -> int:
    """Bytes the named reducers hold whatever the batch size on ``device``, for the model of
    transformers ``config`` (:func:`causalpos.models.footprint.reducer_state_bytes`, with the
    device's chunk size)."""
    from causalpos.capture.reducers import work_cells
    from causalpos.models.footprint import ReducerPlan, reducer_state_bytes

    plan = ReducerPlan(
        n_groups=n_groups,
        mean_maps=(leakage or {}).get("mean_maps", True),
        n_sequences=n_sequences,
        work_cells=work_cells(device),
        batch_size=batch_size,
    )
    return reducer_state_bytes(
        int(config.num_hidden_layers),
        int(config.num_attention_heads),
        int(getattr(config, "hidden_size", 0)),  # read by position0 only
        seq_len,
        names,
        plan,
    )


def check_variant_specs(variants: Mapping[str, Mapping]) -> None:
    """Refuse, before the model loads, an extraction job's bad variant: an unknown name, no or
    unknown reducers, a planted variant without plant settings or plant settings without one (the
    query plant's ``plant``, the stream plant's ``stream``)."""
    from causalpos.models.variants import parse_variant

    if not variants:
        raise ValueError("extract_scores: no variants to extract")
    for name, spec in variants.items():
        parse_variant(name)  # a bad name fails before the model loads
        if not spec.get("reducers"):
            raise ValueError(f"extract_scores: variant {name!r} has no reducers")
        if bool(parse_variant(name).plant) != bool(spec.get("plant")):
            raise ValueError(
                f"extract_scores: variant {name!r} "
                + (
                    "plants a term but has no plant settings (config leakage.plant)"
                    if parse_variant(name).plant
                    else f"plants nothing but was given plant settings {spec.get('plant')}"
                )
            )
        if bool(parse_variant(name).stream) != bool(spec.get("stream")):
            raise ValueError(
                f"extract_scores: variant {name!r} "
                + (
                    "plants a stream dose but has no stream settings (config leakage.plant_stream)"
                    if parse_variant(name).stream
                    else f"plants nothing in the stream but was given {spec.get('stream')}"
                )
            )
        unknown = set(spec["reducers"]) - set(REDUCER_NAMES)
        if unknown:
            raise ValueError(
                f"extract_scores: variant {name!r}: unknown reducer(s) {sorted(unknown)}; "
                f"allowed: {REDUCER_NAMES}"
            )


def extract_scores(
    model_dir: str | os.PathLike,
    data_store: str | os.PathLike,
    out: str | os.PathLike,
    *,
    bounds: tuple[int, int],
    variants: Mapping[str, Mapping],
    settings: ExtractSettings,
    attrs: dict | None = None,
    final: bool = False,
) -> dict[str, Path]:
    """Rule ``extract_scores``: sequences ``bounds`` = ``[start, stop)`` of ``data_store`` under
    every variant of ``variants`` (name -> ``{"reducers": [...], "leakage": {LeakageReducer
    kwargs}}``, ``"plant": {"layer", "scale"}`` for a planted variant, ``"stream": {"layer",
    "dose", "profile"}`` for a stream-planted one, ``"layers"``: those whose maps reducer "maps"
    keeps); writes ``out/<variant>.zarr`` per variant, atomically, and returns their paths.

    The model is loaded and the prompts read once for all variants. Group labels come from
    global sequence ids, so shards merge into exactly the groups a single pass would make.
    ``final``: the shard is the pair's only one and ``out`` the pair's directory of final stores,
    each written as ``merge_scores`` writes the merge of one shard (:func:`as_merged`).
    """
    from causalpos.io.store import open_dataset, write_dataset
    from causalpos.models.load import load_model

    check_variant_specs(variants)
    start, stop = bounds
    data = open_dataset(data_store)
    n_total = int(data.sizes["sequence"])
    if not 0 <= start < stop <= n_total:
        raise ValueError(
            f"extract_scores: sequences [{start}, {stop}) outside the dataset's {n_total}"
        )
    if final and (start, stop) != (0, n_total):
        raise ValueError(
            f"extract_scores: final stores need every sequence of {data_store}, [0, {n_total}); "
            f"got [{start}, {stop}): write shards (final=False) and merge them (merge_scores)"
        )
    dev = resolve_device(settings.device)
    model, _tok = load_model(model_dir, device=dev, dtype=settings.dtype)
    gc.freeze()  # imports and model live to the end: each collection scans one variant's state
    what = f"extract_scores: model {model_dir}, {data_store} sequences [{start}, {stop})"
    out = Path(out)  # created with its first store: a failure before leaves nothing
    written: dict[str, Path] = {}
    for variant, ds in extract_variants(
        model, data, variants, settings, bounds=bounds, attrs=attrs, what=what
    ):
        if final:
            ds = as_merged(ds, out / f"{variant}.zarr")
        out.mkdir(parents=True, exist_ok=True)
        written[variant] = write_dataset(ds, out / f"{variant}.zarr")
        del ds
        gc.collect()
    return written


def extract_variants(
    model,
    data,
    variants: Mapping[str, Mapping],
    settings: ExtractSettings,
    *,
    bounds: tuple[int, int] | None = None,
    attrs: dict | None = None,
    what: str = "extract_scores",
) -> Iterator[tuple[str, Any]]:
    """``(variant, result)`` of each variant of ``variants`` (the specs of :func:`extract_scores`)
    in turn, one variant's reducer state at a time: the sequences ``bounds`` (default all) of the
    token dataset ``data`` through the capture hook of the loaded ``model`` (also the notebook
    API's path); ``what`` names the job in errors. The batch size is ``settings.batch_size``
    (refused where it cannot fit) or chosen from free memory."""
    from causalpos.models.context import check_model_context

    check_variant_specs(variants)
    n_total = int(data.sizes["sequence"])
    start, stop = (0, n_total) if bounds is None else bounds
    tokens = np.asarray(data["tokens"].isel(sequence=slice(start, stop)).values)
    seq_len = int(tokens.shape[1])
    warning = check_model_context(model.config, seq_len, what)  # raises where it cannot run
    if warning:
        log.warning(warning)
    job = _Job(model, data, tokens, (start, stop), settings, what, n_total, attrs)
    batch_size, was_auto = _batch_size(job, variants)
    for i, (variant, spec) in enumerate(variants.items()):
        log.info(
            "variant %d/%d: %s (reducers %s)",
            i + 1,
            len(variants),
            variant,
            ", ".join(spec["reducers"]),
        )
        yield variant, _extract_variant(job, variant, spec, batch_size, was_auto)


@dataclass(frozen=True)
class _Job:
    """One extraction job's loaded model, data store, prompts, bounds, settings, description,
    the data store's number of sequences and the stores' extra attrs."""

    model: Any
    data: Any
    tokens: np.ndarray
    bounds: tuple[int, int]
    settings: ExtractSettings
    what: str
    n_total: int
    attrs: dict | None


def _batch_size(job: _Job, variants: Mapping[str, Mapping]) -> tuple[int, bool]:
    """(the batch size, whether it was chosen from free memory): ``settings.batch_size``, refused
    where it cannot fit, or "auto" sized from the free memory less the reducers' largest state."""
    model, s, n_total = job.model, job.settings, job.n_total
    dev = next(model.parameters()).device
    seq_len = int(job.tokens.shape[1])
    start, stop = job.bounds
    # Reducer state lives through a variant and is freed before the next: the largest counts.
    reserved = max(
        reducer_memory(
            model.config,
            seq_len,
            spec["reducers"],
            n_groups=min(s.n_groups, n_total),
            leakage=spec.get("leakage"),
            batch_size=None if s.batch_size == "auto" else int(s.batch_size),
            device=dev,
            n_sequences=stop - start,
        )
        for spec in variants.values()
    )
    if s.batch_size == "auto":
        batch_size, estimate = auto_batch_size(
            model, seq_len, fraction=s.memory_fraction, reserved=reserved
        )
        log.info("batch_size auto: %s", estimate)
        return batch_size, True
    refuse_batch_that_cannot_fit(
        model.config,
        seq_len=seq_len,
        batch_size=int(s.batch_size),
        available=available_memory(dev),
        what=job.what,
        key="extract.batch_size",
        auto=True,
        reserved=reserved,
    )
    return int(s.batch_size), False


def _extract_variant(job: _Job, variant: str, spec: Mapping, batch_size: int, was_auto: bool):
    """One variant's extraction result (not yet written): its reducers built and fed by the
    capture hook, the job's metadata in the attrs."""
    from causalpos.capture import hook
    from causalpos.models.variants import POSITION0_PROBE_CONDITION

    model, data, s = job.model, job.data, job.settings
    start, stop = job.bounds
    reducers = list(spec["reducers"])
    objs = build_reducers(
        reducers,
        n_sequences=job.n_total,
        n_groups=s.n_groups,
        leakage=dict(spec.get("leakage") or {}),
        seed=s.seed,
        position0_values=variant == POSITION0_PROBE_CONDITION,
        layers=spec.get("layers"),
    )
    meta = {
        "dataset": data.attrs.get("corpus", ""),
        "sequence_first": int(start),
        "sequence_last": int(stop - 1),
        "batch_size": int(batch_size),
        "reducers": reducers,
        # position 0 as the data store made it (fixed BOS or not, prepend_bos), carried on
        **{
            k: data.attrs[k]
            for k in ("bos", "bos_id", "prefix_ids", "prepend_bos")
            if k in data.attrs
        },
        **(job.attrs or {}),
    }
    what = job.what + (f" (batch_size auto chose {batch_size})" if was_auto else "")
    seq_len = int(job.tokens.shape[1])
    per_sequence = bytes_per_sequence(
        model.config, seq_len, next(model.parameters()).element_size()
    )
    with advise_on_oom(
        what=f"{what}, variant {variant}",
        batch_size=int(batch_size),
        per_sequence=per_sequence,
        key="extract.batch_size",
        auto=not was_auto,
    ):
        ds = hook.capture_scores(
            model,
            job.tokens,
            CaptureRun(
                variant,
                int(batch_size),
                seed=s.seed,
                plant=spec.get("plant"),
                stream=spec.get("stream"),
            ),
            reducers=objs,
            seq_ids=np.arange(start, stop, dtype=np.int64),
            attrs=meta,
        )
    del objs  # this variant's reducer state, before its merge and the next variant allocate
    gc.collect()
    return ds


def as_merged(ds, out: str | os.PathLike):
    """One variant's extraction result ``ds``, a shard holding every sequence of its pair, as rule
    ``merge_scores`` stores the merge of that one shard, checked as the merge checks its result;
    ``FloatingPointError`` where a map holds no data (the model produced NaN)."""
    from causalpos.capture.merging import MERGES
    from causalpos.io.shards import merge_shards
    from causalpos.io.store import NAN_FROM_MODEL, count_problems, map_problems

    merged = merge_shards([ds], reducers=dict(MERGES))
    problems = count_problems(merged) + map_problems(merged, cause=NAN_FROM_MODEL)
    if problems:
        raise FloatingPointError(f"extract_scores: refusing to write {out}: " + "; ".join(problems))
    return merged
