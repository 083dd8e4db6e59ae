"""Each layer's mask kind as the stores record it (causalpos.models.layerkind), and the layer_kind
column of every per-layer table: from the store's coordinate where it has one, "global" where it
has none."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from causalpos.models.layerkind import (
    EMBEDDING,
    GLOBAL,
    LAYER_KIND,
    block_kinds,
    kinds_by_layer,
    layer_kinds,
    with_layer_kind,
)

KINDS = ["sliding4", "sliding4", "global"]


def _ds(kinds=None, layers=(0, 1, 2)):
    ds = xr.Dataset({"x": (("layer",), np.arange(len(layers), dtype=float))})
    ds = ds.assign_coords(layer=list(layers))
    if kinds is not None:
        ds = ds.assign_coords({LAYER_KIND: ("layer", kinds)})
    return ds


def test_kinds_come_from_the_coordinate_and_default_to_global():
    assert layer_kinds(_ds(KINDS)) == KINDS
    assert layer_kinds(_ds()) == [GLOBAL] * 3
    assert kinds_by_layer(_ds(KINDS, layers=(5, 6, 7))) == {
        5: "sliding4",
        6: "sliding4",
        7: "global",
    }
    assert kinds_by_layer(_ds()) == {0: GLOBAL, 1: GLOBAL, 2: GLOBAL}
    assert block_kinds(KINDS) == [EMBEDDING, *KINDS]


def test_a_record_that_does_not_match_the_layers_is_refused():
    with pytest.raises(ValueError, match="one kind per layer"):
        layer_kinds(_ds(KINDS), n_layers=4)
    bad = _ds().assign({LAYER_KIND: (("layer", "head"), np.full((3, 2), "global"))})
    with pytest.raises(ValueError, match="coordinate on 'layer'"):
        layer_kinds(bad)


def test_the_column_sits_after_layer_and_replaces_a_stale_one():
    df = pd.DataFrame({"variant": ["a"] * 3, "layer": [2, 0, 1], "estimate": [0.3, 0.1, 0.2]})
    out = with_layer_kind(df, {0: "sliding4", 1: "sliding4", 2: "global"})
    assert list(out.columns) == ["variant", "layer", LAYER_KIND, "estimate"]
    assert list(out[LAYER_KIND]) == ["global", "sliding4", "sliding4"]
    stale = df.assign(layer_kind="?")
    assert with_layer_kind(stale, KINDS).equals(with_layer_kind(df, KINDS))
    with pytest.raises(ValueError, match=r"layer\(s\) \[2\]"):
        with_layer_kind(df, {0: "global", 1: "global"})
