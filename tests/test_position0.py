"""Tests of causalpos.position0 on a random-init tiny Llama and synthetic scores."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from causalpos.capture import position0 as C_position0
from causalpos.paper2 import position0 as P_position0
from causalpos.paper2 import reducers as P_reducers

CFG = LlamaConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
)


def tiny_llama(is_causal: bool = True, pad_token_id: int | None = None) -> LlamaForCausalLM:
    cfg = copy.deepcopy(CFG)  # models built from one config object share attention settings
    cfg.is_causal = is_causal
    cfg.pad_token_id = pad_token_id
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def prompts(n: int = 8, T: int = 12, fixed_bos: bool = True, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 64, (n, T), generator=g)
    if fixed_bos:
        ids[:, 0] = 1
    return ids


def test_position0_std_exactly_zero_with_fixed_bos_causal():
    tr = P_position0.trajectory(C_position0.position0_states(tiny_llama(), prompts()))
    assert tr.sizes["layer"] == 4
    assert np.all(tr["std"].values == 0.0) and np.all(tr["max_abs_dev"].values == 0.0)  # bitwise
    assert np.all(tr["mean_norm"].values > 0)


def test_position0_std_positive_bidirectional_or_varying_token0():
    ids = prompts()
    bi = P_position0.trajectory(C_position0.position0_states(tiny_llama(is_causal=False), ids))
    assert bi["std"].values[0] == 0.0  # same embedding of the same token 0
    assert np.all(bi["std"].values[1:] > 1e-4)  # later positions flow into position 0
    var = P_position0.trajectory(
        C_position0.position0_states(tiny_llama(), prompts(fixed_bos=False))
    )
    assert np.all(var["std"].values > 1e-3)


def test_position0_states_match_hidden_states_and_last_is_pre_norm():
    model = tiny_llama()
    ids = prompts(n=4)
    st = C_position0.position0_states(model, ids)
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    for layer in range(3):
        np.testing.assert_array_equal(st[:, layer], out.hidden_states[layer][:, 0].double().numpy())
    normed = model.model.norm(torch.tensor(st[:, 3], dtype=torch.float32))
    np.testing.assert_allclose(
        normed.detach().numpy(), out.hidden_states[3][:, 0].numpy(), rtol=1e-5, atol=1e-6
    )
    assert not np.allclose(st[:, 3], out.hidden_states[3][:, 0].numpy())


def test_padded_inputs_are_refused():
    model = tiny_llama()
    ids = prompts(n=3)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    with pytest.raises(ValueError, match="padding"):
        C_position0.position0_states(model, ids, attention_mask=mask)
    left = ids.clone()
    left[2, 0] = 0
    with pytest.raises(ValueError, match="left padding"):
        C_position0.position0_states(tiny_llama(pad_token_id=0), left)


def test_sink_reducer_closed_form_and_threshold():
    T = 10
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    causal = j <= i
    uniform = torch.where(causal, 0.0, torch.nan)  # head 0: uniform attention
    sink = torch.where(causal, torch.where(j == 0, 30.0, 0.0), torch.nan)  # head 1: all on key 0
    scores = torch.stack([uniform, sink])[None].repeat(2, 1, 1, 1).float()
    red = P_reducers.SinkReducer()
    red.update(0, scores, np.array([0, 1]))
    ds = red.result()
    harmonic = np.mean(1.0 / (np.arange(1, T) + 1.0))  # mean over i >= 1 of 1/(i+1)
    np.testing.assert_allclose(ds["sink_attention"].values[:, 0, 0], harmonic, rtol=1e-12)
    expect_sink = np.mean([1.0 / (1.0 + i_ * np.exp(-30.0)) for i_ in range(1, T)])
    np.testing.assert_allclose(ds["sink_attention"].values[:, 0, 1], expect_sink, rtol=1e-12)
    np.testing.assert_array_equal(
        P_position0.sink_heads(ds["sink_attention"], 0.8).values, [[False, True]]
    )
    np.testing.assert_array_equal(
        P_position0.sink_heads(ds["sink_attention"], 0.3).values, [[False, True]]
    )
    assert harmonic < 0.3
    merged = P_reducers.SinkReducer.merge([ds.isel(sequence=[1]), ds.isel(sequence=[0])])
    np.testing.assert_array_equal(merged["sink_attention"].values, ds["sink_attention"].values)


def test_probe_at_chance_for_constant_features_and_perfect_when_separable():
    labels = np.repeat([0, 1, 2], 10)
    const = np.ones((30, 5))
    r = P_position0.probe_cv(const, labels, n_folds=5, n_perm=30, seed=0)
    # Stratified folds leave 8/8/8 training labels; the constant probe predicts the first tied class.
    assert r["accuracy"] == pytest.approx(1 / 3) and r["chance"] == pytest.approx(1 / 3)
    assert r["p_value"] == 1.0
    rng = np.random.default_rng(0)
    # Class means in general position (collinear means defeat one-vs-rest least squares for the middle class).
    sep = rng.normal(size=(30, 4)) * 0.1 + 2.0 * np.eye(4)[labels]
    r = P_position0.probe_cv(sep, labels, n_folds=5, n_perm=30, seed=0)
    assert r["accuracy"] == 1.0
    assert r["p_value"] == pytest.approx(1 / 31)


def test_probe_on_fixed_bos_states_is_at_chance():
    states = C_position0.position0_states(tiny_llama(), prompts(n=20))
    pr = P_position0.probe_by_layer(states, np.repeat([0, 1], 10), n_folds=5, n_perm=0)
    np.testing.assert_allclose(pr["accuracy"].values, 0.5)


def test_position0_values_match_v_proj_during_forward():
    model = tiny_llama()
    ids = prompts(n=3)
    seen = []
    hooks = [
        lay.self_attn.v_proj.register_forward_hook(lambda m, i, o: seen.append(o[:, 0].detach()))
        for lay in model.model.layers
    ]
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    vals = C_position0.position0_values(model, C_position0.position0_states(model, ids))
    assert vals.shape == (3, 3, 2, 8)
    for layer in range(3):
        np.testing.assert_allclose(
            vals[:, layer].reshape(3, -1), seen[layer].double().numpy(), rtol=1e-6, atol=1e-7
        )


def test_position0_states_from_replaced_bos_embeddings():
    # The BOS-replacement inputs of the extraction (capture.bos_replaced_embeddings) run through
    # the trajectory: zeros at position 0 stay exactly zero after the embedding, and a shared
    # replacement keeps the causal trajectory exactly constant across prompts.
    from causalpos.models.forward import bos_replaced_embeddings

    model = tiny_llama()
    ids = prompts(n=4)
    emb = bos_replaced_embeddings(model, ids, np.arange(4), "zeros", per_prompt=False, seed=0)
    st = C_position0.position0_states(model, inputs_embeds=emb)
    assert np.all(st[:, 0] == 0.0)
    assert np.all(P_position0.trajectory(st)["std"].values == 0.0)
    per = bos_replaced_embeddings(model, ids, np.arange(4), "gaussian", per_prompt=True, seed=0)
    assert np.all(
        P_position0.trajectory(C_position0.position0_states(model, inputs_embeds=per))["std"].values
        > 0
    )


def test_bos_effect_ratio_and_ci():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 1.5, size=40)
    est, lo, hi = P_position0.bos_effect(0.6 * base, base, n_boot=300)
    assert (est, lo, hi) == pytest.approx((0.4, 0.4, 0.4), abs=1e-12)
    est, lo, hi = P_position0.bos_effect(1.28 * base + rng.normal(0, 0.05, 40), base, n_boot=300)
    assert est == pytest.approx(1 - (1.28 * base.mean() + 0) / base.mean(), abs=0.03)
    assert lo < est < hi < 0


# --- position 0 read inside extraction (Position0States) -------------------------------------


def _extract(model, ids, variant, reducers, batch_size, seq_ids=None):
    from causalpos.capture.hook import capture_scores

    return capture_scores(
        model,
        ids.numpy(),
        variant=variant,
        batch_size=batch_size,
        reducers=reducers,
        seed=0,
        progress=False,
        seq_ids=seq_ids,
    )


@pytest.mark.parametrize("variant", ["causal", "bidirectional"])
def test_extraction_reads_the_same_position0_states_as_a_plain_forward(variant):
    # Next to score capture (sdpa after a float32 QK^T) the blocks see the same numbers as in a
    # plain forward pass with the same batches: states bitwise equal, value vectors those of
    # v_proj(input_layernorm(.)) of the states.
    model = tiny_llama()
    ids = prompts(n=7)
    ds = _extract(
        model,
        ids,
        variant,
        [P_reducers.SinkReducer(), C_position0.Position0States(values=True)],
        batch_size=3,
    )
    expect = C_position0.condition_states(model, ids, variant, batch_size=3)
    assert ds["p0_state"].dtype == np.float32 and ds["p0_state"].dims == (
        "sequence",
        "p0_layer",
        "hidden",
    )
    np.testing.assert_array_equal(ds["p0_state"].values.astype(np.float64), expect)
    np.testing.assert_allclose(
        ds["p0_value"].values, C_position0.position0_values(model, expect), rtol=1e-6, atol=1e-7
    )
    assert ds["sink_attention"].sizes["sequence"] == 7  # the score reducers ran too
    if variant == "causal":
        assert np.all(P_position0.trajectory(expect)["std"].values == 0.0)
    else:
        assert np.all(P_position0.trajectory(expect)["std"].values[1:] > 1e-4)


def test_a_variant_of_position0_only_runs_no_score_capture():
    # bos_replace_mean without score reducers: the model's own attention, the replacement of the
    # extraction, the states of condition_states; no scaling recorded (no scores were read).
    model = tiny_llama()
    ids = prompts(n=6)
    seq_ids = np.arange(10, 16)
    ds = _extract(
        model, ids, "bos_replace_mean", [C_position0.Position0States()], 6, seq_ids=seq_ids
    )
    expect = C_position0.condition_states(model, ids, "bos_replace_mean", seq_ids=seq_ids)
    np.testing.assert_array_equal(ds["p0_state"].values.astype(np.float64), expect)
    assert "p0_value" not in ds and ds.attrs["scaling"] == "none"
    assert model.config._attn_implementation != "causalpos_capture"
    np.testing.assert_array_equal(ds["sequence"].values, seq_ids)


def test_position0_shards_merge_into_the_single_pass():
    model = tiny_llama()
    ids = prompts(n=8)

    def run(rows):
        return _extract(
            model,
            ids[rows],
            "causal",
            [C_position0.Position0States(values=True)],
            batch_size=4,
            seq_ids=np.arange(8)[rows],
        )

    whole = run(slice(0, 8))
    merged = C_position0.Position0States.merge([run(slice(4, 8)), run(slice(0, 4))])
    for k in ("p0_state", "p0_value"):
        np.testing.assert_array_equal(merged[k].values, whole[k].values)
    np.testing.assert_array_equal(merged["sequence"].values, np.arange(8))
    with pytest.raises(ValueError, match="share sequence ids"):
        C_position0.Position0States.merge([run(slice(0, 4)), run(slice(0, 4))])


def test_position0_reader_refuses_a_model_without_decoder_blocks():
    with pytest.raises(ValueError, match="decoder blocks"):
        with C_position0.Position0States().attached(torch.nn.Linear(2, 2)):
            pass


def test_position0_stage_from_stores_matches_the_library_and_refuses_stores_without_states(
    tmp_path,
):
    # The analysis job reads stored states: its trajectory equals the library's on the same
    # states, its probe is the library's probe, and a store extracted without the reader is
    # refused with the fix.
    from causalpos.io.store import write_dataset
    from causalpos.stages.position0 import position0_pair

    model = tiny_llama()
    ids = prompts(n=10, fixed_bos=False)
    labels = np.repeat(["a", "b"], 5)
    data = xr_data(ids, labels)
    write_dataset(data, tmp_path / "data.zarr")
    stores = {}
    for cond in ("causal", "bidirectional"):
        ds = _extract(
            model,
            ids,
            cond,
            [P_reducers.SinkReducer(), C_position0.Position0States(values=cond == "causal")],
            batch_size=5,
        )
        stores[cond] = write_dataset(ds, tmp_path / f"{cond}.zarr")
    out = position0_pair(
        stores,
        tmp_path / "data.zarr",
        tmp_path / "p0.zarr",
        sink_store=stores["causal"],
        tau=0.0,
        n_folds=2,
        n_perm=5,
    )
    for cond in stores:
        states = C_position0.condition_states(model, ids, cond, batch_size=5)
        np.testing.assert_array_equal(
            out["std"].sel(condition=cond).values, P_position0.trajectory(states)["std"].values
        )
    causal = C_position0.condition_states(model, ids, "causal", batch_size=5)
    pr = P_position0.probe_by_layer(causal, labels, n_folds=2, n_perm=5, seed=0)
    np.testing.assert_array_equal(
        out["probe_accuracy"].sel(condition="causal").values, pr["accuracy"].values
    )
    assert np.all(np.isnan(out["probe_accuracy"].sel(condition="bidirectional").values))
    assert out.attrs["token0_fixed"] == 0 and out.attrs["n_sink_heads"] == 3 * 4  # tau 0: all
    assert 0.0 <= out.attrs["sink_probe_accuracy"] <= 1.0
    bare = _extract(model, ids, "causal", [P_reducers.SinkReducer()], batch_size=5)
    write_dataset(bare, tmp_path / "bare.zarr")
    with pytest.raises(ValueError, match="no position-0 states"):
        position0_pair(
            {"causal": tmp_path / "bare.zarr"}, tmp_path / "data.zarr", tmp_path / "x.zarr"
        )


def xr_data(ids: torch.Tensor, labels: np.ndarray):
    import xarray as xr

    n, t = ids.shape
    return xr.Dataset(
        {"tokens": (("sequence", "position"), ids.numpy()), "source": ("sequence", labels)},
        coords={"sequence": np.arange(n), "position": np.arange(t)},
    )
