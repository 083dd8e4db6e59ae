"""The stream plant (causalpos.capture.stream): its profile and direction, the term the hook adds
(the declared size, along u with profile g, only at the planted layer's input), the forward pass
left bit for bit alone at dose 0 and below the plant, the capture exact with the plant, its
settings and store attrs, and no state that grows with the sequences."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from causalpos.capture import hook
from causalpos.capture.position0 import decoder_layers
from causalpos.capture.settings import CaptureRun
from causalpos.capture.stream import (
    STREAM_ATTRS,
    STREAM_PROFILES,
    StreamPlant,
    planted_stream,
    resolve_stream,
    stream_direction,
    stream_profile,
)
from causalpos.models.variants import compose, parse_variant, variant_names, without_stream
from causalpos.paper2.extraction.design import pair_mask
from causalpos.paper2.summary.planted import planted_truth
from tests.conftest import CollectScores, tiny_pair

TWIN = "identity_rope+bidirectional"
DOSE1 = "identity_rope+plant_stream1+bidirectional"


def _tiny_llama(layers: int = 3):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(copy.deepcopy(cfg)).eval()


def _tokens(n: int = 6, T: int = 10) -> np.ndarray:
    tok = np.random.default_rng(1).integers(3, 64, (n, T))
    tok[:, 0] = 1
    return tok


def _collect(model, tok, variant, stream=None, batch=3):
    c = CollectScores()
    ds = hook.capture_scores(
        model,
        tok,
        CaptureRun(variant, batch, seed=0, stream=stream, progress=False),
        reducers=[c],
    )
    return c, ds


def test_stream_variants_parse_and_compose():
    v = parse_variant(DOSE1)
    assert (v.stream, v.rope, v.causal, v.plant) == (1, "identity", False, None)
    assert parse_variant("plant_stream4").stream == 4 and parse_variant(TWIN).stream == 0
    assert without_stream(DOSE1) == TWIN and without_stream("plant_stream2") == "causal"
    assert compose("bidirectional", "plant_stream3", "identity_rope") == (
        "identity_rope+plant_stream3+bidirectional"
    )
    # the stream part sits between position 0 and the scores: one atom of it per run
    both = "identity_rope+plant_stream1+plant_query+bidirectional"
    assert parse_variant(both).stream == 1 and parse_variant(both).plant == "query"
    assert DOSE1 in variant_names() and both in variant_names()
    with pytest.raises(ValueError, match="conflicts.*stream"):
        parse_variant("plant_stream1+plant_stream2")
    with pytest.raises(ValueError, match="rotary, position 0, stream, scores, mask"):
        parse_variant("identity_rope+bidirectional+plant_stream1")
    with pytest.raises(ValueError, match="unknown"):
        parse_variant("plant_stream5")


@pytest.mark.parametrize("profile", STREAM_PROFILES)
def test_profile_is_centred_unit_rms_monotone_and_no_offset_profile(profile):
    T = 16
    g = stream_profile(T, profile)
    assert abs(g.mean()) < 1e-12 and np.mean(g * g) == pytest.approx(1.0, rel=1e-12)
    assert (np.diff(g) > 0).all()
    # its query map b_ij = g(i) has a ΔSS beyond the saturated offset baseline (key 0 modelled):
    # an offset profile cannot absorb it
    assert planted_truth(g, pair_mask(T, window="all")) > 0.1 * T
    if profile == "log":  # decaying steps: the largest change at the start
        assert (np.diff(g, 2) < 0).all()
    with pytest.raises(ValueError, match="allowed"):
        stream_profile(T, "sqrt")


def test_direction_is_a_seeded_unit_vector():
    u = stream_direction(32, 0)
    assert np.linalg.norm(u) == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_array_equal(u, stream_direction(32, 0))
    assert abs(float(u @ stream_direction(32, 1))) < 0.9


def _inputs_at(model, layer: int, tok, plant=None) -> torch.Tensor:
    """The hidden states decoder layer ``layer`` receives (after the plant's hook, if any)."""
    seen = {}

    def grab(_mod, args, kwargs):
        seen["h"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

    with torch.inference_mode(), planted_stream(model, plant):
        handle = decoder_layers(model)[layer].register_forward_pre_hook(grab, with_kwargs=True)
        try:
            model(input_ids=torch.from_numpy(tok), use_cache=False)
        finally:
            handle.remove()
    return seen["h"]


def test_the_hook_adds_the_declared_term_at_the_planted_layer_only():
    model = _tiny_llama()
    tok = _tokens()
    T, d = tok.shape[1], model.config.hidden_size
    plant = StreamPlant(1, 0.5, stream_profile(T, "log"), stream_direction(d, 3))
    base = _inputs_at(model, 1, tok).double()
    got = _inputs_at(model, 1, tok, plant).double()
    # Δh_pi = dose · s_p · g(i) · u, s_p² = mean_i ‖h_pi‖² of the unplanted input (float64 here)
    s = base.pow(2).sum(-1).mean(-1).sqrt()
    want = (
        0.5
        * s[:, None, None]
        * torch.outer(torch.from_numpy(plant.profile), torch.from_numpy(plant.direction))
    )
    torch.testing.assert_close(got - base, want, rtol=0, atol=1e-5 * float(s.max()))
    # its declared size: RMS over positions of ‖Δh‖ is dose × the stream's RMS norm
    rms = (got - base).pow(2).sum(-1).mean(-1).sqrt()
    torch.testing.assert_close(rms, 0.5 * s, rtol=1e-5, atol=0)
    # layer 0's input is untouched, bit for bit; the hook is gone after the block
    torch.testing.assert_close(_inputs_at(model, 0, tok, plant), _inputs_at(model, 0, tok), rtol=0, atol=0)  # fmt: skip
    assert all(not layer._forward_pre_hooks for layer in decoder_layers(model))


def test_dose_zero_and_the_layers_below_are_bit_for_bit_the_unplanted_run():
    model = _tiny_llama()
    tok = _tokens()
    ref, _ = _collect(model, tok, TWIN)
    zero, _ = _collect(model, tok, DOSE1, stream={"layer": 1, "dose": 0.0, "profile": "log"})
    planted, ds = _collect(model, tok, DOSE1, stream={"layer": 1, "dose": 0.5, "profile": "log"})
    for layer in range(3):
        assert torch.equal(zero.scores(layer), ref.scores(layer))
    assert torch.equal(planted.scores(0), ref.scores(0))
    for layer in (1, 2):  # the term propagates: the planted layer and the one above move
        assert (planted.scores(layer) - ref.scores(layer)).abs().max() > 1e-2
    assert {k: ds.attrs[k] for k in STREAM_ATTRS[:5]} == {
        "plant_stream_layer": 1,
        "plant_stream_dose": 0.5,
        "plant_stream_index": 1,
        "plant_stream_profile": "log",
        "plant_stream_seed": 0,
    }
    assert "plant_stream_layer" not in _collect(model, tok, TWIN)[1].attrs


def test_capture_is_exact_with_the_plant():
    """Captured scores of a stream-planted run reproduce the eager reference model's attention
    under the same plant, layer by layer, and its logits equal the planted eager model's."""
    from causalpos.models.forward import model_side, variant_inputs
    from causalpos.models.rotary import disable_rope

    model, ref = tiny_pair("llama")
    ids = torch.randint(3, 256, (3, 12), generator=torch.Generator().manual_seed(1))
    v = parse_variant(DOSE1)
    plant = StreamPlant(0, 0.7, stream_profile(12, "log"), stream_direction(64, 0))
    col = CollectScores()
    with torch.inference_mode(), planted_stream(model, plant):
        with hook.capturing(model, [col], variant=v) as session:
            session.begin_batch(np.arange(3))
            logits = model(**variant_inputs(model, ids, np.arange(3), v, seed=0)).logits
    handles = disable_rope(ref)
    try:
        with torch.inference_mode(), planted_stream(ref, plant), model_side(ref, v):
            out = ref(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    for layer, att in enumerate(out.attentions):
        p = torch.softmax(col.scores(layer).nan_to_num(nan=float("-inf")), dim=-1)
        torch.testing.assert_close(p, att, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)


def test_stream_settings_are_required_exactly_where_a_variant_plants():
    model = _tiny_llama(layers=2)
    tok = _tokens(2, 6)
    ok = {"layer": 0, "dose": 0.5, "profile": "log"}
    with pytest.raises(ValueError, match="needs stream="):
        _collect(model, tok, DOSE1)
    with pytest.raises(ValueError, match="plants nothing in the residual stream"):
        _collect(model, tok, TWIN, stream=ok)
    with pytest.raises(ValueError, match="plant_stream.layer = 2 is outside the model's 2"):
        _collect(model, tok, DOSE1, stream=dict(ok, layer=2))
    with pytest.raises(ValueError, match="a dose must be >= 0"):
        resolve_stream(parse_variant(DOSE1), dict(ok, dose=-1.0), n_layers=2, shape=(6, 32), seed=0)  # fmt: skip
    with pytest.raises(RuntimeError, match="planted for 7 positions"):
        plant = StreamPlant(0, 0.5, stream_profile(7), stream_direction(32, 0))
        _inputs_at(model, 0, tok, plant)


def test_the_hook_keeps_no_state_that_grows_with_the_sequences():
    model = _tiny_llama(layers=2)
    plant, _ = resolve_stream(
        parse_variant(DOSE1),
        {"layer": 0, "dose": 0.5, "profile": "log"},
        n_layers=2,
        shape=(10, 32),
        seed=0,
    )
    with torch.inference_mode(), planted_stream(model, plant):
        for k in range(4):
            model(input_ids=torch.from_numpy(_tokens(2 + k)), use_cache=False)
    assert len(plant._cache) == 1  # one (T, d) term per device and dtype, whatever the batches
    assert plant.term(torch.device("cpu")).shape == (10, 32)
    assert not decoder_layers(model)[0]._forward_pre_hooks
