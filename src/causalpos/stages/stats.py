"""Stages ``aggregate_sim_stats`` and ``aggregate_llm_stats``: the non-relativeness index tables."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pandas as pd

from causalpos.io.provenance import stamp_table
from causalpos.io.store import open_dataset
from causalpos.paper1.tables import llm_index_table, simulation_index_table

log = logging.getLogger("causalpos.stages.stats")


def aggregate_sim_stats(
    stores: Mapping[str, str], out, *, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Rule ``aggregate_sim_stats``: :func:`simulation_index_table` of the simulation stores
    (setting -> path), written as CSV to ``out``."""
    opened = {name: open_dataset(p) for name, p in stores.items()}
    table = simulation_index_table(opened, confidence=confidence, n_boot=n_boot, seed=seed)
    return _written(table, out)


def aggregate_llm_stats(
    stores: Mapping[str, str],
    out,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    first_keys: int = 4,
    twins: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Rule ``aggregate_llm_stats``: :func:`llm_index_table` of the score stores
    (``"model/dataset/variant"`` -> path), written as CSV to ``out``."""
    opened = {tuple(label.split("/")): open_dataset(p) for label, p in stores.items()}
    table = llm_index_table(
        opened, confidence=confidence, n_boot=n_boot, seed=seed, first_keys=first_keys, twins=twins
    )
    return _written(table, out)


def _written(table: pd.DataFrame, out) -> pd.DataFrame:
    """``table`` written as a stamped CSV to ``out``, and logged."""
    table.to_csv(out, index=False)
    stamp_table(out)
    log.info("\n%s", table.to_string())
    return table
