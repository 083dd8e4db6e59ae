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
