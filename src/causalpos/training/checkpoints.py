"""Checkpoints of a training run, and the record that decides whether one may be resumed.

A checkpoint is a directory ``step-NNNNNN`` (in ``<out_dir>.checkpoints`` by default) holding the
model (``config.json``, ``model.safetensors``), the tokenizer files and ``trainer_state.pt``:
``step``, ``settings`` (:func:`settings_record`), ``provenance``, ``optimizer``, ``scheduler``,
``torch_rng``, ``cuda_rng``, ``rows`` (the loss log so far), ``elapsed_s``, ``cpu_s`` — plain data
only, loaded with ``torch.load(weights_only=True)``. A run resumed from it ends bit-identical to an
uninterrupted one (on the same machine and thread count).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from causalpos.io.atomic import atomic_dir
from causalpos.training.batches import data_hash
from causalpos.training.settings import TrainSettings
from causalpos.training.tokenizer import load_tokenizer

TRAINER_STATE = "trainer_state.pt"
CHECKPOINT_PREFIX = "step-"


def settings_record(
    settings: TrainSettings, *, vocab_size: int, train_ids: np.ndarray, heldout_ids: np.ndarray
) -> dict[str, Any]:
    """What a run's result depends on, as recorded in every checkpoint and in ``training.json``:
    the resolved settings (:meth:`TrainSettings.resolved`, the shape nested), the vocabulary size
    after ``variant``, then the token counts and hash of the data. A checkpoint whose record
    differs is never resumed."""
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
    """Where :func:`causalpos.training.loop.run_training` keeps checkpoints by default: the sibling
    ``<out_dir>.checkpoints``."""
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


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """A checkpoint's ``trainer_state.pt``, loaded with ``weights_only=True`` (no pickled code)."""
    return torch.load(checkpoint / TRAINER_STATE, map_location="cpu", weights_only=True)


def save_model_dir(model: nn.Module, tokenizer_dir: Path, out: Path) -> None:
    """``model`` in HF format (safetensors) with the tokenizer of ``tokenizer_dir``, into ``out``."""
    model.save_pretrained(out, safe_serialization=True)
    load_tokenizer(tokenizer_dir).save_pretrained(out)


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
    with atomic_dir(path) as tmp:
        save_model_dir(model, tokenizer_dir, tmp)
        torch.save(plain_state(trainer_state), tmp / TRAINER_STATE)
    for _, old in list_checkpoints(ckpt_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def delete_checkpoints(ckpt_dir: Path) -> None:
    """Delete every checkpoint in ``ckpt_dir`` (the directory stays)."""
    for _, old in list_checkpoints(ckpt_dir):
        shutil.rmtree(old, ignore_errors=True)
