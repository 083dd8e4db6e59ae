"""Stage ``prepare_model``: a configured model spec as a model directory."""

from __future__ import annotations

from causalpos.models import load
from causalpos.settings import FULL_PRECISION


def prepare_model(
    name: str, spec: dict, out, *, dtype: str | None = None, tokenizer_dir: str | None = None
):
    """Rule ``prepare_model``: the model spec ``name`` resolved into an HF-format directory (a
    random stand-in built in ``dtype``; its tokenizer from ``tokenizer_dir`` where given)."""
    return load.build_model_dir(
        name, dict(spec), out, dtype=dtype or FULL_PRECISION, tokenizer_dir=tokenizer_dir
    )
