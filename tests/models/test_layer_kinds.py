"""Layer kinds (causalpos.models.layer_kinds): each layer's mask as trained, read from the
config, its pattern and where a window masks nothing; as the stores record it, and the layer_kind
column of every per-layer table (a store without the coordinate reads "global")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from causalpos.models.layer_kinds import (
    EMBEDDING,
    GLOBAL,
    LAYER_KIND,
    block_kinds,
    config_kinds,
    is_kind,
    kind_groups,
    kinds_by_layer,
    layer_kinds,
    masks_anything,
    parse_kind,
    pattern,
    with_layer_kind,
)


def test_kinds_from_layer_types_sliding_window_or_neither():
    gemma = {
        "num_hidden_layers": 6,
        "sliding_window": 512,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    }
    assert config_kinds(gemma) == ["sliding512"] * 5 + ["global"]
    mistral = {"num_hidden_layers": 3, "sliding_window": 32}  # no layer_types: every layer
    assert config_kinds(mistral) == ["sliding32"] * 3
    llama = {"num_hidden_layers": 2, "sliding_window": None}
    assert config_kinds(llama) == ["global", "global"]
    assert kind_groups(config_kinds(gemma)) == {"sliding512": [0, 1, 2, 3, 4], "global": [5]}


def test_kinds_of_transformers_configs_match_the_masks_they_build():
    """The tiny configs of the tests' architectures: gemma3's 5 : 1 pattern, qwen2's
    max_window_layers, mistral's window on every layer."""
    from tests.conftest import tiny_pair

    for arch, want in (
        ("gemma3", None),
        ("qwen2", ["global", "sliding4"]),
        ("mistral", ["sliding5", "sliding5"]),
        ("llama", ["global", "global"]),
    ):
        model, _ = tiny_pair(arch)
        got = config_kinds(model.config)
        if want is None:
            want = [
                "sliding5" if t == "sliding_attention" else "global"
                for t in model.config.layer_types
            ]
        assert got == want, arch


def test_patterns_and_where_a_window_masks_nothing():
    i, j = np.indices((9, 9))
    np.testing.assert_array_equal(pattern("global", 9), j <= i)
    np.testing.assert_array_equal(pattern("sliding3", 9), (j <= i) & (i - j < 3))
    assert parse_kind("sliding512") == 512 and parse_kind("global") is None
    assert masks_anything("sliding512", 640) and not masks_anything("sliding512", 512)
    assert not masks_anything("global", 10)
    # at T <= W the sliding pattern is the global one
    np.testing.assert_array_equal(pattern("sliding9", 9), pattern("global", 9))


def test_unreadable_layers_are_refused_naming_the_layer():
    with pytest.raises(ValueError, match="layer 1 is of type 'chunked_attention'"):
        config_kinds(
            {"num_hidden_layers": 2, "layer_types": ["full_attention", "chunked_attention"]}
        )
    with pytest.raises(ValueError, match="layer 0 is a sliding-window layer .* None"):
        config_kinds({"num_hidden_layers": 1, "layer_types": ["sliding_attention"]})
    with pytest.raises(ValueError, match="3 entries for num_hidden_layers 2"):
        config_kinds({"num_hidden_layers": 2, "layer_types": ["full_attention"] * 3})
    with pytest.raises(ValueError, match="expected 'global' or 'sliding<W>'"):
        parse_kind("window512")


# -- kinds as the stores record them

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


def test_a_stored_kind_of_another_form_is_refused():
    ds = xr.Dataset(coords={"layer": [0, 1], LAYER_KIND: ("layer", ["global", "window8"])})
    with pytest.raises(ValueError, match=r"\['window8'\] are not layer kinds"):
        layer_kinds(ds)
    assert is_kind("sliding512") and is_kind("global") and not is_kind("sliding0")
