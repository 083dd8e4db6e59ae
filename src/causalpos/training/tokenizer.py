"""The byte-level BPE tokenizer shared by the models trained here, and token streams from texts.

Special tokens ``<|bos|>`` (id 0), ``<|eos|>`` (id 1), ``<|pad|>`` (id 2); BOS is prepended to every
encoded sequence, so position 0 is always the same token (the setting of the papers' Llama models).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from causalpos.io.atomic import atomic_dir

BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|eos|>"
PAD_TOKEN = "<|pad|>"


def fit_tokenizer(
    texts: Sequence[str],
    vocab_size: int,
    out_dir: str | os.PathLike,
    seed: int = 0,
    *,
    add_bos: bool = True,
    min_frequency: int = 2,
    extra_meta: Mapping[str, Any] | None = None,
) -> Path:
    """Train a byte-level BPE tokenizer on ``texts`` and save it as an HF tokenizer in ``out_dir``.

    With ``add_bos`` the tokenizer prepends BOS whenever it is called with
    ``add_special_tokens=True`` (the default). BPE training is deterministic; ``seed`` and
    ``extra_meta`` are recorded in ``causalpos_tokenizer.json`` and change nothing. ``out_dir``
    is renamed into place (replacing what was there), so it is complete or absent.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    n_special = 3
    n_bytes = len(pre_tokenizers.ByteLevel.alphabet())
    if vocab_size < n_special + n_bytes + 1:
        raise ValueError(
            f"vocab_size={vocab_size} is too small for byte-level BPE: it needs the {n_bytes} byte "
            f"symbols + {n_special} special tokens + at least one merge (use >= {n_special + n_bytes + 1})"
        )
    if not texts:
        raise ValueError("fit_tokenizer got no texts")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[BOS_TOKEN, EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    bos_id = tok.token_to_id(BOS_TOKEN)
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS_TOKEN} $A",
            pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
            special_tokens=[(BOS_TOKEN, bos_id)],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=int(1e9),
    )
    out = Path(out_dir)
    meta = {
        "vocab_size": tok.get_vocab_size(),
        "requested_vocab_size": vocab_size,
        "add_bos": add_bos,
        "min_frequency": min_frequency,
        "seed": seed,
        "n_texts": len(texts),
        "n_characters": int(sum(len(t) for t in texts)),
        **dict(extra_meta or {}),
    }
    with atomic_dir(out) as tmp:
        fast.save_pretrained(tmp)
        (tmp / "causalpos_tokenizer.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def load_tokenizer(tokenizer_dir: str | os.PathLike):
    """The HF fast tokenizer saved by :func:`fit_tokenizer` (or any HF tokenizer directory), as
    AutoTokenizer loads it (:func:`causalpos.models.tokenizers.tokenizer_from_dir`)."""
    from causalpos.models.tokenizers import tokenizer_from_dir

    path = Path(tokenizer_dir)
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"no tokenizer.json in {path}: train one with "
            "causalpos.training.tokenizer.fit_tokenizer"
        )
    return tokenizer_from_dir(path)


def encode_documents(tokenizer_dir: str | os.PathLike, texts: Sequence[str]) -> np.ndarray:
    """Token stream ``(n_tokens,)`` int64: each document's tokens (no BOS) followed by EOS.

    Training windows are cut from this stream and get their own BOS at position 0 (see
    :func:`causalpos.training.batches.batch_at`); EOS marks document boundaries inside a window.
    """
    tok = load_tokenizer(tokenizer_dir)
    if tok.eos_token_id is None:
        raise ValueError(
            f"tokenizer in {tokenizer_dir} has no EOS token; train it with fit_tokenizer"
        )
    enc = tok(list(texts), add_special_tokens=False)["input_ids"]
    eos = tok.eos_token_id
    return np.fromiter((i for ids in enc for i in (*ids, eos)), dtype=np.int64)
