"""The prepared model's weights as recorded: :func:`verify_weights` checks the files against the
sha256 its ``causalpos_source.json`` records (``load_model`` calls it), and
:func:`check_finite_parameters` the loaded tensors."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

from causalpos.io.fingerprint import sha256_file
from causalpos.io.integrity import display_path, rebuild_hint
from causalpos.io.modeldir import model_files_problems


def weights_stat(directory: Path, names: Iterable[str]) -> dict[str, list[int]]:
    """``[size, mtime_ns]`` of each weights file: the cheap check of :func:`verify_weights`."""
    return {n: [(st := (directory / n).stat()).st_size, st.st_mtime_ns] for n in sorted(names)}


class ModelIntegrityError(RuntimeError):
    """A prepared model whose weights are not those recorded, or not finite."""


def verify_weights(path: Path, source: dict) -> None:
    """The weights files of prepared directory ``path`` are those its ``causalpos_source.json``
    records (``sha256``; :func:`causalpos.io.modeldir.model_files_problems`)."""
    for name, why in model_files_problems(path, source)[:1]:
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


#: Keys spelled out in one message (the rest counted).
_KEYS_SHOWN = 6


def _keys(keys: Iterable[str]) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:_KEYS_SHOWN])
    return shown + (f" and {len(keys) - _KEYS_SHOWN} more" if len(keys) > _KEYS_SHOWN else "")


def check_exact_load(info: dict, path: Path) -> None:
    """ModelIntegrityError unless every tensor of the model came from the weights files and every
    tensor there went into the model (``info``: what ``from_pretrained(...,
    output_loading_info=True)`` reports). transformers initialises a missing tensor at random
    (differently at every load: two shard jobs of one store would run two models), drops an
    unexpected one and re-initialises one whose shape differs."""
    missing = set(info.get("missing_keys") or ())
    unexpected = set(info.get("unexpected_keys") or ())
    mismatched = [
        f"{k} (file {tuple(a)}, config {tuple(b)})" for k, a, b in info.get("mismatched_keys") or ()
    ]
    problems = [
        f"{len(keys)} tensor(s) {what} ({_keys(keys)})"
        for keys, what in (
            (missing, "the config asks for are not in the weights files"),
            (unexpected, "in the weights files have no place in the model the config describes"),
            (mismatched, "differ in shape"),
        )
        if keys
    ]
    if problems:
        raise ModelIntegrityError(
            f"load_model: {display_path(path)}: its config.json and its weights describe "
            f"different models: {'; '.join(problems)}. Nothing runs on weights that were not "
            "loaded. Fix config.json (e.g. num_hidden_layers, hidden_size, vocab_size) to match "
            "the weights, or point the model's spec at the directory the weights came from; "
            f"then rebuild the prepared model. {rebuild_hint(path)}"
        )


def check_vocabulary(model: torch.nn.Module, tokenizer, path: Path) -> None:
    """ModelIntegrityError when the tokenizer has ids the input embedding has no row for."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ModelIntegrityError(
            f"load_model: {display_path(path)}: its tokenizer has {len(tokenizer)} ids (up to "
            f"{len(tokenizer) - 1}), its input embedding {rows} rows: a prompt with a larger id "
            "would index past the embedding. Give the model the tokenizer it was trained with "
            "(the tokenizer files of its own repository), or a config `vocab_size` of at least "
            f"{len(tokenizer)} for a random_init model"
        )


def weights_manifest(directory: Path) -> dict[str, str]:
    """``{file: sha256}`` of the weights files (``.safetensors``, ``.bin``, ``.gguf``) in
    ``directory``: what a model directory's record names and :func:`verify_weights` checks."""
    return {
        p.name: sha256_file(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.suffix in (".safetensors", ".bin", ".gguf")
    }
