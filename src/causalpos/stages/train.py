"""Stages of the models trained here: tokenizer, training, Gram panels, length generalization."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from causalpos.io.store import write_dataset
from causalpos.models import lengthgen
from causalpos.models import train as training
from causalpos.paper1.gram import gram_store

log = logging.getLogger("causalpos.stages.train")


def gram_panels(
    model_dir,
    out,
    corpus: dict,
    *,
    seq_len: int = 50,
    n_sequences: int = 1000,
    seed: int = 0,
    mode: str = "first",
    batch_size: int = 32,
    device: str = "cpu",
    dtype: str = "float32",
    attrs: dict | None = None,
    data_store: str | os.PathLike | None = None,
) -> xr.Dataset:
    """Rule ``gram_panels``: :func:`gram_store` of the model in ``model_dir`` on sequences drawn
    from ``corpus`` (or read from ``data_store``, a ``sample_sequences`` store of a configured
    dataset with this model's tokenizer), written to ``out``.

    Sequences are :func:`causalpos.data.sample_sequences` with the model's own tokenizer (paper 1:
    ``mode="first"``, the first ``seq_len`` tokens of held-out documents, BOS included). The model
    is loaded with :func:`causalpos.models.load_model` (so a NoPE checkpoint runs without rotation).
    The sampling record (corpus, mode, seed, tokenizer hash) and the model's provenance are added
    to the attrs, as are the sampled token ids (``tokens (sample, position)``).
    """
    from causalpos.data import sample_sequences
    from causalpos.models.load import load_model

    model, tokenizer = load_model(model_dir, device=device, dtype=dtype)
    if tokenizer is None:
        raise ValueError(
            f"{model_dir} has no tokenizer: Fig. 3/8 need one to tokenize the held-out text"
        )
    if data_store is not None:
        from causalpos.data import tokenizer_fingerprint
        from causalpos.io.store import open_dataset

        seqs = open_dataset(data_store)
        if seqs.attrs["tokenizer_sha256"] != tokenizer_fingerprint(tokenizer):
            raise ValueError(
                f"{data_store} was tokenized with another tokenizer than {model_dir}'s "
                f"({seqs.attrs['tokenizer_sha256']} vs {tokenizer_fingerprint(tokenizer)})"
            )
        mode, seed = seqs.attrs["mode"], seqs.attrs["seed"]
    else:
        seqs = sample_sequences(
            tokenizer, dict(corpus), seq_len=seq_len, n_sequences=n_sequences, mode=mode, seed=seed
        )
    tokens = np.asarray(seqs["tokens"].values)
    _warn_context(model, tokens.shape[1], f"gram_panels: model {model_dir}")
    meta = {
        "model_dir": str(model_dir),
        "model_source": json.dumps(getattr(model, "causalpos_source", {}), default=str),
        "corpus": seqs.attrs["corpus"],
        "mode": mode,
        "seed": int(seed),
        "tokenizer_sha256": seqs.attrs["tokenizer_sha256"],
        "device": device,
        **(attrs or {}),
    }
    ds = gram_store(model, tokens, batch_size=batch_size, attrs=meta)
    ds = ds.assign(tokens=(("sample", "token_position"), tokens))
    log.info("layer-1 recomputation check: max relative error %.3g", ds.attrs["x1_max_rel_error"])
    write_dataset(ds, out)
    return ds


def _warn_context(model, seq_len: int, what: str) -> None:
    """Log a warning when ``seq_len`` runs a model past its context; raise where it cannot run."""
    from causalpos.models.context import check_model_context

    warning = check_model_context(model.config, seq_len, what)
    if warning:
        log.warning(warning)


def length_generalization(
    model_dirs: Mapping[str, str],
    out_store,
    out_table,
    corpus: dict,
    *,
    length_factor: float = 2.0,
    seq_len: int | None = None,
    n_sequences: int = 128,
    seed: int = 0,
    mode: str = "chunks",
    batch_size: int = 16,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    device: str = "cpu",
    dtype: str = "float32",
    attrs: dict | None = None,
) -> xr.Dataset:
    """Rule ``length_generalization``: :func:`causalpos.models.lengthgen.length_generalization` of
    trained model directories on sequences drawn from ``corpus``; writes the store ``out_store``
    and its per-variant summary table ``out_table`` (CSV).

    ``model_dirs``: name → directory written by :func:`causalpos.train.train_model` (loaded with
    :func:`causalpos.models.load_model`). Every model must share one tokenizer (the one-factor
    design; checked by hash), and each one's training context is read from its config
    (``causalpos_train_context``). Sequences: :func:`causalpos.data.sample_sequences` with that
    tokenizer, ``seq_len`` tokens (default ``length_factor`` × the longest training context),
    ``mode="chunks"`` (BOS + consecutive held-out text, never crossing documents).

    Adds to :func:`length_generalization`'s variables ``positional (variant)`` (rope | nope | ntk
    | swa), ``final_heldout_loss (variant)`` and ``unigram_entropy (variant)`` (from each model's
    ``training.json``, NaN when absent) and the token ids ``tokens (sequence, token_position)``.
    """
    from pathlib import Path

    from causalpos.data import sample_sequences, tokenizer_fingerprint
    from causalpos.models.load import load_model

    if not model_dirs:
        raise ValueError("length_generalization needs at least one model directory")
    models, contexts, positional, summaries = {}, {}, {}, {}
    tokenizer, tok_hash = None, None
    for name, path in model_dirs.items():
        model, tok = load_model(path, device=device, dtype=dtype)
        ctx = getattr(model.config, "causalpos_train_context", None)
        if ctx is None or tok is None:
            raise ValueError(
                f"{path}: no causalpos_train_context in config.json or no tokenizer; "
                "length generalization reads models trained by causalpos.train.train_model"
            )
        h = tokenizer_fingerprint(tok)
        if tok_hash is None:
            tokenizer, tok_hash = tok, h
        elif h != tok_hash:
            raise ValueError(
                f"{path}: tokenizer {h} differs from {next(iter(model_dirs))}'s {tok_hash}; the "
                "variants must share one tokenizer to be compared position by position"
            )
        models[name], contexts[name] = model, int(ctx)
        positional[name] = str(getattr(model.config, "causalpos_variant", name))
        summaries[name] = (
            training.read_training_summary(path)
            if (Path(path) / training.TRAINING_JSON).is_file()
            else {}
        )
    if seq_len is None:
        seq_len = int(round(length_factor * max(contexts.values())))
    seqs = sample_sequences(
        tokenizer, dict(corpus), seq_len=seq_len, n_sequences=n_sequences, mode=mode, seed=seed
    )
    tokens = seqs["tokens"].values
    ds = lengthgen.length_generalization(
        models,
        tokens,
        train_context=contexts,
        batch_size=batch_size,
        n_bootstrap=n_bootstrap,
        confidence=confidence,
        seed=seed,
    )
    names = list(models)
    ds = ds.assign(
        positional=("variant", np.array([positional[n] for n in names], dtype=object)),
        final_heldout_loss=(
            "variant",
            [float(summaries[n].get("final_heldout_loss", np.nan)) for n in names],
        ),
        unigram_entropy=(
            "variant",
            [float(summaries[n].get("unigram_entropy", np.nan)) for n in names],
        ),
        tokens=(("sequence", "token_position"), tokens),
    )
    ds.attrs.update(
        {
            "corpus": seqs.attrs["corpus"],
            "mode": mode,
            "seq_len": int(seq_len),
            "n_sequences": int(n_sequences),
            "tokenizer_sha256": tok_hash,
            "device": device,
            "dtype": dtype,
            **(attrs or {}),
        }
    )
    write_dataset(ds, out_store)
    table = lengthgen.summary_table(ds)
    table.to_csv(out_table, index=False)
    log.info("\n%s", table.to_string())
    return ds


def train_tokenizer(
    corpus: Mapping[str, Any],
    heldout_sources: Sequence[str],
    vocab_size: int,
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    min_frequency: int = 2,
) -> Path:
    """Rule ``train_tokenizer``: a BPE tokenizer trained on the training side of ``corpus`` (``heldout_sources`` excluded).

    The corpus spec and the held-out sources are recorded in ``causalpos_tokenizer.json``.
    """
    train_texts, _ = training.prepare_texts(corpus, heldout_sources)
    log.info(
        "training a %d-token BPE tokenizer on %d documents (held out: %s)",
        vocab_size,
        len(train_texts),
        ", ".join(heldout_sources),
    )
    return training.train_tokenizer(
        train_texts,
        vocab_size,
        out_dir,
        seed=seed,
        min_frequency=min_frequency,
        extra_meta={"corpus": dict(corpus), "heldout_sources": list(heldout_sources)},
    )


def train_model(
    variant: str,
    *,
    corpus: Mapping[str, Any],
    heldout_sources: Sequence[str],
    tokenizer_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    **kwargs: Any,
) -> dict[str, Any]:
    """Rule ``train_model``: :func:`causalpos.models.train.train_model` on a corpus spec split
    by :func:`causalpos.models.train.prepare_texts`.

    The split must be the one the tokenizer was trained on; the held-out side gives the held-out
    loss. ``kwargs`` go to :func:`train_model`.
    """
    train_texts, heldout_texts = training.prepare_texts(corpus, heldout_sources)
    train_ids = training.encode_documents(tokenizer_dir, train_texts)
    heldout_ids = training.encode_documents(tokenizer_dir, heldout_texts)
    log.info(
        "%s: %d training tokens, %d held-out tokens (held out: %s)",
        variant,
        len(train_ids),
        len(heldout_ids),
        ", ".join(heldout_sources),
    )
    return training.train_model(
        variant,
        tokenizer_dir=tokenizer_dir,
        out_dir=out_dir,
        train_ids=train_ids,
        heldout_ids=heldout_ids,
        **kwargs,
    )
