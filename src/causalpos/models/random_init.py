"""A ``source: random_init`` model prepared: the config of a named architecture (``tiny`` or
``full``), of an already prepared model (``like``) or of a published config file
(``config_file``), with the spec's overrides, seeded weights, and a tokenizer whose ids fit the
model's vocabulary (the spec format: :mod:`causalpos.models.load`).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from causalpos.models.architectures import (
    ModelSpecError,
    architecture_config,
    check_config_overrides,
    file_config,
    spec_error,
)
from causalpos.models.device import DTYPES
from causalpos.models.weights import sha256_file, weights_manifest
from causalpos.settings import FULL_PRECISION


def _from_sibling(auto, directory: Path, name: str, spec: dict, what: str):
    """``auto.from_pretrained(directory)`` (a tokenizer or config of another prepared model),
    an unreadable one refused as :func:`spec_error` naming ``what``."""
    try:
        return auto.from_pretrained(directory, trust_remote_code=False)
    except Exception as exc:
        raise spec_error(
            name,
            spec,
            what,
            f"{type(exc).__name__}: {exc}",
            "Prepare that model first (its directory must be a sibling of this one)",
        ) from exc


def _sibling(models_dir: Path, ref: str) -> Path:
    path = Path(ref).expanduser()
    return path if path.is_dir() else models_dir / ref


def prepare_random_init(
    name: str,
    spec: dict,
    tmp: Path,
    models_dir: Path,
    *,
    dtype: str = FULL_PRECISION,
    tokenizer_dir: str | os.PathLike | None = None,
) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    overrides = dict(spec.get("config") or {})
    seed = int(spec.get("seed", 0))
    bases = [k for k in ("architecture", "like", "config_file") if k in spec]
    if len(bases) != 1:
        raise spec_error(
            name,
            spec,
            "nothing",
            f"give exactly one of `architecture`, `like` and `config_file` (got {bases})",
        )
    if "config_file" in spec and "size" in spec:
        raise spec_error(name, spec, "nothing", "`size` does not apply with `config_file`: drop it")
    tok_ref = spec.get("tokenizer", spec.get("like"))
    tokenizer = None
    if tok_ref is not None:
        tok_dir = Path(tokenizer_dir) if tokenizer_dir else _sibling(models_dir, tok_ref)
        what = f"tokenizer of {tok_ref!r} at {tok_dir}"
        tokenizer = _from_sibling(AutoTokenizer, tok_dir, name, spec, what)
    file_record = {}
    if "like" in spec:
        like_dir = _sibling(models_dir, spec["like"])
        what = f"config of {spec['like']!r} at {like_dir}"
        config = _from_sibling(AutoConfig, like_dir, name, spec, what)
        check_config_overrides(config.model_type, overrides)  # transformers keeps unknown keys
        for key, value in overrides.items():
            setattr(config, key, value)
        architecture = config.model_type
    elif "config_file" in spec:
        # The file's shape, vocabulary size included (embedding memory is part of the shape);
        # the special ids follow the tokenizer the prompts are encoded with.
        if tokenizer is not None:
            for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
                overrides.setdefault(key, getattr(tokenizer, key))
        try:
            config = file_config(spec["config_file"], overrides)
        except ModelSpecError as exc:
            raise spec_error(name, spec, f"config_file {spec['config_file']!r}", str(exc)) from exc
        architecture = config.model_type
        file_record = {"config_file_sha256": sha256_file(spec["config_file"])}
    else:
        architecture = spec["architecture"]
        if tokenizer is not None and "vocab_size" not in overrides:
            overrides["vocab_size"] = len(tokenizer)
            for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
                overrides.setdefault(key, getattr(tokenizer, key))
        config = architecture_config(architecture, spec.get("size", "tiny"), overrides)
    if tokenizer is not None and len(tokenizer) > config.vocab_size:
        raise spec_error(
            name,
            spec,
            f"tokenizer of {tok_ref!r}",
            f"its ids reach {len(tokenizer) - 1}, beyond the model's vocab_size "
            f"{config.vocab_size}",
            "Use a tokenizer with fewer ids (e.g. the one trained here) or a larger "
            "`config: {vocab_size: ...}`",
        )
    # A fresh model, seeded: transformers' init draws from torch's global generator on CPU. Built
    # in `dtype` (parameters created and initialised in it: an 8B stand-in in bf16 holds 16 GB,
    # never a float32 copy) and saved as built.
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype], trust_remote_code=False)
    model.save_pretrained(tmp)
    del model
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    return {
        "architecture": architecture,
        "seed": seed,
        "dtype": dtype,
        "tokenizer_from": tok_ref,
        **file_record,
        "sha256": weights_manifest(tmp),
    }
