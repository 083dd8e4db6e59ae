"""Stages of the models trained here: tokenizer, training, Gram panels, length generalization."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from causalpos.training import tokenizer
from causalpos.training.corpus import prepare_texts
from causalpos.training.settings import RunOptions, TrainSettings

log = logging.getLogger("causalpos.stages.train")


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
    train_texts, _ = prepare_texts(corpus, heldout_sources)
    log.info(
        "training a %d-token BPE tokenizer on %d documents (held out: %s)",
        vocab_size,
        len(train_texts),
        ", ".join(heldout_sources),
    )
    return tokenizer.fit_tokenizer(
        train_texts,
        vocab_size,
        out_dir,
        seed=seed,
        min_frequency=min_frequency,
        extra_meta={"corpus": dict(corpus), "heldout_sources": list(heldout_sources)},
    )


def train_model(
    settings: Mapping[str, Any],
    *,
    corpus: Mapping[str, Any],
    heldout_sources: Sequence[str],
    tokenizer_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    **run: Any,
) -> dict[str, Any]:
    """Rule ``train_model``: :func:`loop.run_training` of the rule's ``settings`` param on a
    corpus spec split as the tokenizer's was (the held-out side gives the held-out loss);
    ``run``: the fields of :class:`RunOptions`.
    """
    from causalpos.training import loop  # torch: not imported by the tokenizer job

    train_texts, heldout_texts = prepare_texts(corpus, heldout_sources)
    train_ids = tokenizer.encode_documents(tokenizer_dir, train_texts)
    heldout_ids = tokenizer.encode_documents(tokenizer_dir, heldout_texts)
    params = TrainSettings.from_params(settings)
    log.info(
        "%s: %d training tokens, %d held-out tokens (held out: %s)",
        params.variant,
        len(train_ids),
        len(heldout_ids),
        ", ".join(heldout_sources),
    )
    return loop.run_training(
        params,
        tokenizer_dir=tokenizer_dir,
        out_dir=out_dir,
        train_ids=train_ids,
        heldout_ids=heldout_ids,
        run=RunOptions(**run),
    )
