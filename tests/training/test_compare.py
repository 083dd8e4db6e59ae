"""causalpos.training.compare and .twin: the untrained twin, the paired index bootstrap, the comparison tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from causalpos.data import kjv_documents
from causalpos.paper1 import compare as C_compare
from causalpos.paper1.diagonal import _index_cells, index_ci, normalize
from causalpos.training import batches, corpus, loop, loss, tokenizer
from causalpos.training import compare as C_tables
from causalpos.training import twin as C_twin
from causalpos.training.settings import RunOptions, TrainSettings


def _groups(signal: np.ndarray, n_groups: int, noise: float, rng) -> np.ndarray:
    """(group, layer, n, n) maps: signal + Gaussian noise, NaN above the diagonal (causal)."""
    g = signal[None] + noise * rng.standard_normal((n_groups, *signal.shape))
    n = signal.shape[-1]
    g[..., ~np.tril(np.ones((n, n), bool))] = np.nan
    return g


def _signal(n_layers: int, n: int) -> np.ndarray:
    q = np.arange(n)[:, None]
    k = np.arange(n)[None, :]
    base = np.log1p(q) * 0.3 - 0.02 * k  # a position-dependent (non-relative) pattern
    return np.stack([base * (l + 1) for l in range(n_layers)])


def test_per_model_intervals_equal_index_ci():
    rng = np.random.default_rng(1)
    s = _signal(3, 12)
    a, b = _groups(s, 10, 0.4, rng), _groups(0.5 * s, 10, 0.4, rng)
    p = C_compare.paired_index_bootstrap(a, b, level=0.9, n_boot=500, seed=7)
    for maps, est, lo, hi, floor in (
        (a, p.estimate_a, p.lo_a, p.hi_a, p.floor_a),
        (b, p.estimate_b, p.lo_b, p.hi_b, p.floor_b),
    ):
        ci = index_ci(maps, level=0.9, n_boot=500, seed=7)
        np.testing.assert_allclose(est, ci.debiased, rtol=1e-12)
        np.testing.assert_allclose(floor, ci.noise_floor, rtol=1e-12)
        np.testing.assert_allclose(lo, ci.lo, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(hi, ci.hi, rtol=1e-9, atol=1e-12)


def test_model_against_itself_has_zero_difference_and_unit_ratio():
    rng = np.random.default_rng(2)
    a = _groups(_signal(2, 10), 8, 0.2, rng)
    p = C_compare.paired_index_bootstrap(a, a.copy(), n_boot=300)
    d, lo, hi = p.difference()
    assert np.all(d == 0) and np.all(lo == 0) and np.all(hi == 0)
    r, rlo, rhi = p.ratio()
    np.testing.assert_allclose([r, rlo, rhi], 1.0, rtol=1e-12)
    m = p.layer_mean()
    assert m["difference"] == (0.0, 0.0, 0.0)


def test_paired_contrasts_cover_the_truth():
    """Normalization is linear, so I(2 s) = 2 I(s): the ratio is 2 and the difference I(s)."""
    n_layers, n = 2, 16
    rng = np.random.default_rng(3)
    s = _signal(n_layers, n)
    sel = _index_cells(n)
    true_b = np.array(
        [np.sqrt(np.mean(normalize(s[l]).ravel()[sel] ** 2)) for l in range(n_layers)]
    )
    hits_ratio = hits_diff = detected = 0
    repeats = 40
    for r in range(repeats):
        # prompt content common to both models; noise floor ~0.08, below the smaller true index 0.10
        shared = 0.2 * rng.standard_normal((12, n_layers, n, n))
        a = _groups(2 * s, 12, 0.2, rng) + shared
        b = _groups(s, 12, 0.2, rng) + shared
        p = C_compare.paired_index_bootstrap(a, b, n_boot=400, seed=r)
        _, lo, hi = p.ratio()
        hits_ratio += np.all((lo <= 2.0) & (2.0 <= hi))
        _, lo, hi = p.difference()
        hits_diff += np.all((lo <= true_b) & (true_b <= hi))
        detected += np.all(lo > 0)
    # two layers jointly at nominal 95 % each: expect >= ~90 %; 30/40 leaves room for MC noise only
    assert hits_ratio >= 30 and hits_diff >= 30
    assert detected >= 30  # the amplification is seen in (almost) every repeat


def test_paired_bootstrap_rejects_mismatched_maps():
    rng = np.random.default_rng(0)
    a = _groups(_signal(2, 8), 6, 0.1, rng)
    with pytest.raises(ValueError, match="same groups|one shape"):
        C_compare.paired_index_bootstrap(a, a[:5])
    with pytest.raises(ValueError, match="at least 2 groups"):
        C_compare.paired_index_bootstrap(a[:1], a[:1])


# ---------------------------------------------------------------------------------------------
# The untrained twin


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    docs = kjv_documents("chapter", books=["Ruth", "Jonah", "Joel"])
    train_texts, heldout_texts = corpus.split_documents(docs, ["Jonah"])
    root = tmp_path_factory.mktemp("twin")
    tokenizer.fit_tokenizer(train_texts, 320, root / "tok", seed=0)
    ids = tokenizer.encode_documents(root / "tok", train_texts)
    held = tokenizer.encode_documents(root / "tok", heldout_texts)
    out = {}
    for variant in ("rope", "nope"):
        settings = TrainSettings.from_params(
            dict(
                variant=variant,
                hidden=32,
                layers=2,
                heads=4,
                kv_heads=2,
                intermediate=64,
                context=32,
                batch=8,
                lr=1e-2,
                warmup=2,
                steps=10,
                eval_every=5,
                n_eval=16,
                seed=3,
            )
        )
        s = loop.run_training(
            settings,
            tokenizer_dir=root / "tok",
            out_dir=root / f"trained-{variant}",
            train_ids=ids,
            heldout_ids=held,
            run=RunOptions(checkpoint_every=10),
        )
        out[variant] = (root / f"trained-{variant}", s)
    return root, held, out


@pytest.mark.parametrize("variant", ["rope", "nope"])
def test_init_twin_holds_the_weights_training_started_from(trained, variant):
    from causalpos.models.load import load_model, read_source

    root, held, models = trained
    path, summary = models[variant]
    twin = C_twin.prepare_init_twin(path, root / f"trained-{variant}-init")
    model, tok = load_model(twin)
    eval_tokens = batches.heldout_windows(held, n=16, length=32, bos_id=0)
    # the held-out loss training measured at step 0 is the twin's, bit for bit
    assert loss.evaluate(model, eval_tokens, batch=8) == summary["initial_heldout_loss"]
    trained_model, _ = load_model(path)
    assert loss.evaluate(trained_model, eval_tokens, batch=8) == summary["final_heldout_loss"]
    assert summary["final_heldout_loss"] < summary["initial_heldout_loss"]
    src = read_source(twin)
    assert src["source"] == "init_twin" and src["of"] == f"trained-{variant}" and src["seed"] == 3
    assert getattr(model.config, "causalpos_rope", "rope") == (
        "none" if variant == "nope" else "rope"
    )
    assert tok.get_vocab() == load_model(path)[1].get_vocab()


def test_init_twins_of_one_seed_share_weights(trained):
    from safetensors.torch import load_file

    root, _, models = trained
    w = {
        v: load_file(C_twin.prepare_init_twin(p, root / f"twin2-{v}") / "model.safetensors")
        for v, (p, _) in models.items()
    }
    assert w["rope"].keys() == w["nope"].keys()
    assert all(torch.equal(w["rope"][k], w["nope"][k]) for k in w["rope"])


def test_init_twin_needs_a_trained_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="training.json"):
        C_twin.prepare_init_twin(tmp_path, tmp_path / "out")


# ---------------------------------------------------------------------------------------------
# Tables


def _store(maps: np.ndarray, name: str) -> xr.Dataset:
    g, l, n, _ = maps.shape
    ds = xr.Dataset(
        {"score_group_mean": (("group", "layer", "query", "key"), maps)},
        coords={"group": np.arange(g), "layer": np.arange(l)},
    )
    ds.attrs.update({"n_sequences": 2 * g, "dataset_name": "d", "model_name": name})
    return ds


def test_comparison_tables_join_index_leakage_and_lengthgen():
    rng = np.random.default_rng(4)
    s = _signal(2, 10)
    stores = {
        "rope": (
            _store(_groups(3 * s, 8, 0.1, rng), "trained-rope"),
            _store(_groups(s, 8, 0.1, rng), "i"),
        ),
        "nope": (_store(_groups(s, 8, 0.1, rng), "trained-nope"), None),
    }
    comps = [
        "total",
        "residual_stream",
        "causal_mask",
        "share_residual_stream",
        "share_causal_mask",
    ]
    vals = np.array(
        [
            [0.1, 0.08, 0.12],
            [0.04, 0.03, 0.05],
            [0.06, 0.05, 0.07],
            [0.4, 0.3, 0.5],
            [0.6, 0.5, 0.7],
        ]
    )
    summ = xr.Dataset(
        {"per_prompt_decomposition": (("per_prompt_condition", "component", "stat"), vals[None])},
        coords={
            "per_prompt_condition": ["rope"],
            "component": comps,
            "stat": ["estimate", "lo", "hi"],
        },
    )
    lg = pd.DataFrame(
        {
            "variant": ["rope", "nope"],
            "positional": ["rope", "nope"],
            "final_heldout_loss": [4.0, 4.2],
            "excess_mean": [0.06, 0.01],
            "excess_lo": [0.0, -0.05],
            "excess_hi": [0.1, 0.08],
        }
    )
    twin = summ.copy(deep=True)
    twin["per_prompt_decomposition"] = twin["per_prompt_decomposition"] * 2
    index, cmp = C_tables.comparison_tables(
        stores, leakage={"rope": summ}, leakage_init={"rope": twin}, lengthgen=lg, n_boot=300
    )
    assert len(index) == 2 * 2 + 2  # rope: trained + init per layer; nope: trained only
    rope_t = index[(index.variant == "rope") & (index.weights == "trained")]
    rope_i = index[(index.variant == "rope") & (index.weights == "init")]
    np.testing.assert_allclose(
        rope_t.minus_init.values, rope_t["index"].values - rope_i["index"].values
    )
    # index of 3 s over index of s: 3, inside the paired interval
    assert np.all((rope_t.over_init_lo.values <= 3.0) & (3.0 <= rope_t.over_init_hi.values))
    assert np.all(rope_t.over_init_lo.values > 1.0)
    ci = index_ci(stores["nope"][0]["score_group_mean"].values, n_boot=300, key0=False)
    np.testing.assert_allclose(
        index[index.variant == "nope"]["index"].values, ci.debiased, rtol=1e-12
    )
    r = cmp.set_index("variant")
    assert r.loc["rope", "leak_total"] == 0.1 and r.loc["rope", "leak_causal_mask_hi"] == 0.07
    assert (
        r.loc["rope", "init_leak_total"] == 0.2
        and r.loc["rope", "init_leak_share_causal_mask_lo"] == 1.0
    )
    assert np.isnan(r.loc["nope", "init_leak_total"])
    assert np.isnan(r.loc["nope", "leak_total"]) and np.isnan(r.loc["nope", "amplification"])
    assert r.loc["nope", "excess_beyond_context"] == 0.01 and r.loc["rope", "heldout_loss"] == 4.0
    np.testing.assert_allclose(
        r.loc["rope", "amplification"], rope_t["index"].mean() / rope_i["index"].mean(), rtol=1e-12
    )
    assert (
        r.loc["rope", "amplification_lo"]
        <= r.loc["rope", "amplification"]
        <= r.loc["rope", "amplification_hi"]
    )


def test_ratio_only_where_the_twin_index_is_detected():
    """An untrained twin whose index is pure noise: the difference is reported, the ratio is not."""
    rng = np.random.default_rng(6)
    s = _signal(2, 10)
    stores = {
        "rope": (_store(_groups(s, 8, 0.05, rng), "t"), _store(_groups(0 * s, 8, 0.05, rng), "i"))
    }
    index, cmp = C_tables.comparison_tables(stores, n_boot=300)
    tr = index[index.weights == "trained"]
    assert tr.over_init.isna().all() and (tr.minus_init_lo > 0).all()
    assert np.isnan(cmp.amplification[0]) and cmp.minus_init_lo[0] > 0
    assert cmp.init_index_mean_lo[0] == 0.0


def test_comparison_refuses_different_prompts():
    rng = np.random.default_rng(5)
    a = _store(_groups(_signal(2, 8), 6, 0.1, rng), "a")
    b = _store(_groups(_signal(2, 8), 6, 0.1, rng), "b")
    b.attrs["dataset_name"] = "other"
    with pytest.raises(ValueError, match="same prompts"):
        C_tables.comparison_tables({"rope": (a, b)}, n_boot=50)


def test_share_amplification_is_scale_free():
    """Multiplying a model's maps by 3 triples the logit index but leaves the share: the paired
    share difference is 0 within its CI; adding non-relative signal raises it."""
    rng = np.random.default_rng(7)
    n = 10
    q, k = np.indices((n, n))
    rel = np.exp(-(q - k) / 3.0)[None]  # a relative (Toeplitz) part
    s = _signal(2, n)
    stores = {
        "scaled": (
            _store(_groups(3 * (rel + s), 8, 0.01, rng), "a"),
            _store(_groups(rel + s, 8, 0.01, rng), "b"),
        ),
        "more": (
            _store(_groups(rel + 2 * s, 8, 0.01, rng), "c"),
            _store(_groups(rel + s, 8, 0.01, rng), "d"),
        ),
    }
    index, cmp = C_tables.comparison_tables(stores, n_boot=200)
    r = cmp.set_index("variant")
    assert r.loc["scaled", "minus_init_lo"] > 0  # the logit index grows with the scale alone
    lo, hi = (
        r.loc["scaled", "share_pooled_minus_init_lo"],
        r.loc["scaled", "share_pooled_minus_init_hi"],
    )
    assert lo <= 0 <= hi
    assert abs(r.loc["scaled", "share_pooled_minus_init"]) < 0.01
    assert r.loc["more", "share_pooled_minus_init_lo"] > 0
    assert r.loc["more", "share_pooled_lo"] <= r.loc["more", "share_pooled"] <= 1.0
    assert r.loc["more", "init_share_pooled"] < r.loc["more", "share_pooled"]
    tr = index[(index.variant == "more") & (index.weights == "trained")]
    assert (tr.share_minus_init_lo > 0).all() and tr.share.between(0, 1).all()
