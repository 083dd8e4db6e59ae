"""The config tests' shared helpers: a config file loaded and completed with the schema's
defaults exactly as the Snakefile does (``snakemake.utils.validate``).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from snakemake.utils import validate

from causalpos.config import Resolved

REPO = Path(__file__).resolve().parents[2]


SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def load(name: str, edit=None) -> dict:
    cfg = yaml.safe_load((REPO / name).read_text())
    if edit is not None:
        edit(cfg)
    validate(cfg, SCHEMA)  # fills the schema's defaults, as the Snakefile does
    return cfg


def resolved(name: str, edit) -> Resolved:
    return Resolved(load(name, edit))


def _overlay(cfg: dict, path: str) -> None:
    """``cfg`` updated in place by the overlay config file ``path`` (Snakemake's
    ``--configfile A B``: B's keys update A's, section by section)."""
    from snakemake.utils import update_config

    update_config(cfg, yaml.safe_load((REPO / path).read_text()))
