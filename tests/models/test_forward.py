"""Claim 3's factor variants as the forward pass runs them (causalpos.models.forward): ``no_window``
(every sliding layer given the full causal mask) against an independent global-mask pass, and
``global_base`` (the sliding layers rotated with the global layers' RoPE base) against the same
weights in a model built with that base, on a tiny random-init Gemma-3; at T ≤ W neither mask
changes; models without sliding layers or without two bases are refused."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from causalpos.capture.hook import capturing
from causalpos.models.forward import global_inv_freq, model_side, variant_inputs
from causalpos.models.variants import SLIDING_TYPE, parse_variant
from tests.conftest import CollectScores, tiny_pair

T = 11  # longer than the tiny Gemma-3's window (5): the window masks pairs


def _gemma(**overrides):
    model, ref = tiny_pair("gemma3", num_hidden_layers=4, **overrides)
    assert model.config.layer_types[:2] == ["sliding_attention", "full_attention"]
    return model, ref


def _run(model, ids, variant, **extra):
    """(scores per layer, model logits) of one captured forward pass."""
    col = CollectScores()
    v = parse_variant(variant)
    seq_ids = np.arange(len(ids))
    with torch.inference_mode(), capturing(model, [col], variant=v) as session:
        session.begin_batch(seq_ids)
        kwargs = variant_inputs(model, ids, seq_ids, v, seed=0) | extra
        logits = model(**kwargs, use_cache=False).logits
    return [col.scores(ly) for ly in range(model.config.num_hidden_layers)], logits


def _ids(t=T, seed=0):
    return torch.randint(3, 200, (2, t), generator=torch.Generator().manual_seed(seed))


def _causal_masks(t):
    causal = torch.ones(t, t, dtype=torch.bool).tril()[None, None].expand(2, 1, t, t)
    return {"full_attention": causal, "sliding_attention": causal}


def _same_nan_and_values(a, b):
    return bool((torch.isnan(a) == torch.isnan(b)).all()) and bool(
        (a.nan_to_num() == b.nan_to_num()).all()
    )


def test_no_window_is_the_pass_whose_sliding_layers_take_the_global_mask():
    """Every layer of ``no_window`` equals, bit for bit, the plain model given the full causal
    mask on both layer types (transformers' own mask mapping, built here): every causal pair of
    a sliding layer is finite; the window's pairs of the first sliding layer (whose input no
    window has touched yet) equal the plain pass's; the global layers' mask is the causal one in
    both; and the logits equal the eager model's under that mask."""
    model, ref = _gemma()
    ids = _ids()
    kinds = model.config.layer_types
    got, logits = _run(model, ids, "no_window")
    want, want_logits = _run(model, ids, "causal", attention_mask=_causal_masks(T))
    plain, _ = _run(model, ids, "causal")
    tri = torch.ones(T, T, dtype=torch.bool).tril()
    for layer, kind in enumerate(kinds):
        assert _same_nan_and_values(got[layer], want[layer]), layer
        assert (
            not torch.isnan(got[layer][..., tri]).any() and torch.isnan(got[layer][..., ~tri]).all()
        )
        if kind == "full_attention":  # the global layers' mask is unchanged
            assert (torch.isnan(plain[layer]) == torch.isnan(got[layer])).all()
    # the plain sliding layer hides pairs the no_window pass reads; on the window's pairs layer 0
    # (input: the embeddings) is the same computation
    w = model.config.sliding_window
    assert torch.isnan(plain[0][..., tri]).any()
    window = tri & ~torch.ones(T, T, dtype=torch.bool).tril(-w)
    assert (got[0][..., window] == plain[0][..., window]).all()
    assert not torch.equal(got[1].nan_to_num(), plain[1].nan_to_num())  # the input changed
    assert torch.equal(logits, want_logits)
    additive = {  # eager attention adds its mask to the scores
        t: torch.zeros(m.shape).masked_fill(~m, torch.finfo(torch.float32).min)
        for t, m in _causal_masks(T).items()
    }
    with torch.inference_mode():
        eager = ref(input_ids=ids, attention_mask=additive, use_cache=False).logits
    assert torch.allclose(logits, eager, rtol=1e-4, atol=1e-5)
    assert model.config.sliding_window == w  # restored


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


def test_global_base_rotates_the_sliding_layers_with_the_global_inverse_frequencies():
    """Layer 0 (sliding) of ``global_base``: q·k of the layer's own projections, rotated here
    with θ_k = 1e6^(−2k/d) (the global layers' base, written out), on the window's pairs; every
    layer equals the same weights in a model built with the global base on its sliding layers
    (its config's ``rope_parameters``), and the global layers' rotation is the plain one."""
    model, _ = _gemma()
    bases = {t: p["rope_theta"] for t, p in model.config.rope_parameters.items()}
    assert bases == {"sliding_attention": 1e4, "full_attention": 1e6}
    ids = _ids(seed=1)
    got, logits = _run(model, ids, "global_base")
    attn = model.model.layers[0].self_attn
    d = attn.head_dim
    with torch.inference_mode():
        h = model.model.layers[0].input_layernorm(model.model.embed_tokens(ids))
        q = attn.q_norm(attn.q_proj(h).view(2, T, -1, d).transpose(1, 2))
        k = attn.k_norm(attn.k_proj(h).view(2, T, -1, d).transpose(1, 2))
        inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
        cos, sin = (torch.cat((f(ang), f(ang)), -1).float() for f in (torch.cos, torch.sin))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin).repeat_interleave(q.shape[1] // k.shape[1], 1)
        want0 = (q @ k.transpose(-1, -2)) * attn.scaling
    finite = ~torch.isnan(got[0])
    assert torch.allclose(got[0][finite], want0[finite], rtol=1e-4, atol=1e-5)
    plain, plain_logits = _run(model, ids, "causal")
    assert (torch.isnan(plain[0]) == ~finite).all()  # the window is kept
    assert not torch.allclose(plain[0][finite], want0[finite], rtol=1e-2, atol=1e-3)
    cfg = copy.deepcopy(model.config)
    cfg.rope_parameters = {
        **cfg.rope_parameters,
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e6},
    }
    from transformers import AutoModelForCausalLM

    twin = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    twin.load_state_dict(model.state_dict())
    twin_scores, twin_logits = _run(twin, ids, "causal")
    for layer in range(model.config.num_hidden_layers):
        assert _same_nan_and_values(got[layer], twin_scores[layer]), layer
    assert torch.equal(logits, twin_logits) and not torch.allclose(logits, plain_logits)
    rotary = model.model.rotary_emb
    pos = torch.arange(T)[None]
    x = torch.zeros(1)
    with torch.inference_mode():
        full0 = rotary(x, pos, "full_attention")
        with model_side(model, parse_variant("global_base")):
            full1 = rotary(x, pos, "full_attention")
            slid1 = rotary(x, pos, "sliding_attention")
        slid0 = rotary(x, pos, "sliding_attention")
    assert all(torch.equal(a, b) for a, b in zip(full0, full1))  # global layers unchanged
    assert all(torch.equal(a, b) for a, b in zip(full1, slid1))  # sliding = global's rotation
    assert not torch.equal(slid0[0], slid1[0])  # and restored on exit
    assert torch.equal(
        getattr(rotary, f"{SLIDING_TYPE}_inv_freq"),
        1.0 / (1e4 ** (torch.arange(0, d, 2).float() / d)),
    )
    assert torch.allclose(global_inv_freq(rotary).double(), inv, rtol=1e-6)


def test_at_t_within_the_window_neither_variant_changes_the_mask():
    """T ≤ W: the window masks nothing, so ``no_window`` is the plain pass bit for bit, and
    ``global_base`` keeps the plain pass's masked cells exactly (only its values change)."""
    model, _ = _gemma(sliding_window=16)
    ids = _ids(t=T, seed=2)
    plain, plain_logits = _run(model, ids, "causal")
    nowin, nowin_logits = _run(model, ids, "no_window")
    base, _ = _run(model, ids, "global_base")
    for layer in range(model.config.num_hidden_layers):
        assert _same_nan_and_values(plain[layer], nowin[layer])
        assert (torch.isnan(plain[layer]) == torch.isnan(base[layer])).all()
    assert torch.equal(plain_logits, nowin_logits)


def test_global_base_on_the_ring_takes_the_global_rotation_on_sliding_layers():
    """``global_base+ring`` (global_base's ring twin) is the ring of the model built with the
    global base on its sliding layers: the ring's key rotation R(±T) reads the swapped base."""
    model, _ = _gemma()
    ids = _ids(seed=3)
    got, _ = _run(model, ids, "global_base+ring")
    cfg = copy.deepcopy(model.config)
    cfg.rope_parameters = {
        **cfg.rope_parameters,
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e6},
    }
    from transformers import AutoModelForCausalLM

    twin = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    twin.load_state_dict(model.state_dict())
    want, _ = _run(twin, ids, "ring")
    plain, _ = _run(model, ids, "ring")
    for layer in range(model.config.num_hidden_layers):
        assert torch.allclose(got[layer], want[layer], rtol=1e-5, atol=1e-6), layer
    assert not torch.allclose(got[0], plain[0], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(
    ("arch", "variant", "match"),
    [
        ("llama", "no_window", "has none"),
        ("llama", "global_base", "has none"),
        ("mistral", "global_base", "has no global layer"),
        ("qwen2", "global_base", "share one base"),
    ],
)
def test_a_factor_the_model_cannot_run_is_refused(arch, variant, match):
    """No sliding layer (llama), no global layer to take a base from (mistral), or sliding and
    global layers with one base (qwen2): refused before any forward pass, saying why and what
    to do."""
    model, _ = tiny_pair(arch)
    with pytest.raises(ValueError, match=match) as err:
        _run(model, _ids(), variant)
    assert "drop" in str(err.value)


def test_no_window_removes_a_mistral_window():
    """One base, sliding windows on every layer (mistral): ``no_window`` runs and every causal
    pair is read at every layer."""
    model, _ = tiny_pair("mistral")
    got, _ = _run(model, _ids(), "no_window")
    tri = torch.ones(T, T, dtype=torch.bool).tril()
    for scores in got:
        assert not torch.isnan(scores[..., tri]).any()
    assert model.config.sliding_window == 5
