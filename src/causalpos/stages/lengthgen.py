"""Stage ``length_generalization``: per-position loss of the trained variants beyond their context."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import xarray as xr

from causalpos.io.provenance import stamp_table
from causalpos.io.store import write_dataset
from causalpos.sampling import SequenceSample, draw_sequences
from causalpos.settings import FULL_PRECISION
from causalpos.training import lengthgen, trainlog
from causalpos.training.settings import LengthGenSettings

log = logging.getLogger("causalpos.stages.lengthgen")


def length_generalization(
    model_dirs: Mapping[str, str],
    out_store,
    out_table,
    corpus: dict,
    settings: LengthGenSettings,
    *,
    device: str = "cpu",
    dtype: str = FULL_PRECISION,
    attrs: dict | None = None,
) -> xr.Dataset:
    """Rule ``length_generalization``: :func:`lengthgen.measure_length_generalization` of trained
    model directories on sequences drawn from ``corpus``; writes the store ``out_store`` and its
    per-variant summary table ``out_table`` (CSV).

    ``model_dirs``: name → directory written by ``run_training``; every model must share one
    tokenizer (checked by hash), and each one's training context is read from its config.
    Sequences have ``seq_len`` tokens (default ``length_factor`` × the longest training context).
    Adds ``positional (variant)``, ``final_heldout_loss (variant)`` and ``unigram_entropy
    (variant)`` (from each ``training.json``, NaN when absent) and ``tokens (sequence,
    token_position)``.
    """
    s = settings
    models, contexts, positional, summaries, tokenizer, tok_hash = _load_models(
        model_dirs, device, dtype
    )
    seq_len = s.seq_len
    if seq_len is None:
        seq_len = int(round(s.length_factor * max(contexts.values())))
    sample = SequenceSample(dict(corpus), seq_len, s.n_sequences, mode=s.mode, seed=s.seed)
    seqs = draw_sequences(tokenizer, sample)
    tokens = seqs["tokens"].values
    ds = lengthgen.measure_length_generalization(
        models,
        tokens,
        train_context=contexts,
        batch_size=s.batch_size,
        n_bootstrap=s.n_bootstrap,
        confidence=s.confidence,
        seed=s.seed,
    )
    names = list(models)
    ds = ds.assign(
        positional=("variant", np.array([positional[n] for n in names], dtype=object)),
        **{
            k: ("variant", [float(summaries[n].get(k, np.nan)) for n in names])
            for k in ("final_heldout_loss", "unigram_entropy")
        },
        tokens=(("sequence", "token_position"), tokens),
    )
    ds.attrs.update(
        {
            "corpus": seqs.attrs["corpus"],
            "mode": s.mode,
            "seq_len": int(seq_len),
            "n_sequences": int(s.n_sequences),
            "tokenizer_sha256": tok_hash,
            "device": device,
            "dtype": dtype,
            **(attrs or {}),
        }
    )
    write_dataset(ds, out_store)
    table = lengthgen.summary_table(ds)
    table.to_csv(out_table, index=False)
    stamp_table(out_table)
    log.info("\n%s", table.to_string())
    return ds


def _load_models(model_dirs: Mapping[str, str], device: str, dtype: str):
    """(models, training contexts, positional types, training summaries, the shared tokenizer,
    its hash) of the model directories; refused where a model was not trained here or the
    tokenizers differ."""
    from causalpos.models.load import load_model
    from causalpos.sampling import tokenizer_fingerprint

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
                "length generalization reads models trained by causalpos.training.loop.run_training"
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
            trainlog.read_training_summary(path)
            if (Path(path) / trainlog.TRAINING_JSON).is_file()
            else {}
        )
    return models, contexts, positional, summaries, tokenizer, tok_hash
