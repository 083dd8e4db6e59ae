"""Stage ``gram_panels``: paper 1 Figs. 3 and 8 data of one model on held-out sequences."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import xarray as xr

from causalpos.io.store import NAN_FROM_MODEL, map_problems, write_dataset
from causalpos.models.context import check_model_context
from causalpos.paper1.gram import gram_store
from causalpos.sampling import SequenceSample
from causalpos.settings import FULL_PRECISION

log = logging.getLogger("causalpos.stages.gram")


def gram_panels(
    model_dir,
    out,
    sample: SequenceSample,
    *,
    batch_size: int = 32,
    device: str = "cpu",
    dtype: str = FULL_PRECISION,
    attrs: dict | None = None,
    data_store: str | os.PathLike | None = None,
) -> xr.Dataset:
    """Rule ``gram_panels``: :func:`gram_store` of the model in ``model_dir`` on the sequences
    ``sample`` draws with its own tokenizer (or read from ``data_store``, a store of a configured
    dataset with this model's tokenizer), written to ``out`` with the sampling record, the
    model's provenance and the token ids (``tokens (sample, token_position)``).
    """
    from causalpos.models.load import load_model
    from causalpos.sampling import draw_sequences, tokenizer_fingerprint

    model, tokenizer = load_model(model_dir, device=device, dtype=dtype)
    if tokenizer is None:
        raise ValueError(
            f"{model_dir} has no tokenizer: Fig. 3/8 need one to tokenize the held-out text"
        )
    if data_store is not None:
        from causalpos.io.store import open_dataset

        seqs = open_dataset(data_store)
        if seqs.attrs["tokenizer_sha256"] != tokenizer_fingerprint(tokenizer):
            raise ValueError(
                f"{data_store} was tokenized with another tokenizer than {model_dir}'s "
                f"({seqs.attrs['tokenizer_sha256']} vs {tokenizer_fingerprint(tokenizer)})"
            )
        mode, seed = seqs.attrs["mode"], seqs.attrs["seed"]
    else:
        seqs = draw_sequences(tokenizer, sample)
        mode, seed = sample.mode, sample.seed
    tokens = np.asarray(seqs["tokens"].values)
    warning = check_model_context(model.config, tokens.shape[1], f"gram_panels: model {model_dir}")
    if warning:
        log.warning(warning)
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
    problems = map_problems(ds, cause=NAN_FROM_MODEL)
    if problems:
        raise FloatingPointError(
            f"gram_panels: refusing to write {out}: the maps of model {model_dir} hold no data: "
            + "; ".join(problems)
        )
    write_dataset(ds, out)
    return ds
