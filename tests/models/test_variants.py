"""claim 3's factor atoms in the variant grammar (causalpos.models.variants): ``no_window`` changes
the mask, ``global_base`` the rotary embedding; their compositions and conflicts, and which models
can run them (:func:`factor_refusal`, read from a config.json's fields before any job)."""

from __future__ import annotations

import pytest

from causalpos.models.variants import (
    compose,
    factor_refusal,
    parse_variant,
    rope_bases,
    variant_names,
)

GEMMA = {
    "model_type": "gemma3_text",
    "num_hidden_layers": 6,
    "sliding_window": 512,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
}


def test_the_factor_atoms_parse_into_their_parts():
    v = parse_variant("no_window")
    assert (v.window, v.causal, v.ring, v.global_base, v.rope) == (
        False,
        True,
        False,
        False,
        "rope",
    )
    g = parse_variant("global_base")
    assert (g.global_base, g.window, g.rope, g.causal) == (True, True, "rope", True)
    r = parse_variant("global_base+ring")
    assert (r.global_base, r.ring, r.causal) == (True, True, False)
    assert parse_variant("global_base+no_window").atoms == ("global_base", "no_window")
    assert compose("ring", "global_base") == "global_base+ring"
    for name in ("no_window", "global_base", "global_base+ring", "identity_rope+no_window"):
        assert name in variant_names()


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("no_window+ring", "canonical order|both change the mask"),
        ("ring+no_window", "both change the mask"),
        ("identity_rope+global_base", "both change the rotary"),
        ("ring+global_base", "canonical order"),
    ],
)
def test_two_atoms_of_one_part_or_the_wrong_order_are_refused(name, match):
    with pytest.raises(ValueError, match=match):
        parse_variant(name)


def test_rope_bases_from_every_spelling_of_a_config():
    new = {
        "rope_parameters": {
            "sliding_attention": {"rope_theta": 1e4},
            "full_attention": {"rope_theta": 1e6},
        }
    }
    assert rope_bases(new) == {"sliding_attention": 1e4, "full_attention": 1e6}
    assert rope_bases({"rope_theta": 1e6, "rope_local_base_freq": 1e4}) == {
        "sliding_attention": 1e4,
        "full_attention": 1e6,
    }
    assert rope_bases(GEMMA) == {"sliding_attention": 1e4, "full_attention": 1e6}  # defaults
    assert rope_bases({"model_type": "qwen2", "rope_theta": 1e6}) is None


def test_factor_refusal_names_the_model_each_factor_needs():
    assert factor_refusal("no_window", GEMMA) is None
    assert factor_refusal("global_base+ring", GEMMA) is None
    assert factor_refusal("causal", {"model_type": "llama", "num_hidden_layers": 2}) is None
    llama = {"model_type": "llama", "num_hidden_layers": 2}
    assert "has none" in factor_refusal("no_window", llama)
    assert "has none" in factor_refusal("global_base", llama)
    mistral = {"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 8}
    assert factor_refusal("no_window", mistral) is None
    assert "no global layer" in factor_refusal("global_base", mistral)
    qwen = {
        "model_type": "qwen2",
        "num_hidden_layers": 2,
        "sliding_window": 8,
        "layer_types": ["full_attention", "sliding_attention"],
        "rope_theta": 1e6,
    }
    assert "share one base" in factor_refusal("global_base", qwen)
    same = {**GEMMA, "rope_local_base_freq": 1e6, "rope_theta": 1e6}
    assert "share one base" in factor_refusal("global_base", same)
