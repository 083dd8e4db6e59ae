"""Stage ``sample_sequences``: token sequences of a dataset, with a prepared model's tokenizer."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import xarray as xr

log = logging.getLogger("causalpos.stages.data")


def sample_sequences(
    tokenizer_dir: str | os.PathLike,
    spec: dict,
    out: str | os.PathLike,
    *,
    seed: int,
    name: str = "",
) -> xr.Dataset:
    """Rule ``sample_sequences``: :func:`causalpos.data.sample_sequences` of the dataset ``spec``
    (named ``name`` in the config, for error messages) with the tokenizer of a prepared model
    directory; writes ``out``."""
    from transformers import AutoTokenizer

    from causalpos import data
    from causalpos.io.store import write_dataset

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    ds = data.sample_sequences(
        tokenizer,
        spec["corpus"],
        seq_len=int(spec["seq_len"]),
        n_sequences=int(spec["n_sequences"]),
        mode=spec.get("mode", "first"),
        seed=int(spec.get("seed", seed)),
        prepend_bos=spec.get("prepend_bos", False),
        key=f"datasets.{name}.prepend_bos" if name else "prepend_bos",
    )
    ds.attrs["tokenizer_dir"] = Path(tokenizer_dir).name
    write_dataset(ds, out)
    log.info(
        "sampled %d sequences x %d tokens (bos=%s, prefix %s, prepended here: %s)",
        ds.sizes["sequence"],
        ds.sizes["position"],
        ds.attrs.get("bos"),
        ds.attrs.get("prefix_ids"),
        ds.attrs.get("bos_added"),
    )
    return ds
