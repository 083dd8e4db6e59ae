"""causalpos.lengthgen: per-position NLL and its bootstrap CI, checked against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from causalpos.training import architecture, settings
from causalpos.training import lengthgen as L

SHAPE = settings.ModelShape(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64)
VOCAB = 64


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(3, VOCAB, (12, 40), generator=g)
    x[:, 0] = 0
    return x


def _model(variant: str):
    return architecture.build_model(
        architecture.build_config(variant, vocab_size=VOCAB, shape=SHAPE, context=20), seed=0
    ).eval()


def test_per_token_nll_matches_transformers_loss_and_a_direct_log_softmax(tokens):
    model = _model("rope")
    nll = L.per_token_nll(model, tokens, batch_size=5)
    assert nll.shape == (12, 39) and nll.dtype == np.float32
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.double()
        hf_loss = float(model(input_ids=tokens, labels=tokens).loss)
    direct = -torch.log_softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    np.testing.assert_allclose(nll, direct.numpy(), rtol=1e-5, atol=1e-5)
    assert float(nll.astype(np.float64).mean()) == pytest.approx(hf_loss, rel=1e-6)
    # Column t-1 is the prediction of token t from tokens < t: prefix-only dependence.
    short = L.per_token_nll(model, tokens[:, :10])
    np.testing.assert_allclose(short, nll[:, :9], rtol=1e-5, atol=1e-6)


def test_loss_by_position_and_length_generalization(tokens):
    models = {"rope": _model("rope"), "nope": _model("nope"), "swa": _model("swa")}
    ds = L.measure_length_generalization(
        models, tokens, train_context=20, n_bootstrap=2000, seed=3, batch_size=7
    )
    assert list(ds["variant"].values) == ["rope", "nope", "swa"]
    assert ds["nll"].shape == (3, 12, 39) and ds["position"].values.tolist() == list(range(1, 40))
    for name, model in models.items():
        one = L.loss_by_position(model, tokens, train_context=20, n_bootstrap=2000, seed=3)
        np.testing.assert_array_equal(
            ds["nll_mean"].sel(variant=name).values, one["nll_mean"].values
        )
        np.testing.assert_array_equal(ds["nll_lo"].sel(variant=name).values, one["nll_lo"].values)
        nll = one["nll"].values.astype(np.float64)
        assert one.attrs["mean_nll_within"] == pytest.approx(
            nll[:, :19].mean(0).mean()
        )  # targets 1..19
        assert one.attrs["mean_nll_beyond"] == pytest.approx(
            nll[:, 19:].mean(0).mean()
        )  # targets 20..39
        assert float(ds["mean_nll_beyond"].sel(variant=name)) == one.attrs["mean_nll_beyond"]
        excess = nll[:, 19:].mean(1) - nll[:, 9:19].mean(
            1
        )  # targets 20..39 minus 10..19, per sequence
        np.testing.assert_allclose(one["excess"].values, excess, rtol=1e-12)
        assert float(one["excess_mean"]) == pytest.approx(excess.mean())
        assert float(one["excess_lo"]) < excess.mean() < float(one["excess_hi"])
        assert float(ds["excess_mean"].sel(variant=name)) == float(one["excess_mean"])
        assert (one["nll_lo"] <= one["nll_mean"]).all() and (one["nll_mean"] <= one["nll_hi"]).all()
        # The CI is the percentile bootstrap of the per-sequence NLLs (independent implementation).
        rng = np.random.default_rng(3)
        idx = [rng.choice(12, 12) for _ in range(2000)]
        boot = np.stack([nll[i].mean(0) for i in idx])
        half = (one["nll_hi"].values - one["nll_lo"].values) / 2
        np.testing.assert_allclose(
            half, (np.quantile(boot, 0.975, 0) - np.quantile(boot, 0.025, 0)) / 2, rtol=0.2
        )  # other draws (B = 2000): equal up to Monte-Carlo error
    # Variants really differ (same initial weights, different position handling).
    assert not np.array_equal(
        ds["nll_mean"].sel(variant="rope").values, ds["nll_mean"].sel(variant="nope").values
    )
    assert int(ds["train_context"].sel(variant="swa")) == 20
