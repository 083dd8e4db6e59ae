"""Extraction's position-0 reader (capture.position0): the states and value vectors a plain
forward pass gives, BOS replacement, shards, refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tests.position0_oracle as O
from causalpos.capture import position0 as C_position0
from causalpos.paper2 import position0 as P_position0
from causalpos.paper2.extraction import reducers as P_reducers
from tests.position0_models import _extract, prompts, tiny_llama


def test_position0_states_match_hidden_states_and_last_is_pre_norm():
    model = tiny_llama()
    ids = prompts(n=4)
    st = O.position0_states(model, ids)
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
        O.position0_states(model, ids, attention_mask=mask)
    left = ids.clone()
    left[2, 0] = 0
    with pytest.raises(ValueError, match="left padding"):
        O.position0_states(tiny_llama(pad_token_id=0), left)


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
    vals = O.position0_values(model, O.position0_states(model, ids))
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
    st = O.position0_states(model, inputs_embeds=emb)
    assert np.all(st[:, 0] == 0.0)
    assert np.all(P_position0.trajectory(st)["std"].values == 0.0)
    per = bos_replaced_embeddings(model, ids, np.arange(4), "gaussian", per_prompt=True, seed=0)
    assert np.all(
        P_position0.trajectory(O.position0_states(model, inputs_embeds=per))["std"].values > 0
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
    expect = O.condition_states(model, ids, variant, batch_size=3)
    assert ds["p0_state"].dtype == np.float32 and ds["p0_state"].dims == (
        "sequence",
        "p0_layer",
        "hidden",
    )
    np.testing.assert_array_equal(ds["p0_state"].values.astype(np.float64), expect)
    np.testing.assert_allclose(
        ds["p0_value"].values, O.position0_values(model, expect), rtol=1e-6, atol=1e-7
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
    expect = O.condition_states(model, ids, "bos_replace_mean", seq_ids=seq_ids)
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
