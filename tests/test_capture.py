"""Score capture: captured scores against eager attention and against a computation by hand."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from causalpos.capture.hook import capture_scores, capturing
from causalpos.capture.reducers import GroupMeans, ScoreMoments, group_labels
from causalpos.capture.settings import CaptureRun
from causalpos.models.forward import bos_replaced_embeddings, variant_inputs
from causalpos.models.rotary import disable_rope
from causalpos.models.variants import (
    VARIANTS,
    Variant,
    bidirectional_twin,
    compose,
    parse_variant,
    scrambled_position_ids,
    variant_names,
    without_bos_replacement,
)
from tests.conftest import ARCHS, SEQ_LEN, CollectScores, tiny_pair

N_SEQ = 3


def _ids(vocab: int = 256, n: int = N_SEQ, t: int = SEQ_LEN, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n, t), generator=g)


def _capture(model, ids, variant="causal", seed=0, seq_ids=None):
    """Captured scores (CollectScores) and logits of one forward pass under ``variant``."""
    col = CollectScores()
    seq_ids = np.arange(len(ids)) if seq_ids is None else seq_ids
    v = parse_variant(variant)
    with torch.inference_mode(), capturing(model, [col], variant=v) as session:
        session.begin_batch(seq_ids)
        logits = model(**variant_inputs(model, ids, seq_ids, v, seed=seed), use_cache=False).logits
    return col, logits


def _eager(ref, ids, variant="causal", seed=0, seq_ids=None):
    """Eager attention weights of the reference model under ``variant`` (set up by hand)."""
    v = parse_variant(variant)
    seq_ids = np.arange(len(ids)) if seq_ids is None else seq_ids
    kwargs = {"attention_mask": torch.ones_like(ids)}
    if v.rope == "scrambled":
        kwargs["position_ids"] = torch.from_numpy(
            scrambled_position_ids(seq_ids, ids.shape[1], seed)
        )
    if v.bos_replace:
        kwargs["inputs_embeds"] = bos_replaced_embeddings(
            ref, ids, seq_ids, v.bos_replace, per_prompt=v.per_prompt, seed=seed
        )
    else:
        kwargs["input_ids"] = ids
    handles = disable_rope(ref) if v.rope == "identity" else []
    ref.config.is_causal = v.causal
    try:
        with torch.inference_mode():
            out = ref(**kwargs, output_attentions=True, use_cache=False)
    finally:
        ref.config.is_causal = True
        for h in handles:
            h.remove()
    return out.attentions, out.logits


def _layer_types(model) -> list[str]:
    cfg = model.config
    types = getattr(cfg, "layer_types", None)
    if types is None:
        return [
            "sliding_attention" if getattr(cfg, "sliding_window", None) else "full_attention"
        ] * cfg.num_hidden_layers
    return list(types)


def manual_layer0_scores(
    model, ids, *, rope: bool, position_ids=None, causal=True, embeds=None
) -> torch.Tensor:
    """Layer-0 scores ``(batch, head, query, key)`` from the layer's own projections, by hand.

    Independent of the capture: input norm -> q/k projections (fused for phi3) -> q/k norms
    (qwen3, gemma3) -> RoPE with the model's rotary module -> GQA repeat -> q·kᵀ·scaling in
    float32, causal (and sliding-window) mask as NaN.
    """
    inner = model.model
    layer = inner.layers[0]
    attn = layer.self_attn
    b, t = ids.shape
    h_, kv_, d = model.config.num_attention_heads, model.config.num_key_value_heads, attn.head_dim
    with torch.no_grad():
        x0 = inner.embed_tokens(ids) if embeds is None else embeds
        x = layer.input_layernorm(x0)
        if hasattr(attn, "qkv_proj"):
            qkv = attn.qkv_proj(x)
            q, k = qkv[..., : h_ * d], qkv[..., h_ * d : (h_ + kv_) * d]
        else:
            q, k = attn.q_proj(x), attn.k_proj(x)
        q = q.view(b, t, h_, d).transpose(1, 2)
        k = k.view(b, t, kv_, d).transpose(1, 2)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        if rope:
            pos = torch.arange(t).expand(b, t) if position_ids is None else position_ids
            # Gemma3 keeps one rotary module with per-layer-type frequencies.
            rot_args = (
                (x0, pos, _layer_types(model)[0])
                if model.config.model_type == "gemma3_text"
                else (x0, pos)
            )
            cos, sin = inner.rotary_emb(*rot_args)
            apply = sys.modules[type(attn).__module__].apply_rotary_pos_emb
            q, k = apply(q, k, cos, sin)
        k = k.repeat_interleave(h_ // kv_, dim=1)
        s = (q.float() @ k.float().transpose(-1, -2)) * attn.scaling
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    window = model.config.sliding_window if _layer_types(model)[0] == "sliding_attention" else None
    if causal:
        allowed = j <= i
        if window:
            allowed &= i - j < window
    else:
        allowed = torch.ones(t, t, dtype=torch.bool)
        if window:
            allowed &= (i - j).abs() <= window
    return s.masked_fill(~allowed, float("nan"))


def _assert_softmax_matches(col, attentions):
    for layer, att in enumerate(attentions):
        s = col.scores(layer)
        assert s.dtype == torch.float32
        # Stores hold NaN where masked, never ±inf or dtype-min values.
        assert not torch.isinf(s).any()
        assert torch.equal(torch.isnan(s), att == 0), f"layer {layer}: NaN pattern != eager mask"
        p = torch.softmax(s.nan_to_num(nan=float("-inf")), dim=-1)
        torch.testing.assert_close(p, att, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_causal_scores_reproduce_eager_attention(arch):
    model, ref = tiny_pair(arch)
    ids = _ids(model.config.vocab_size)
    col, logits = _capture(model, ids)
    attentions, _ = _eager(ref, ids)
    _assert_softmax_matches(col, attentions)
    # The capture's output path is the model's own sdpa call: logits identical, bit for bit.
    with torch.inference_mode():
        plain = model(input_ids=ids, use_cache=False).logits
    assert torch.equal(logits, plain)
    assert model.config._attn_implementation == "sdpa"  # restored after the session
    torch.testing.assert_close(
        col.scores(0),
        manual_layer0_scores(model, ids, rope=True),
        rtol=1e-5,
        atol=1e-5,
        equal_nan=True,
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_sliding_window_pattern(arch):
    """Where a layer has a window shorter than T, exactly offsets 0..w-1 are scored."""
    model, _ = tiny_pair(arch)
    col, _ = _capture(model, _ids(model.config.vocab_size))
    i, j = np.arange(SEQ_LEN)[:, None], np.arange(SEQ_LEN)[None, :]
    for layer, kind in enumerate(_layer_types(model)):
        w = model.config.sliding_window if kind == "sliding_attention" else SEQ_LEN
        finite = (j <= i) & (i - j < w)
        got = ~torch.isnan(col.scores(layer)).numpy()
        assert (got == finite).all(), f"{arch} layer {layer} ({kind})"
    n_sliding = sum(k == "sliding_attention" for k in _layer_types(model))
    assert n_sliding == {"qwen2": 1, "mistral": 2, "gemma3": 1}.get(arch, 0)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(
    "variant",
    [
        "bidirectional",
        "identity_rope",
        "scrambled_rope",
        "bos_replace_gaussian",
        # compositions: mask x rotary x position-0 input
        "scrambled_rope+bidirectional",
        "identity_rope+bidirectional",
        "bos_replace_mean+bidirectional",
        "identity_rope+bos_replace_all_gaussian+bidirectional",
    ],
)
def test_variants_reproduce_eager_and_hand_computation(arch, variant):
    model, ref = tiny_pair(arch)
    ids = _ids(model.config.vocab_size)
    seq_ids = np.array([5, 9, 11])
    col, logits = _capture(model, ids, variant, seed=3, seq_ids=seq_ids)
    attentions, ref_logits = _eager(ref, ids, variant, seed=3, seq_ids=seq_ids)
    _assert_softmax_matches(col, attentions)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)

    v = parse_variant(variant)
    pos = (
        torch.from_numpy(scrambled_position_ids(seq_ids, SEQ_LEN, 3))
        if v.rope == "scrambled"
        else None
    )
    embeds = (
        bos_replaced_embeddings(model, ids, seq_ids, v.bos_replace, per_prompt=v.per_prompt, seed=3)
        if v.bos_replace
        else None
    )
    manual = manual_layer0_scores(
        model, ids, rope=v.rope != "identity", position_ids=pos, causal=v.causal, embeds=embeds
    )
    torch.testing.assert_close(col.scores(0), manual, rtol=1e-5, atol=1e-5, equal_nan=True)
    # The variant really changed something: layer-0 scores differ from the plain causal run.
    plain, _ = _capture(model, ids)
    diff = (col.scores(0) - plain.scores(0)).nan_to_num(0).abs().max()
    changed = ~(torch.isnan(col.scores(0)) == torch.isnan(plain.scores(0))).all()
    assert diff > 1e-3 or changed


@pytest.mark.parametrize("arch", ARCHS)
def test_bidirectional_removes_the_causal_mask(arch):
    model, _ = tiny_pair(arch)
    col, _ = _capture(model, _ids(model.config.vocab_size), "bidirectional")
    i, j = np.arange(SEQ_LEN)[:, None], np.arange(SEQ_LEN)[None, :]
    for layer, kind in enumerate(_layer_types(model)):
        nan = torch.isnan(col.scores(layer)).numpy()
        if kind == "full_attention":
            assert not nan.any(), f"{arch} layer {layer}: bidirectional run still masks cells"
        else:
            # transformers' bidirectional window is symmetric and inclusive: |i - j| <= w.
            w = model.config.sliding_window
            assert (nan == (np.abs(i - j) > w)).all()
    assert getattr(model.config, "is_causal", True) is True  # restored after the session


@pytest.mark.parametrize("arch", ARCHS)
def test_layer_bidirectional_is_the_causal_pass_read_without_each_layers_mask(arch):
    """Layer-local ablation: the forward pass (hence the output and every layer's input) is the
    causal one; each layer's maps are its full QKᵀ. Layer 0 reads the embeddings, the same in
    every run, so its maps equal the bidirectional run's exactly; above it they equal the causal
    run's on every allowed cell and differ from the bidirectional run's."""
    model, _ = tiny_pair(arch)
    ids = _ids(model.config.vocab_size)
    local, out_local = _capture(model, ids, "layer_bidirectional")
    causal, out_causal = _capture(model, ids)
    whole, out_whole = _capture(model, ids, "bidirectional")
    torch.testing.assert_close(out_local, out_causal, rtol=0, atol=0)
    assert (out_local - out_whole).abs().max() > 1e-4
    for layer, kind in enumerate(_layer_types(model)):
        s_loc, s_cau = local.scores(layer), causal.scores(layer)
        assert not torch.isnan(s_loc).any(), f"{arch} layer {layer}: a cell is masked"
        allowed = ~torch.isnan(s_cau)
        torch.testing.assert_close(s_loc[allowed], s_cau[allowed], rtol=0, atol=0)
        if layer == 0 and kind == "full_attention":
            torch.testing.assert_close(s_loc, whole.scores(0), rtol=1e-6, atol=1e-6)
    top = len(_layer_types(model)) - 1
    assert (local.scores(top) - whole.scores(top)).nan_to_num(0).abs().max() > 1e-4


def test_identity_rope_is_exactly_no_rotation():
    model, _ = tiny_pair("llama")
    ids = _ids()
    col, _ = _capture(model, ids, "identity_rope")
    manual = manual_layer0_scores(model, ids, rope=False)
    # Same float32 inputs; only the matmul blocking may differ.
    torch.testing.assert_close(col.scores(0), manual, rtol=1e-6, atol=1e-6, equal_nan=True)
    # No hook survives the session: a plain run has RoPE again.
    assert not any(
        m._forward_hooks for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")
    )


def test_scrambled_positions_keep_causal_mask_and_are_seeded():
    pos = scrambled_position_ids(np.array([0, 1, 0]), 20, seed=7)
    assert (np.sort(pos, axis=1) == np.arange(20)).all()
    assert (pos[0] == pos[2]).all() and (pos[0] != pos[1]).any()
    assert (scrambled_position_ids(np.array([1]), 20, seed=7) == pos[1]).all()
    model, _ = tiny_pair("llama")
    col, _ = _capture(model, _ids(), "scrambled_rope")
    # Non-consecutive position ids must not be read as packed sequences: mask stays causal.
    i, j = np.arange(SEQ_LEN)[:, None], np.arange(SEQ_LEN)[None, :]
    assert (torch.isnan(col.scores(1)).numpy() == (j > i)).all()


def test_bos_replacement_only_changes_row_0():
    model, _ = tiny_pair("llama")
    ids = _ids(n=4)
    ids[:, 0] = 1  # a fixed BOS: the norm-matched Gaussian is then one vector for all prompts
    base = model.get_input_embeddings()(ids)
    seq = np.arange(4)
    for kind in ("mean", "zeros", "token", "gaussian"):
        for per_prompt in (False, True) if kind in ("token", "gaussian") else (False,):
            e = bos_replaced_embeddings(model, ids, seq, kind, per_prompt=per_prompt, seed=0)
            assert torch.equal(e[:, 1:], base[:, 1:])
            assert not torch.equal(e[:, 0], base[:, 0])
            same = all(torch.equal(e[0, 0], e[b, 0]) for b in range(4))
            assert same != per_prompt, (kind, per_prompt)
            again = bos_replaced_embeddings(model, ids, seq, kind, per_prompt=per_prompt, seed=0)
            assert torch.equal(e, again)  # seeded
    g = bos_replaced_embeddings(model, ids, seq, "gaussian", per_prompt=True, seed=0)
    torch.testing.assert_close(g[:, 0].norm(dim=-1), base[:, 0].norm(dim=-1), rtol=1e-6, atol=0)
    m = bos_replaced_embeddings(model, ids, seq, "mean", per_prompt=False, seed=0)
    torch.testing.assert_close(m[0, 0], model.get_input_embeddings().weight.mean(0))
    z = bos_replaced_embeddings(model, ids, seq, "zeros", per_prompt=False, seed=0)
    assert not z[:, 0].any()
    t = bos_replaced_embeddings(model, ids, seq, "token", per_prompt=False, seed=0)
    w = model.get_input_embeddings().weight
    (drawn,) = [k for k in range(w.shape[0]) if torch.equal(w[k], t[0, 0])]  # one vocabulary row
    assert drawn not in (1, 2) and torch.equal(t[:, 0], w[drawn].expand(4, -1))  # not BOS / EOS


def test_bos_zeros_gives_exact_zero_key_column_in_layer_0():
    # Llama has no q/k bias: RMSNorm(0) = 0, so key 0 scores exactly 0 against every query.
    model, _ = tiny_pair("llama")
    col, _ = _capture(model, _ids(), "bos_replace_zeros")
    assert (col.scores(0)[:, :, :, 0] == 0).all()
    assert torch.isnan(col.scores(0)[:, :, 0, 1:]).all()


def test_softcap_is_applied_and_output_stays_correct():
    """Gemma-2 passes ``softcap`` to the attention function: scores are tanh-capped."""
    import copy

    from transformers import AutoModelForCausalLM, Gemma2Config

    cfg = Gemma2Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=5,
        attn_logit_softcapping=0.5,
        final_logit_softcapping=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    # Gemma-2 has no sdpa support; the capture replaces whatever implementation it has.
    model = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager").eval()
    ref = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager").eval()
    ref.load_state_dict(model.state_dict())
    ids = _ids()
    col, logits = _capture(model, ids)
    attentions, ref_logits = _eager(ref, ids)
    _assert_softmax_matches(col, attentions)
    assert np.nanmax(np.abs(col.scores(0).numpy())) <= 0.5
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)


def test_bf16_model_scores_computed_in_float32():
    model, _ = tiny_pair("llama", dtype=torch.bfloat16)
    ids = _ids()
    col, _ = _capture(model, ids)
    manual = manual_layer0_scores(model, ids, rope=True)  # bf16 q, k; float32 matmul
    torch.testing.assert_close(col.scores(0), manual, rtol=1e-6, atol=1e-6, equal_nan=True)
    # A bf16 matmul would be off by ~1e-2 at these magnitudes: the test can tell them apart.
    ds = capture_scores(
        model,
        ids.numpy(),
        CaptureRun("causal", 2, seed=0, progress=False),
        reducers=[ScoreMoments()],
    )
    assert ds.attrs["dtype"] == "bfloat16" and ds["score_mean"].dtype == np.float64


def test_extract_scores_statistics_match_numpy():
    model, _ = tiny_pair("qwen2")
    tokens = _ids(n=7).numpy()
    col = CollectScores()
    labels = group_labels(7, n_groups=3)
    ds = capture_scores(
        model,
        tokens,
        CaptureRun("causal", 3, seed=0, progress=False),
        reducers=[ScoreMoments(), GroupMeans(labels), col],
        attrs={"dataset": "unit"},
    )
    allmaps = np.stack(
        [col.scores(layer).numpy().astype(np.float64) for layer in range(2)], axis=1
    )  # (seq, layer, head, q, k)
    np.testing.assert_allclose(ds["score_mean"].values, allmaps.mean(0), rtol=1e-12, atol=1e-14)
    m2 = ((allmaps - allmaps.mean(0)) ** 2).sum(0)
    np.testing.assert_allclose(ds["score_m2"].values, m2, rtol=1e-9, atol=1e-12)
    assert int(ds["n_sequences"]) == 7
    for g in range(3):
        sel = labels == g
        np.testing.assert_allclose(
            ds["score_group_mean"].sel(group=g).values,
            allmaps[sel].mean(axis=(0, 2)),
            rtol=1e-12,
            atol=1e-14,
        )
        assert int(ds["group_n_sequences"].sel(group=g)) == sel.sum()
    assert np.isnan(ds["score_mean"].values[0, 0, 0, 1]) and np.isfinite(
        ds["score_mean"].values[0, 0, 1, 0]
    )
    a = ds.attrs
    assert a["variant"] == "causal" and a["seq_len"] == SEQ_LEN and a["n_sequences"] == 7
    assert a["scaling"] == pytest.approx(16**-0.5) and a["dataset"] == "unit" and a["n_layers"] == 2
    assert ds["score_mean"].attrs["reducer"] == "causalpos.capture.reducers:ScoreMoments"


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("reader", ["scores", "position0"])
def test_extraction_projects_one_position_onto_the_vocabulary(arch, reader):
    """Extraction never computes the logits it does not read: the LM head (2 x T x vocab x hidden
    FLOP per sequence, 60 % of Gemma-3 270M's forward at T = 640) sees the last position only,
    on the score capture's path and on the hidden-state readers' path alike."""
    from causalpos.capture.position0 import Position0States

    model, _ = tiny_pair(arch)
    seen = []
    handle = model.get_output_embeddings().register_forward_hook(
        lambda module, args, out: seen.append(tuple(args[0].shape))
    )
    reducers = [ScoreMoments()] if reader == "scores" else [Position0States()]
    try:
        capture_scores(
            model,
            _ids(model.config.vocab_size).numpy(),
            CaptureRun("causal", batch_size=2, progress=False),
            reducers=reducers,
        )
    finally:
        handle.remove()
    assert seen == [(2, 1, model.config.hidden_size), (1, 1, model.config.hidden_size)]


def test_moments_merge_is_exact_chan():
    rng = np.random.default_rng(0)
    # 2 x 370 x 370 cells > one CPU tile (2^18): the tiled accumulation is exercised.
    x = (rng.standard_normal((10, 2, 370, 370)) * 3 + 40).astype(np.float32)  # large mean/std ratio
    iu = np.triu_indices(370, 1)
    x[:, :, iu[0], iu[1]] = np.nan
    parts = []
    for lo, hi in [(0, 3), (3, 4), (4, 10)]:
        r = ScoreMoments()
        r.update(0, torch.from_numpy(x[lo:hi]), np.arange(lo, hi))
        parts.append(r.result())
    merged = ScoreMoments.merge(parts)
    with pytest.raises(RuntimeError, match="already taken"):
        r.result()  # result() consumes the state (peak memory stays near the state's size)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(merged["score_mean"].values[0], x64.mean(0), rtol=1e-14)
    np.testing.assert_allclose(
        merged["score_m2"].values[0], ((x64 - x64.mean(0)) ** 2).sum(0), rtol=1e-9
    )
    assert int(merged["n_sequences"]) == 10


def test_score_maps_keep_each_sequences_maps_and_merge_by_sequence():
    """ScoreMaps keeps a copy of every sequence's maps of the layers it is given (the capture's
    buffer is reused), and shards merge into the maps of one pass, ordered by sequence id."""
    from causalpos.capture.merging import MERGES
    from causalpos.capture.reducers import ScoreMaps, reducer_path
    from causalpos.io.shards import merge_shards

    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3, 2, 4, 4)).astype(np.float32)  # (sequence, layer, head, q, k)
    parts = []
    for lo, hi in [(3, 6), (0, 3)]:  # shards in any order
        r = ScoreMaps(layers=[2, 0])
        buf = torch.empty(hi - lo, 2, 4, 4)
        for layer in range(3):
            buf.copy_(torch.from_numpy(x[lo:hi, layer]))
            r.update(layer, buf, np.arange(lo, hi))
        ds = r.result()
        for var in ds.data_vars.values():
            var.attrs["reducer"] = reducer_path(r)
        parts.append(ds.assign_attrs(n_sequences=hi - lo))
    assert parts[0]["score_maps"].dims == ("sequence", "map_layer", "head", "query", "key")
    merged = merge_shards(parts, reducers=MERGES)
    assert merged["sequence"].values.tolist() == list(range(6))
    assert merged["map_layer"].values.tolist() == [0, 2]
    np.testing.assert_array_equal(merged["score_maps"].values, x[:, [0, 2]])
    with pytest.raises(ValueError, match=r"layers \[5\] were asked for"):
        r = ScoreMaps(layers=[0, 5])
        r.update(0, torch.from_numpy(x[:1, 0]), np.arange(1))
        r.result()


def test_variant_names():
    assert [parse_variant(v).name for v in VARIANTS] == list(VARIANTS)
    assert parse_variant("bos_replace_all_gaussian").per_prompt
    with pytest.raises(ValueError, match="allowed"):
        parse_variant("bos_replace_all_zeros")


def test_compositions_parse_into_mask_rotary_and_position0():
    v = parse_variant("identity_rope+bos_replace_all_gaussian+bidirectional")
    assert (v.causal, v.rope, v.bos_replace, v.per_prompt) == (False, "identity", "gaussian", True)
    assert v.atoms == ("identity_rope", "bos_replace_all_gaussian", "bidirectional")
    assert parse_variant("scrambled_rope+bidirectional") == Variant(
        "scrambled_rope+bidirectional", causal=False, rope="scrambled"
    )
    assert parse_variant("bos_replace_mean+bidirectional") == Variant(
        "bos_replace_mean+bidirectional", causal=False, bos_replace="mean"
    )
    # one spelling per run: the canonical order rotary, position 0, mask
    assert compose("bidirectional", "scrambled_rope") == "scrambled_rope+bidirectional"
    assert compose("causal") == "causal" and compose("causal", "bidirectional") == "bidirectional"
    assert bidirectional_twin("identity_rope") == "identity_rope+bidirectional"
    assert without_bos_replacement("bos_replace_mean+bidirectional") == "bidirectional"
    assert without_bos_replacement("scrambled_rope+bos_replace_zeros") == "scrambled_rope"
    for bad, message in (
        ("bidirectional+scrambled_rope", "canonical order .* 'scrambled_rope\\+bidirectional'"),
        (
            "bidirectional+identity_rope+bos_replace_mean",
            "'identity_rope\\+bos_replace_mean\\+bidirectional'",
        ),
        ("bidirectional+bidirectional", "repeats \\['bidirectional'\\]"),
        ("identity_rope+scrambled_rope", "conflicts.*rotary"),
        ("bos_replace_mean+bos_replace_zeros", "conflicts.*position 0"),
        ("causal+bidirectional", "composes with nothing; write 'bidirectional'"),
        ("identity_rope+sideways", "'sideways' is not a variant"),
        ("identity_rope_bidirectional", "unknown"),
        ("", "non-empty"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_variant(bad)
    names = variant_names()
    assert names[: len(VARIANTS)] == list(VARIANTS) and len(names) == len(set(names)) == 1400
    assert [parse_variant(n).name for n in names] == names
    # every (rotary, position 0, stream, scores, mask) combination exactly once: 4 x 7 x 5 x 2 x 5
    combos = {
        (
            v.causal,
            v.unmasked_scores,
            v.ring,
            v.rope,
            v.bos_replace,
            v.per_prompt,
            v.stream,
            v.plant,
            v.window,
            v.global_base,
        )
        for v in map(parse_variant, names)
    }
    assert len(combos) == 1400
    v = parse_variant("identity_rope+bos_replace_mean+ring")
    assert not v.causal and v.ring and v.rope == "identity" and v.bos_replace == "mean"
    with pytest.raises(ValueError, match="conflicts.*mask"):
        parse_variant("ring+bidirectional")
    v = parse_variant("identity_rope+layer_bidirectional")
    assert v.causal and v.unmasked_scores and v.rope == "identity"
    with pytest.raises(ValueError, match="conflicts.*mask"):
        parse_variant("layer_bidirectional+bidirectional")


def test_capture_outside_session_is_an_error():
    model, _ = tiny_pair("llama")
    from causalpos.capture.hook import CAPTURE_IMPLEMENTATION, register_capture

    register_capture()
    model.set_attn_implementation(CAPTURE_IMPLEMENTATION)
    with pytest.raises(RuntimeError, match="outside"):
        model(_ids())


def test_variant_pattern_matches_exactly_the_variant_names():
    import re

    from causalpos.config import VARIANT_PATTERN
    from causalpos.models.variants import VARIANTS, parse_variant

    for name in VARIANTS:
        assert re.fullmatch(VARIANT_PATTERN, name)
        assert parse_variant(name).name == name
    for name in (
        "scrambled_rope+bidirectional",
        "identity_rope+bidirectional",
        "bos_replace_mean+bidirectional",
        "scrambled_rope+bos_replace_all_token+bidirectional",
    ):
        assert re.fullmatch(VARIANT_PATTERN, name), name
    for near in (
        "bos_replace_all",
        "causal_",
        "bidirectional+causal",
        "bos_replace_all_mean",
        "bidirectional+scrambled_rope",  # not the canonical order
        "identity_rope+scrambled_rope",  # conflict
        "bidirectional+bidirectional",
        "identity_rope_bidirectional",
        "scrambled_rope+bidirectional/shard-0000",
    ):
        assert not re.fullmatch(VARIANT_PATTERN, near), near


def test_each_extraction_default_is_written_once():
    from causalpos.capture.settings import ExtractSettings
    from tests.settings_defaults import disagreements

    assert disagreements(ExtractSettings) == []
    s = ExtractSettings.from_params({"batch_size": "auto", "memory_fraction": 0.5})
    assert (s.batch_size, s.memory_fraction, s.n_groups) == ("auto", 0.5, 16)
    with pytest.raises(ValueError, match=r"no key\(s\) \['shard_size'\]"):
        ExtractSettings.from_params({"shard_size": 8})


@pytest.mark.slow
def test_capture_is_exact_on_gemma3_270m_sliding_and_global_layers(gemma3_dir):
    """The real Gemma-3 270M at T = 640 > W = 512, causal and bidirectional: each layer's NaN
    pattern is the mask transformers gives its kind (sliding causal 0 <= i - j < W, sliding
    bidirectional |i - j| <= W, global causal j <= i, global bidirectional none), and the softmax
    of the captured scores is eager attention's (same weights; measured at most 2.1e-5 on two
    KJV chunks, 0 at layer 0, where both passes see the same input)."""
    from causalpos.models.load import load_model
    from causalpos.sampling import SequenceSample, draw_sequences

    model, tok = load_model(gemma3_dir)
    cfg = model.config
    t, w = 640, cfg.sliding_window
    assert w == 512 and cfg.layer_types.count("full_attention") == 3
    sample = SequenceSample(corpus={"type": "kjv"}, seq_len=t, n_sequences=1, mode="chunks")
    data = draw_sequences(tok, sample)
    ids = torch.from_numpy(data["tokens"].values.astype(np.int64))
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    for variant in ("causal", "bidirectional"):
        col, _ = _capture(model, ids, variant)
        model.set_attn_implementation("eager")
        try:
            attentions, _ = _eager(model, ids, variant)
        finally:
            model.set_attn_implementation("sdpa")
        for layer, kind in enumerate(cfg.layer_types):
            sliding = kind == "sliding_attention"
            if variant == "causal":
                allowed = (j <= i) & (i - j < w if sliding else True)
            else:
                allowed = np.abs(i - j) <= w if sliding else np.ones((t, t), dtype=bool)
            scores = col.scores(layer)
            assert (torch.isnan(scores).numpy() == ~allowed).all(), (variant, layer, kind)
            probs = torch.softmax(scores.nan_to_num(nan=float("-inf")), dim=-1)
            err = float((probs - attentions[layer]).abs().max())
            assert err <= (1e-6 if layer == 0 else 1e-4), (variant, layer, kind, err)
