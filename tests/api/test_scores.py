"""causalpos.capture (causalpos.api.scores) on tiny models of every supported architecture: the
per-prompt maps reproduce eager attention, the mean map is their mean, a layer subset and a
planted variant are what they say, and what cannot run is refused before the model runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from causalpos.api.scores import capture, checked_layers, token_dataset, variant_specs
from causalpos.capture.settings import ExtractSettings
from tests.conftest import ARCHS, SEQ_LEN, tiny_pair

N_SEQ = 5
SETTINGS = ExtractSettings(batch_size=2, n_groups=2)


def _tokens(model, n: int = N_SEQ, seed: int = 1) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, model.config.vocab_size, (n, SEQ_LEN), generator=g).numpy()


def _eager_attentions(ref, tokens: np.ndarray, causal: bool = True):
    ref.config.is_causal = causal
    try:
        with torch.inference_mode():
            ids = torch.from_numpy(tokens)
            out = ref(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
    finally:
        ref.config.is_causal = True
    return [a.numpy() for a in out.attentions]


@pytest.mark.parametrize("arch", ARCHS)
def test_per_prompt_maps_reproduce_eager_attention_and_average_to_the_mean_map(arch):
    """Every prompt's captured maps, softmaxed, are the eager reference's attention weights
    (NaN exactly where eager gives 0: causal mask, sliding windows), in the causal and the
    bidirectional pass; ``score_mean`` is their mean over prompts (float32 of the float64 mean)
    and ``score_m2`` their sum of squared deviations."""
    from causalpos.models.layer_kinds import config_kinds

    model, ref = tiny_pair(arch)
    tokens = _tokens(model)
    ds = capture(model, tokens, ["causal", "bidirectional"], per_sequence=True, extract=SETTINGS)
    n_layers = model.config.num_hidden_layers
    assert ds["score_maps"].dims == ("variant", "sequence", "layer", "head", "query", "key")
    assert ds["score_maps"].shape[:3] == (2, N_SEQ, n_layers)
    assert ds["layer_kind"].values.tolist() == config_kinds(model.config)
    for variant, causal in (("causal", True), ("bidirectional", False)):
        maps = ds["score_maps"].sel(variant=variant).values
        assert maps.dtype == np.float32
        for layer, att in enumerate(_eager_attentions(ref, tokens, causal)):
            s = maps[:, layer]
            assert np.array_equal(np.isnan(s), att == 0), (variant, layer)
            p = torch.softmax(torch.from_numpy(s).nan_to_num(nan=float("-inf")), dim=-1)
            np.testing.assert_allclose(p.numpy(), att, rtol=1e-5, atol=1e-6)
        x = maps.astype(np.float64)
        mean = x.mean(axis=0)
        np.testing.assert_allclose(ds["score_mean"].sel(variant=variant).values, mean, rtol=1e-6)
        np.testing.assert_allclose(
            ds["score_m2"].sel(variant=variant).values,
            ((x - mean) ** 2).sum(axis=0),
            rtol=1e-4,
            atol=1e-9,
        )
        assert int(ds["n_sequences"].sel(variant=variant)) == N_SEQ


def test_a_layer_subset_is_those_layers_of_the_whole_capture():
    model, _ = tiny_pair("gemma3")  # layer 0 sliding, layer 1 global
    tokens = _tokens(model)
    whole = capture(model, tokens, "causal", per_sequence=True, extract=SETTINGS)
    last = capture(model, tokens, "causal", layers=[-1], per_sequence=True, extract=SETTINGS)
    assert last["layer"].values.tolist() == [1]
    assert last["layer_kind"].values.tolist() == whole["layer_kind"].values[1:].tolist()
    for name in ("score_mean", "score_m2", "score_maps"):
        xr.testing.assert_identical(last[name], whole[name].sel(layer=[1]))
    assert whole["layer_kind"].values.tolist() == ["sliding5", "global"]


def test_a_planted_variant_adds_its_term_to_the_planted_layer():
    """A variant given with its plant settings (a mapping): the planted layer's mean map is the
    unplanted run's plus the known query term b_i = scale · log(1 + i) on every visible key."""
    from causalpos.models.variants import plant_term

    model, _ = tiny_pair("llama")
    tokens = _tokens(model)
    plant = {"layer": -1, "scale": 0.5}
    ds = capture(
        model,
        tokens,
        {
            "identity_rope+bidirectional": {},
            "identity_rope+plant_query+bidirectional": {"plant": plant},
        },  # fmt: skip
        extract=SETTINGS,
    )
    base = ds["score_mean"].sel(variant="identity_rope+bidirectional").values.astype(np.float64)
    planted = ds["score_mean"].sel(variant="identity_rope+plant_query+bidirectional").values
    b = plant_term(SEQ_LEN, 0.5)
    np.testing.assert_allclose(planted[-1], base[-1] + b[None, :, None], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(planted[0], base[0].astype(np.float32))  # other layers alone


def test_tokens_arrays_tensors_and_datasets_are_one_token_dataset():
    arr = np.array([[1, 5, 6], [1, 7, 8]])
    ds = token_dataset(torch.from_numpy(arr))
    assert ds["tokens"].dims == ("sequence", "position") and ds["tokens"].dtype == np.int64
    assert ds.attrs == {"bos": True, "bos_id": 1}  # a fixed token at position 0
    assert token_dataset([[2, 5], [3, 5]]).attrs == {"bos": False, "bos_id": -1}
    assert token_dataset(ds) is ds


@pytest.mark.parametrize(
    "tokens, match",
    [
        (np.array([1, 2, 3]), r"\(sequence, position\) array of token ids, got shape \(3,\)"),
        (np.zeros((2, 3)), "dtype float64"),
        (xr.Dataset({"ids": ("x", [1])}), "must hold `tokens` \\(sequence, position\\)"),
    ],
)
def test_tokens_that_are_no_prompts_are_refused(tokens, match):
    with pytest.raises(ValueError, match=match):
        token_dataset(tokens)


def test_variants_and_layers_that_cannot_run_are_refused_naming_the_fix():
    assert variant_specs("causal", ["moments"]) == {"causal": {"reducers": ["moments"]}}
    assert variant_specs({"ring": None}, ["sink"]) == {"ring": {"reducers": ["sink"]}}
    with pytest.raises(ValueError, match="give each variant once"):
        variant_specs(["causal", "causal"], ["moments"])
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['scale'\]; .* \['plant', 'stream'\]"):
        variant_specs({"causal": {"scale": 1}}, ["moments"])
    assert checked_layers([-1, 0, 1], 3) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"3 is not a layer of the model; give 0..2"):
        checked_layers([3], 3)
    model, _ = tiny_pair("llama")
    with pytest.raises(ValueError, match=r"'nothing' is not a variant; compose atoms of"):
        capture(model, _tokens(model), "causal+nothing", extract=SETTINGS)


def test_a_model_in_training_mode_is_refused_before_it_runs():
    model, _ = tiny_pair("llama")
    model.train()
    with pytest.raises(ValueError, match=r"training mode .* call model.eval\(\)"):
        capture(model, _tokens(model), extract=SETTINGS)
