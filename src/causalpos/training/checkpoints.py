"""Checkpoints of a training run, and the record that decides whether one may be resumed.

A checkpoint is a directory ``step-NNNNNN`` (in ``<out_dir>.checkpoints`` by default) holding the
model (``config.json``, ``model.safetensors``), the tokenizer files and ``trainer_state.pt``:
``step``, ``settings`` (:func:`settings_record`), ``provenance``, ``optimizer``, ``scheduler``,
``torch_rng``, ``cuda_rng``, ``rows`` (the loss log so far), ``elapsed_s``, ``cpu_s`` — plain data
only, loaded with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from causalpos.io.atomic import atomic_dir, free_bytes
from causalpos.training.batches import data_hash
from causalpos.training.settings import TrainSettings
from causalpos.training.tokenizer import load_tokenizer

TRAINER_STATE = "trainer_state.pt"
CHECKPOINT_PREFIX = "step-"


def settings_record(
    settings: TrainSettings, *, vocab_size: int, train_ids: np.ndarray, heldout_ids: np.ndarray
) -> dict[str, Any]:
    """What a run's result depends on, recorded in every checkpoint and ``training.json``: the
    resolved settings (the vocabulary size after ``variant``), the data's token counts and hash.
    A checkpoint whose record differs is never resumed."""
    rec = asdict(settings.resolved())
    return {
        "variant": rec.pop("variant"),
        "vocab_size": vocab_size,
        **rec,
        "train_tokens": len(train_ids),
        "heldout_tokens": len(heldout_ids),
        "data_hash": data_hash(train_ids, heldout_ids),
    }


def default_checkpoint_dir(out_dir: str | os.PathLike) -> Path:
    """Where ``run_training`` keeps checkpoints by default: the sibling ``<out_dir>.checkpoints``."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + ".checkpoints")


def list_checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints in ``ckpt_dir`` as ``(step, path)``, oldest first."""
    found = []
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            if p.name.startswith(CHECKPOINT_PREFIX) and (p / TRAINER_STATE).is_file():
                try:
                    found.append((int(p.name[len(CHECKPOINT_PREFIX) :]), p))
                except ValueError:
                    continue
    return sorted(found)


def plain_state(obj: Any) -> Any:
    """``obj`` made of what ``torch.load(..., weights_only=True)`` accepts: tensors, dicts,
    lists, tuples, str, int, float, bool and None (numpy scalars and arrays are converted)."""
    if isinstance(obj, np.generic):  # before float: np.float64 is a float subclass
        return obj.item()
    if isinstance(obj, torch.Tensor) or obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        return {k: plain_state(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain_state(v) for v in obj)
    raise TypeError(
        f"trainer state holds a {type(obj).__name__}, which torch.load(weights_only=True) "
        "refuses; convert it to tensors, numbers, strings, lists or dicts"
    )


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read (truncated, damaged) or written (a full disk): the message
    names the file and what to do."""


def _unreadable(checkpoint: Path, name: str, exc: Exception) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {checkpoint}: {name} cannot be read ({type(exc).__name__}: {exc}); it is "
        "truncated or damaged (a copy cut short, a disk that filled up, a crash outside "
        "causalpos' atomic writes). Nothing is resumed from it. Either delete this checkpoint "
        f"(`rm -r {checkpoint}`) and rerun: training resumes from the checkpoint before it if one "
        f"is left in {checkpoint.parent}, else it restarts from step 0 (same settings, same "
        "result); or restore the file from a backup"
    )


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """A checkpoint's ``trainer_state.pt``, loaded with ``weights_only=True`` (no pickled code);
    :class:`CheckpointError` naming it where it cannot be read."""
    try:
        return torch.load(checkpoint / TRAINER_STATE, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise _unreadable(checkpoint, TRAINER_STATE, exc) from exc


def load_checkpoint_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's ``model.safetensors``; :class:`CheckpointError` where it cannot be read."""
    from safetensors.torch import load_file

    try:
        return load_file(checkpoint / "model.safetensors")
    except Exception as exc:  # safetensors raises its own SafetensorError (not an OSError)
        raise _unreadable(checkpoint, "model.safetensors", exc) from exc


@contextlib.contextmanager
def disk_write(path: Path, what: str, *, need: int) -> Iterator[None]:
    """Writes of ``what`` at ``path`` (``need`` bytes, about): an error from a full disk becomes a
    :class:`CheckpointError` naming the disk as full, with the path and its free space (torch
    reports a full disk as ``RuntimeError ... unexpected pos``, without the errno)."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        free = free_bytes(path)
        full = getattr(exc, "errno", None) == errno.ENOSPC or (free is not None and free < need)
        if not full:
            raise
        shown = "unknown" if free is None else f"{free / 2**20:.1f} MiB"
        raise CheckpointError(
            f"the disk is full: writing {what} {path} failed ({type(exc).__name__}: {exc}); the "
            f"disk holding it has {shown} free and the write needs about "
            f"{need / 2**20:.1f} MiB. Nothing was left half-written there. Free space on that "
            "disk (or move the checkpoints elsewhere) and rerun: training resumes from the last "
            "complete checkpoint"
        ) from exc


def state_bytes(model: nn.Module) -> int:
    """Bytes of a checkpoint, about: the weights and AdamW's two moments."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters())


def save_model_dir(model: nn.Module, tokenizer_dir: Path, out: Path) -> None:
    """``model`` in HF format (safetensors) with the tokenizer of ``tokenizer_dir``, into ``out``."""
    model.save_pretrained(out, safe_serialization=True)
    load_tokenizer(tokenizer_dir).save_pretrained(out)


def write_weights_record(directory: Path, **record: Any) -> dict[str, Any]:
    """Write the ``causalpos_source.json`` of a model directory made here (``source: trained``):
    the sha256 and ``[size, mtime]`` of its weights files, which ``load_model`` checks at every
    load. ``record``: what else to keep (name, variant)."""
    from causalpos.models.load import SOURCE_FILE, weights_manifest
    from causalpos.models.weights import weights_stat

    record = {**record, "source": "trained", "sha256": weights_manifest(directory)}
    record["weights_stat"] = weights_stat(directory, record["sha256"])
    (directory / SOURCE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def write_checkpoint(
    ckpt_dir: Path,
    step: int,
    model: nn.Module,
    tokenizer_dir: Path,
    trainer_state: dict[str, Any],
    *,
    keep: int,
) -> Path:
    """Write checkpoint ``step`` atomically, then delete all but the newest ``keep``."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"{CHECKPOINT_PREFIX}{step:06d}"
    with disk_write(path, "checkpoint", need=state_bytes(model)), atomic_dir(path) as tmp:
        save_model_dir(model, tokenizer_dir, tmp)
        torch.save(plain_state(trainer_state), tmp / TRAINER_STATE)
    for _, old in list_checkpoints(ckpt_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def delete_checkpoints(ckpt_dir: Path) -> None:
    """Delete every checkpoint in ``ckpt_dir`` (the directory stays)."""
    for _, old in list_checkpoints(ckpt_dir):
        shutil.rmtree(old, ignore_errors=True)
