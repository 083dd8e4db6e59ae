"""Layer kinds (causalpos.models.layer_kinds): each layer's mask as trained, read from the
config, its pattern, and where a window masks nothing."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos.models.layer_kinds import (
    kind_groups,
    layer_kinds,
    masks_anything,
    parse_kind,
    pattern,
    window_masks,
)


def test_kinds_from_layer_types_sliding_window_or_neither():
    gemma = {
        "num_hidden_layers": 6,
        "sliding_window": 512,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    }
    assert layer_kinds(gemma) == ["sliding512"] * 5 + ["global"]
    mistral = {"num_hidden_layers": 3, "sliding_window": 32}  # no layer_types: every layer
    assert layer_kinds(mistral) == ["sliding32"] * 3
    llama = {"num_hidden_layers": 2, "sliding_window": None}
    assert layer_kinds(llama) == ["global", "global"]
    assert kind_groups(layer_kinds(gemma)) == {"sliding512": [0, 1, 2, 3, 4], "global": [5]}


def test_kinds_of_transformers_configs_match_the_masks_they_build():
    """The tiny configs of the tests' architectures: gemma3's 5 : 1 pattern, qwen2's
    max_window_layers, mistral's window on every layer."""
    from conftest import tiny_pair

    for arch, want in (
        ("gemma3", None),
        ("qwen2", ["global", "sliding4"]),
        ("mistral", ["sliding5", "sliding5"]),
        ("llama", ["global", "global"]),
    ):
        model, _ = tiny_pair(arch)
        got = layer_kinds(model.config)
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
    assert window_masks(["sliding512", "global"], 256) == {"sliding512": False, "global": False}
    # at T <= W the sliding pattern is the global one
    np.testing.assert_array_equal(pattern("sliding9", 9), pattern("global", 9))


def test_unreadable_layers_are_refused_naming_the_layer():
    with pytest.raises(ValueError, match="layer 1 is of type 'chunked_attention'"):
        layer_kinds(
            {"num_hidden_layers": 2, "layer_types": ["full_attention", "chunked_attention"]}
        )
    with pytest.raises(ValueError, match="layer 0 is a sliding-window layer .* None"):
        layer_kinds({"num_hidden_layers": 1, "layer_types": ["sliding_attention"]})
    with pytest.raises(ValueError, match="3 entries for num_hidden_layers 2"):
        layer_kinds({"num_hidden_layers": 2, "layer_types": ["full_attention"] * 3})
    with pytest.raises(ValueError, match="expected 'global' or 'sliding<W>'"):
        parse_kind("window512")
