"""The prepared model's weights as recorded: :func:`verify_weights` checks the files against the
sha256 its ``causalpos_source.json`` records (``load_model`` calls it), and
:func:`check_finite_parameters` the loaded tensors."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import torch

from causalpos.io.integrity import display_path, rebuild_hint


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def weights_stat(directory: Path, names: Iterable[str]) -> dict[str, list[int]]:
    """``[size, mtime_ns]`` of each weights file: the cheap check of :func:`verify_weights`."""
    return {n: [(st := (directory / n).stat()).st_size, st.st_mtime_ns] for n in sorted(names)}


class ModelIntegrityError(RuntimeError):
    """A prepared model whose weights are not those recorded, or not finite."""


def verify_weights(path: Path, source: dict) -> None:
    """The weights files of prepared directory ``path`` are those its ``causalpos_source.json``
    records (``sha256``): a file whose size and mtime are still the recorded ones passes without
    reading it (hashing 0.5 GB costs ~1 s per load); any other is hashed and compared."""
    stats = source.get("weights_stat") or {}
    for name, digest in sorted((source.get("sha256") or {}).items()):
        f = path / name
        if not f.is_file():
            why = "is missing"
        elif stats.get(name) == weights_stat(path, [name])[name] or sha256_file(f) == digest:
            continue
        else:
            why = f"has changed since it was prepared (sha256 no longer {digest[:12]}...)"
        raise ModelIntegrityError(
            f"load_model: {display_path(path)}/{name} {why}. The prepared model no longer matches "
            f"its causalpos_source.json. {rebuild_hint(path)}"
        )


def check_finite_parameters(model: torch.nn.Module, path: Path) -> None:
    """ModelIntegrityError naming the first parameter (or buffer) with a NaN or inf."""
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ModelIntegrityError(
                f"load_model: {display_path(path)}: tensor {name!r} holds "
                f"{int((~torch.isfinite(t)).sum())} non-finite values (NaN/inf): the weights are "
                f"damaged or came from a diverged training run. {rebuild_hint(path)}"
            )
