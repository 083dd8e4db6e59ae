"""causalpos.gram: paper 1 Fig. 3 panels and Fig. 8 scores, checked against independent computations.

Tiny random-init models (hidden 32, 2–3 layers, 4 query heads, 2 KV heads); float32.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from causalpos.paper1 import gram as G
from causalpos.paper1.nearby import nearby_table
from causalpos.sampling import SequenceSample
from causalpos.training import architecture, settings

SHAPE = settings.ModelShape(hidden=32, layers=3, heads=4, kv_heads=2, intermediate=64)
N, SEQ, VOCAB = 10, 24, 64


def _model(variant: str, seed: int = 0):
    cfg = architecture.build_config(
        variant, vocab_size=VOCAB, shape=SHAPE, context=32
    )  # swa window 8 < SEQ
    model = architecture.build_model(cfg, seed=seed).eval()
    # Random-init weights are tiny (std 0.02): scale them up so attention is far from uniform and
    # every identity below is tested on non-trivial values.
    with torch.no_grad():
        for _name, p in model.named_parameters():
            if p.ndim == 2:
                p.mul_(8.0)
    return model


def _qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_bias=True,
        max_position_embeddings=64,
    )
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(8.0)
            else:
                p.add_(
                    0.1 * torch.randn_like(p)
                )  # non-trivial norm weights (incl. q/k norms) and biases
    return model


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(3, VOCAB, (N, SEQ), generator=g)
    x[:, 0] = 0  # BOS at position 0, as in the trained models
    return x


def _hidden(model, tokens):
    with torch.no_grad():
        return model(input_ids=tokens, output_hidden_states=True).hidden_states


def _lower_nan(t: int) -> np.ndarray:
    return np.triu(np.ones((t, t), dtype=bool), 1)


_CAPTURED: list[tuple[torch.Tensor, torch.Tensor, float]] = []


def _capture_scores(model, tokens) -> list[np.ndarray]:
    """Per layer, head-mean pre-softmax scores from the model's own attention call (float64)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.models.llama.modeling_llama import eager_attention_forward

    def attn(module, query, key, value, attention_mask, scaling=None, **kw):
        _CAPTURED.append((query.detach().double(), key.detach().double(), float(scaling)))
        return eager_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, **kw
        )

    AttentionInterface.register("causalpos_test_gram", attn)
    AttentionMaskInterface.register("causalpos_test_gram", eager_mask)
    m = copy.deepcopy(model)
    m.set_attn_implementation("causalpos_test_gram")
    _CAPTURED.clear()
    with torch.no_grad():
        m(input_ids=tokens)
    out = []
    for q, k, s in _CAPTURED:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        out.append(((q @ k.transpose(-1, -2)) * s).mean((0, 1)).numpy())
    return out


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["nope", "rope", "swa", "ntk", "qwen3"])
def test_recomputed_layer1_equals_hidden_states_1(which, tokens):
    model = _qwen3() if which == "qwen3" else _model(which)
    hs = _hidden(model, tokens)
    x1 = G.trace_layer1(model, hs[0]).x1
    scale = float(hs[1].abs().max())
    assert float((x1 - hs[1]).abs().max()) <= 1e-6 * scale  # float32 summation-order noise only
    ds = G.compute_gram_panels(model, tokens, batch_size=4)
    assert ds.attrs["x1_max_rel_error"] <= 1e-6


def test_recompute_check_catches_a_layer_it_does_not_know(tokens):
    model = _model("nope")
    model.model.layers[0].mlp.register_forward_hook(lambda mod, args, out: 2 * out)
    with pytest.raises(AssertionError, match="hidden_states\\[1\\]"):
        G.compute_gram_panels(model, tokens)


def test_swa_recompute_needs_the_window(tokens):
    """Without the sliding-window mask the recomputation would not match: the mask is exercised."""
    model = _model("swa")
    hs = _hidden(model, tokens)
    full = copy.deepcopy(model)
    full.config.sliding_window = None  # recompute as full causal attention, same weights
    err = float((G.trace_layer1(full, hs[0]).x1 - hs[1]).abs().max() / hs[1].abs().max())
    assert err > 1e-3


@torch.no_grad()
def test_panel_identities_nope(tokens):
    model = _model("nope")
    ds = G.compute_gram_panels(model, tokens, batch_size=3)
    hs = _hidden(model, tokens)
    layer0, layer1 = model.model.layers[0], model.model.layers[1]
    with torch.no_grad():
        y1 = layer0.input_layernorm(hs[0]).double()
        y2 = layer1.input_layernorm(hs[1]).double()
    # (a): diagonal = mean over samples of ‖LN(x_i)‖²; full lower triangle = mean Gram.
    a = ds["gram"].sel(panel="a").values
    np.testing.assert_allclose(np.diag(a), (y1**2).sum(-1).mean(0).numpy(), rtol=1e-6)
    gram_a = (y1 @ y1.transpose(1, 2)).mean(0).numpy()
    low = ~_lower_nan(SEQ)
    np.testing.assert_allclose(a[low], gram_a[low], rtol=1e-5, atol=1e-4)
    # (g): the Gram of the model's own hidden_states[1].
    h1 = hs[1].double()
    np.testing.assert_allclose(
        ds["gram"].sel(panel="g").values[low],
        (h1 @ h1.transpose(1, 2)).mean(0).numpy()[low],
        rtol=1e-5,
        atol=1e-4,
    )
    # (b), (i): direct per-head float64 computation without rotation, q kᵀ/√d, GQA head h → kv h // 2.
    for panel, y, layer in (("b", y1, layer0), ("i", y2, layer1)):
        wq = layer.self_attn.q_proj.weight.double().reshape(4, 8, 32)
        wk = layer.self_attn.k_proj.weight.double().reshape(2, 8, 32)
        direct = np.zeros((SEQ, SEQ))
        for h in range(4):
            q = y @ wq[h].T
            k = y @ wk[h // 2].T
            direct += ((q @ k.transpose(1, 2)) / math.sqrt(8)).mean(0).numpy() / 4
        got = ds["gram"].sel(panel=panel).values
        np.testing.assert_allclose(got[low], direct[low], rtol=1e-5, atol=1e-5)
    # Upper triangles blank everywhere, lower triangles finite.
    vals = ds["gram"].values
    assert np.isnan(vals[:, _lower_nan(SEQ)]).all() and np.isfinite(vals[:, low]).all()
    assert list(ds["panel"].values) == list("abcdefghi")
    assert ds.attrs["rope_identity"] is True and ds.attrs["bos"] is True


def test_score_panels_match_the_models_own_attention_call(tokens):
    """RoPE + GQA: panels (b), (i) equal the head-mean of the scores the model itself computes."""
    model = _model("rope")
    ds = G.compute_gram_panels(model, tokens)
    captured = _capture_scores(model, tokens)
    low = ~_lower_nan(SEQ)
    for panel, layer in (("b", 0), ("i", 1)):
        np.testing.assert_allclose(
            ds["gram"].sel(panel=panel).values[low], captured[layer][low], rtol=1e-5, atol=1e-5
        )
    assert ds.attrs["rope_identity"] is False


def test_fig8_scores_match_capture_and_panels(tokens):
    for which in ("rope", "swa", "qwen3"):
        model = _qwen3() if which == "qwen3" else _model(which)
        f = G.fig8_scores(model, tokens, batch_size=4)
        captured = _capture_scores(model, tokens)
        n_layers = len(model.model.layers)
        assert f["score"].shape == (n_layers, SEQ, SEQ) and f["score_head"].shape == (
            n_layers,
            4,
            SEQ,
            SEQ,
        )
        window = getattr(model.config, "sliding_window", None) if which == "swa" else None
        allowed = G.allowed_mask(SEQ, window).numpy()
        for li in range(n_layers):
            got = f["score"].values[li]
            np.testing.assert_allclose(got[allowed], captured[li][allowed], rtol=1e-5, atol=1e-5)
            assert np.isnan(got[~allowed]).all()
        # score_head is stored rounded to float32 (ulp ~1e-7 at the heads' magnitudes): atol 1e-6.
        np.testing.assert_allclose(
            f["score"].values, f["score_head"].values.mean(1), rtol=1e-6, atol=1e-6, equal_nan=True
        )
        # Streaming: the batch size changes only the float64 summation order.
        f1 = G.fig8_scores(model, tokens, batch_size=N)
        np.testing.assert_allclose(
            f["score"].values, f1["score"].values, rtol=1e-6, atol=1e-7, equal_nan=True
        )
        if which == "swa":
            assert (
                np.isnan(f["score"].values[0, 20, :13]).all()
                and np.isfinite(f["score"].values[0, 20, 13:21]).all()
            )
        else:
            p = G.compute_gram_panels(model, tokens)
            np.testing.assert_allclose(
                p["gram"].sel(panel="b").values, f["score"].values[0], rtol=1e-6, equal_nan=True
            )
            np.testing.assert_allclose(
                p["gram"].sel(panel="i").values,
                f["score"].values[1],
                rtol=1e-4,
                atol=1e-5,
                equal_nan=True,
            )


def test_nope_model_loaded_with_rope_is_refused(tokens):
    from transformers import AutoModelForCausalLM

    cfg = architecture.build_config("nope", vocab_size=VOCAB, shape=SHAPE, context=32)
    raw = AutoModelForCausalLM.from_config(cfg)  # ignores causalpos_rope: rotation still on
    with pytest.raises(ValueError, match="load_model"):
        G.compute_gram_panels(raw, tokens)
    assert G.rope_is_identity(architecture.apply_causalpos_attributes(raw))


def test_gram_store_merges_both(tokens):
    model = _model("nope")
    ds = G.gram_store(model, tokens, batch_size=5, attrs={"model": "tiny"})
    assert set(ds.data_vars) == {"gram", "nearby", "score", "score_head"}
    assert ds.attrs["model"] == "tiny" and ds.attrs["n_samples"] == N
    np.testing.assert_allclose(
        ds["gram"].sel(panel="b").values, ds["score"].values[0], rtol=1e-6, equal_nan=True
    )


def test_gram_stage_reads_a_configured_datasets_store_like_it_samples_one(tmp_path, tokenizer_dir):
    """Rule gram_panels with `train.gram.datasets`: the panels of the data store's sequences equal
    the panels of the same draw made inside the job (the held-out path)."""
    import xarray as xr

    from causalpos.models.load import build_model_dir
    from causalpos.stages.data import sample_sequences
    from causalpos.stages.gram import gram_panels

    model_dir = build_model_dir(
        "tiny",
        {"source": "random_init", "architecture": "llama", "tokenizer": str(tokenizer_dir)},
        tmp_path / "models" / "tiny",
    )
    spec = {"corpus": {"type": "kjv", "books": ["Ruth"]}, "seq_len": 12, "n_sequences": 4}
    store = tmp_path / "data.zarr"
    sample_sequences(model_dir, spec, store, seed=0)
    draw = dict(seq_len=12, n_sequences=4, seed=0)
    from_store = gram_panels(
        model_dir, tmp_path / "a.zarr", SequenceSample(**draw), data_store=store, batch_size=2
    )
    sampled = gram_panels(
        model_dir, tmp_path / "b.zarr", SequenceSample(spec["corpus"], **draw), batch_size=2
    )
    assert np.array_equal(from_store["tokens"].values, sampled["tokens"].values)
    xr.testing.assert_identical(from_store.drop_attrs(), sampled.drop_attrs())
    assert from_store.attrs["corpus"] == sampled.attrs["corpus"]


def test_nearby_index_control_planted_and_independent():
    """Fig. 3 (f)/(i)'s index: 1 on rows rising linearly toward the diagonal, ≈ 0 on maps that do
    not depend on the key (negative control), equal to an independent per-row np.corrcoef, and
    blind to the sink key 0, the diagonal and masked cells."""
    T = 12
    i, j = np.indices((T, T))
    rising = np.where(j <= i, 2.0 * j + 5.0, np.nan)
    rising[:, 0] = 100.0  # the sink column: left out
    rising[np.arange(T), np.arange(T)] = -50.0  # the diagonal: left out
    assert G.nearby_index(rising) == pytest.approx(1.0)
    assert G.nearby_index(-rising) == pytest.approx(-1.0)
    rng = np.random.default_rng(0)
    flat = rng.normal(size=(400, T, T))  # no dependence on j
    per = G.nearby_index(flat)
    assert per.shape == (400,) and abs(per.mean()) < 3 * per.std() / np.sqrt(400)
    m = rng.normal(size=(T, T)) + 0.3 * j
    m[np.triu_indices(T, 1)] = -np.inf  # masked cells as the score panels hold them
    want = np.mean([np.corrcoef(np.arange(1, r), m[r, 1:r])[0, 1] for r in range(3, T)])
    assert G.nearby_index(m) == pytest.approx(want, rel=1e-12)


def test_gram_store_keeps_the_nearby_index_per_sample(tokens):
    model = _model("nope")
    ds = G.compute_gram_panels(model, tokens, batch_size=3)
    assert ds["nearby"].dims == ("nearby_panel", "sample") and ds.sizes["sample"] == N
    # panel (i) per sample equals the index of that sample's own head-mean layer-2 scores
    tr = G.trace_layer1(model, _hidden(model, tokens[:1])[0])
    want = G.nearby_index(tr.scores2.double().mean(1).numpy())[0]
    assert float(ds["nearby"].sel(nearby_panel="i")[0]) == pytest.approx(want, rel=1e-9)
    df = nearby_table({"m": ds}, n_boot=200)
    row = df[df.panel == "i"].iloc[0]
    assert row["nearby"] == pytest.approx(float(ds["nearby"].sel(nearby_panel="i").mean()))
    assert row["nearby_lo"] <= row["nearby"] <= row["nearby_hi"] and row["rope_identity"]
    assert nearby_table({"old": ds.drop_vars("nearby")}).empty


def test_nearby_table_rows_do_not_depend_on_the_other_models():
    import xarray as xr

    rng = np.random.default_rng(1)
    ds = {
        m: xr.Dataset(
            {"nearby": (("nearby_panel", "sample"), rng.normal(0.2, 0.1, (2, 30)))},
            coords={"nearby_panel": ["f", "i"]},
        )
        for m in ("a", "b")
    }
    both = nearby_table(ds, n_boot=300).set_index(["model", "panel"])
    alone = nearby_table({"b": ds["b"]}, n_boot=300).set_index(["model", "panel"])
    assert both.loc[("b", "i"), "nearby_lo"] == alone.loc[("b", "i"), "nearby_lo"]
    x = ds["b"]["nearby"].sel(nearby_panel="i").values
    assert alone.loc[("b", "i"), "nearby"] == pytest.approx(x.mean())
    assert alone.loc[("b", "i"), "nearby_lo"] < x.mean() < alone.loc[("b", "i"), "nearby_hi"]
