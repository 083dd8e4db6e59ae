"""A trained model directory's records, readable without torch: the loss curve and
``training.json`` (:mod:`causalpos.training.loop` writes them; figures and tables read them)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: Per-step losses of a trained model directory (CSV, one row per evaluation).
LOSS_CURVE = "loss_curve.csv"
#: Settings, final losses, baselines and timing of a training run.
TRAINING_JSON = "training.json"


def read_loss_curve(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read ``loss_curve.csv`` (a model directory or the file): columns as float arrays (NaN = not measured)."""
    p = Path(path)
    if p.is_dir():
        p = p / LOSS_CURVE
    if not p.is_file():
        raise FileNotFoundError(
            f"no loss curve at {p}: train the model with causalpos.training.loop.run_training first"
        )
    data = np.genfromtxt(p, delimiter=",", names=True, dtype=np.float64)
    return {name: np.atleast_1d(data[name]) for name in data.dtype.names}


def read_training_summary(path: str | os.PathLike) -> dict[str, Any]:
    """``training.json`` of a trained model directory (settings, final losses, baselines, timing)."""
    p = Path(path)
    p = p / TRAINING_JSON if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(
            f"no {TRAINING_JSON} at {p}: the model was not trained to completion here"
        )
    return json.loads(p.read_text())


def write_loss_curve(rows: Sequence[Mapping[str, float]], path: str | os.PathLike) -> None:
    """Write ``rows`` (step, train_loss, heldout_loss, lr; NaN = not measured) as ``loss_curve.csv``
    at ``path``; floats in ``repr`` form, so :func:`read_loss_curve` reads back the same numbers."""
    lines = ["step,train_loss,heldout_loss,lr"]
    for r in rows:
        lines.append(f"{int(r['step'])},{r['train_loss']!r},{r['heldout_loss']!r},{r['lr']!r}")
    Path(path).write_text("\n".join(lines) + "\n")
