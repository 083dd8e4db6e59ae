"""Paper 1's per-layer tables (paper1.tables, and the trained models' index table of
training.compare) name each layer's mask: the store's ``layer_kind`` coordinate where it has
one, "global" where it has none."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from causalpos.paper1 import tables as P1_tables
from causalpos.training import compare as C_tables


def _store(rng, n_layers=3, t=7, n_groups=4, kinds=None):
    groups = rng.normal(size=(n_groups, n_layers, t, t))
    groups[..., np.triu(np.ones((t, t), bool), 1)] = np.nan
    ds = xr.Dataset(
        {"score_group_mean": (("group", "layer", "query", "key"), groups.astype(np.float32))},
        coords={"group": np.arange(n_groups), "layer": np.arange(n_layers)},
        attrs={"n_sequences": 2 * n_groups, "dataset_name": "d"},
    )
    if kinds is not None:
        ds = ds.assign_coords(layer_kind=("layer", kinds))
    return ds


KINDS = ["sliding4", "sliding4", "global"]


@pytest.mark.parametrize("kinds", [None, KINDS])
def test_llm_index_table_names_each_layers_kind(kinds):
    rng = np.random.default_rng(0)
    table = P1_tables.llm_index_table({("m", "d", "causal"): _store(rng, kinds=kinds)}, n_boot=20)
    cols = list(table.columns)
    assert cols[cols.index("layer") + 1] == "layer_kind"
    assert list(table["layer"]) == [1, 2, 3]
    assert list(table["layer_kind"]) == (kinds or ["global"] * 3)


def test_simulation_index_table_reads_global_layers():
    rng = np.random.default_rng(1)
    sim = _store(rng).rename({"score_group_mean": "score_group"})
    table = P1_tables.simulation_index_table({"s": sim}, n_boot=20)
    assert list(table["layer_kind"]) == ["global"] * 3
    recorded = sim.assign_coords(layer_kind=("layer", KINDS))
    table = P1_tables.simulation_index_table({"s": recorded}, n_boot=20)
    assert list(table["layer_kind"]) == KINDS


@pytest.mark.parametrize("kinds", [None, KINDS])
def test_trained_index_table_names_each_layers_kind(kinds):
    rng = np.random.default_rng(2)
    trained, init = _store(rng, kinds=kinds), _store(rng, kinds=kinds)
    index, _ = C_tables.comparison_tables({"swa": (trained, init)}, n_boot=20)
    for weights in ("trained", "init"):
        rows = index[index.weights == weights].sort_values("layer")
        assert list(rows["layer_kind"]) == (kinds or ["global"] * 3)


def test_the_index_settings_are_the_tables_arguments_with_the_configs_defaults():
    """IndexSettings' fields are llm_index_table's keyword arguments (the notebook API passes
    them as they are), each default the schema's and the function's own."""
    import dataclasses
    import inspect

    from causalpos.paper1.settings import IndexSettings
    from tests.settings_defaults import disagreements

    assert disagreements(IndexSettings) == []
    params = inspect.signature(P1_tables.llm_index_table).parameters
    for f in dataclasses.fields(IndexSettings):
        assert params[f.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[f.name].default == f.default, f.name
