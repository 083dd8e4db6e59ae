"""Stage ``sample_sequences``: token sequences of a dataset, with a prepared model's tokenizer."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import xarray as xr

from causalpos.data import REVISION_ATTR, REVISION_SOURCE_ATTR, CorpusError

log = logging.getLogger("causalpos.stages.data")


def sample_sequences(
    tokenizer_dir: str | os.PathLike,
    spec: dict,
    out: str | os.PathLike,
    *,
    seed: int,
    name: str = "",
    peers: Sequence[str | os.PathLike] = (),
    corpus_sha256: dict[str, str] | None = None,
) -> xr.Dataset:
    """Rule ``sample_sequences``: :func:`causalpos.sampling.draw_sequences` of the dataset ``spec``
    (named ``name`` in the config, for error messages) with the tokenizer of a prepared model
    directory; writes ``out``.

    ``peers``: directories of the other tokenizers of the models sharing the dataset (``also_for``
    of ``draw_sequences``). ``corpus_sha256``: the content of the corpus's local files, recorded
    in the store (JSON) where there are any. A draw of copies of one sequence is refused before
    any store is written; duplicates or a near-constant draw are logged as warnings.
    """
    from causalpos.distinct import check_distinct
    from causalpos.io.store import write_dataset
    from causalpos.models.tokenizers import tokenizer_from_dir
    from causalpos.sampling import SequenceSample, TooFewSequences, draw_sequences

    tokenizer = tokenizer_from_dir(tokenizer_dir)
    sample = SequenceSample(
        corpus=spec["corpus"],
        seq_len=int(spec["seq_len"]),
        n_sequences=int(spec["n_sequences"]),
        mode=spec.get("mode", "first"),
        seed=int(spec.get("seed", seed)),
        prepend_bos=spec.get("prepend_bos", False),
    )
    try:
        ds = draw_sequences(
            tokenizer,
            sample,
            key=f"datasets.{name}.prepend_bos" if name else "prepend_bos",
            also_for=[tokenizer_from_dir(p) for p in peers],
        )
    except TooFewSequences as exc:
        key = f"datasets.{name}.n_sequences" if name else "n_sequences"
        raise CorpusError(
            f"{key} = {sample.n_sequences}: tokenized by {Path(tokenizer_dir).name}, the corpus "
            f"gives only {exc.available} sequences of {sample.seq_len} tokens ({exc}). Fix: set "
            f"{key} to at most {exc.available}, or give the dataset more text"
        ) from None
    for warning in check_distinct(ds, f"datasets.{name}" if name else "dataset"):
        log.warning(warning)
    ds.attrs["tokenizer_dir"] = Path(tokenizer_dir).name
    if REVISION_ATTR in ds.attrs:  # a hub corpus: the commit its documents were read at
        log.info(
            "hub corpus read at revision %r: %s",
            ds.attrs[REVISION_ATTR],
            ds.attrs[REVISION_SOURCE_ATTR],
        )
    if corpus_sha256:
        ds.attrs["corpus_sha256"] = json.dumps(dict(corpus_sha256), sort_keys=True)
    write_dataset(ds, out)
    log.info(
        "sampled %d sequences x %d tokens, %d distinct (bos=%s, prefix %s, prepended here: %s)",
        ds.sizes["sequence"],
        ds.sizes["position"],
        ds.attrs["n_distinct"],
        ds.attrs.get("bos"),
        ds.attrs.get("prefix_ids"),
        ds.attrs.get("bos_added"),
    )
    return ds
