"""Stages that prepare model directories: a configured model spec, the untrained twin."""

from __future__ import annotations

from causalpos.models import load


def prepare_model(name: str, spec: dict, out):
    """Rule ``prepare_model``: the model spec ``name`` resolved into an HF-format directory."""
    return load.build_model_dir(name, dict(spec), out)
