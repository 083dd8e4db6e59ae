"""The names paper 2's summary writes and its tables read (paper2.labels): what a BOS intervention
is measured on and which replacement it is, and the decomposition's conditions."""

from __future__ import annotations

from causalpos.models.variants import parse_variant
from causalpos.paper2 import labels as L


def test_a_ring_pair_on_logits_is_the_residual_stream_component():
    assert L.bos_measure("bos_replace_mean+ring", "ring", "logit") == L.RESIDUAL_STREAM
    # paper 2's own reading: the bidirectional pair on log-attention
    assert L.bos_measure("bos_replace_mean+bidirectional", "bidirectional", "logattn") == (
        L.RESIDUAL_STREAM_PAPER
    )
    assert L.bos_measure("bos_replace_mean+ring", "ring", "logattn") == "logattn"
    # a causal pair, or a bidirectional one read on logits, is measured on its target
    assert L.bos_measure("bos_replace_mean", "causal", "logit") == "logit"
    assert L.bos_measure("bos_replace_mean", "causal", "logattn") == "logattn"
    assert L.bos_measure("bos_replace_mean+bidirectional", "bidirectional", "logit") == "logit"


def test_the_replacement_of_a_bos_run():
    assert L.bos_replacement("bos_replace_mean+bidirectional") == "mean"
    assert L.bos_replacement("bos_replace_all_gaussian") == "all_gaussian"
    assert L.bos_replacement("causal") == ""


def test_every_condition_is_a_causal_run_and_its_bidirectional_twin():
    assert "rope" in L.DEFAULT_CONDITIONS
    for causal, bidirectional in L.DEFAULT_CONDITIONS.values():
        assert parse_variant(causal).causal and not parse_variant(bidirectional).causal
    assert L.STAT == ("estimate", "lo", "hi") and L.LANDMARKS == ("modelled", "counted")


def test_the_mask_free_route_applies_only_with_a_fixed_token_0():
    import math

    import numpy as np

    assert L.token0_status({"token0_fixed": 1, "token0_ids": [2]}) == (1.0, L.MEASURED)
    fixed, why = L.token0_status({"token0_fixed": np.int64(0), "token0_ids": np.array([7, 9])})
    assert fixed == 0.0 and why == L.NOT_FIXED.format(ids="7, 9")
    # five ids or more: the summary keeps the first five, the text says there are more
    _, why = L.token0_status({"token0_fixed": 0, "token0_ids": [28, 30, 75, 284, 288]})
    assert "(ids 28, 30, 75, 284, 288, ...)" in why
    assert L.token0_status({"token0_fixed": 0, "token0_ids": 5})[1] == L.NOT_FIXED.format(ids="5")
    fixed, why = L.token0_status({})
    assert math.isnan(fixed) and why == L.UNRECORDED
