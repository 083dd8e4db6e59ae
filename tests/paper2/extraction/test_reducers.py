"""Paper 2's extraction reducers (paper2.extraction.reducers): the leakage reducer against the
pure functions, merges, chunks, windows, masks; the sink reducer's closed form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tests.leakage_fit_oracle as L_fit
from causalpos import stats
from causalpos.capture.settings import CaptureRun
from causalpos.paper2 import position0 as P_position0
from causalpos.paper2.extraction import design as L_design
from causalpos.paper2.extraction import metric as L_metric
from causalpos.paper2.extraction import reducers as L_reducers
from tests.paper2_leakage_maps import (
    REDUCER_KW,
    causal,
    make_batches,
    run_reducer,
    synthetic_scores,
)


def test_reducer_equals_pure_functions():
    batches = make_batches()
    ds, _ = run_reducer(batches)
    assert ds["leak_delta"].dims == (
        "sequence",
        "layer",
        "head",
        "leak_window",
        "leak_fit",
        "leak_target",
    )
    for ids, per_layer in batches:
        for layer, s in enumerate(per_layer):
            a = L_fit.log_attention(s)
            for w in REDUCER_KW["windows"]:
                for fit in REDUCER_KW["fits"]:
                    sel = dict(sequence=ids, layer=layer, leak_window=w, leak_fit=fit)
                    for target, y in (("logit", s), ("logattn", a)):
                        ref = L_fit.fit_leakage(y, fit=fit, window=w)
                        got = ds.sel(**sel, leak_target=target)
                        np.testing.assert_allclose(
                            got["leak_delta"].values, ref.delta, rtol=1e-12, atol=1e-15
                        )
                        np.testing.assert_allclose(
                            got["leak_null"].values, ref.null_mean, rtol=1e-12, atol=1e-15
                        )
                        np.testing.assert_allclose(
                            got["leak_r2_base"].values, ref.r2_base, rtol=1e-12
                        )
                        np.testing.assert_allclose(
                            got["leak_r2_full"].values, ref.r2_full, rtol=1e-12
                        )
                    sp = L_fit.observational_split(s, fit=fit, window=w)
                    for term in L_metric.SPLIT_TERMS:
                        np.testing.assert_allclose(
                            ds["leak_split"].sel(**sel, leak_term=term).values,
                            sp[term],
                            rtol=1e-12,
                            atol=1e-15,
                        )
                    assert (
                        float(ds["leak_floor"].sel(layer=layer, leak_window=w, leak_fit=fit))
                        == ref.floor
                    )
    total = {0: 0, 1: 0}
    for _ids, per_layer in batches:
        for layer, s in enumerate(per_layer):
            total[layer] = total[layer] + s.double().sum(0)
    np.testing.assert_allclose(
        ds["leak_map_sum"].sel(layer=1).values,
        total[1].numpy(),
        rtol=1e-13,
        equal_nan=True,
    )
    assert int(ds["leak_map_count"]) == 8


def test_reducer_merge_equals_single_pass():
    batches = make_batches(seed=4)
    single, _ = run_reducer(batches)
    shard_a, _ = run_reducer(batches[:1])
    shard_b, _ = run_reducer(batches[1:])
    merged = L_reducers.LeakageReducer.merge([shard_b, shard_a])
    for k in L_reducers.LeakageReducer._PER_SEQ:
        np.testing.assert_array_equal(merged[k].values, single[k].values)
    np.testing.assert_array_equal(merged["sequence"].values, single["sequence"].values)
    for k in ("leak_map_sum", "leak_logz_sum"):
        np.testing.assert_allclose(merged[k].values, single[k].values, rtol=1e-13, equal_nan=True)
    assert int(merged["leak_map_count"]) == int(single["leak_map_count"])
    with pytest.raises(ValueError, match="share sequence ids"):
        L_reducers.LeakageReducer.merge([shard_a, shard_a])


def test_reducers_work_through_a_large_batch_in_chunks_with_the_same_result(monkeypatch):
    """A batch is cut into chunks of at most ``work_cells`` score cells (bounded float64
    temporaries on a GPU); per-map results and mean-map sums are the same up to the rounding of
    batched products and summation order, and one sequence per chunk is the floor."""
    from causalpos.capture import reducers as capture_reducers

    batches = make_batches(seed=7)
    whole, _ = run_reducer(batches)
    sinks = {}
    for cells in (None, 1):  # 1 cell: every sequence its own chunk
        if cells is not None:
            monkeypatch.setattr(capture_reducers, "work_cells", lambda device, c=cells: c)
        sink = L_reducers.SinkReducer()
        for ids, per_layer in batches:
            for layer, s in enumerate(per_layer):
                sink.update(layer, s, ids)
        sinks[cells] = sink.result()
    chunked, _ = run_reducer(batches)
    for k in L_reducers.LeakageReducer._PER_SEQ:
        np.testing.assert_allclose(chunked[k].values, whole[k].values, rtol=1e-12, atol=1e-15)
    for k in ("leak_map_sum", "leak_logz_sum"):
        np.testing.assert_allclose(chunked[k].values, whole[k].values, rtol=1e-13, equal_nan=True)
    np.testing.assert_array_equal(
        sinks[1]["sink_attention"].values, sinks[None]["sink_attention"].values
    )


def test_reducer_window_without_pairs_is_nan_in_every_variable():
    """A window with fewer than two pairs (early1: no query row) is NaN everywhere, its
    expected-map sums included, and leaves the other windows as they are alone."""
    s = synthetic_scores(2, 2, 10, 3)
    kw = dict(fits=("saturated+query", "linear+query"), expected_stats=True)
    both = L_reducers.LeakageReducer(windows=("all", "early1"), **kw)
    alone = L_reducers.LeakageReducer(windows=("all",), **kw)
    for red in (both, alone):
        red.update(0, s, np.array([0, 1]))
    got, ref = both.result(), alone.result()
    assert int(got["leak_n_pairs"].sel(leak_window="early1", layer=0)) == 0
    for k in L_reducers.LeakageReducer._PER_SEQ:
        if "leak_window" in got[k].dims or "leak_exp_window" in got[k].dims:
            dim = "leak_window" if "leak_window" in got[k].dims else "leak_exp_window"
            assert np.isnan(got[k].sel({dim: "early1"}).values).all(), k
            np.testing.assert_array_equal(got[k].sel({dim: "all"}), ref[k].sel({dim: "all"}))
        else:
            np.testing.assert_array_equal(got[k].values, ref[k].values)


def test_reducer_bidirectional_and_sliding_window():
    T = 12
    s = synthetic_scores(2, 2, T, 1, bidirectional=True)
    red = L_reducers.LeakageReducer(fits=("saturated+query",), windows=("all",))
    red.update(0, s, np.array([0, 1]))
    ds = red.result()
    # Bidirectional: Z over all T keys, measured on the lower triangle.
    a = s.double() - torch.logsumexp(s.double(), -1, keepdim=True)
    ref = L_fit.fit_leakage(causal(a.numpy()))
    np.testing.assert_allclose(
        ds["leak_delta"].sel(leak_target="logattn").values[:, 0, :, 0, 0], ref.delta, rtol=1e-12
    )
    # Sliding window of 4: only offsets 0..3 are measured and the log-softmax runs over the window.
    sw = synthetic_scores(2, 2, T, 2, window=4)
    red = L_reducers.LeakageReducer(fits=("saturated+query",), windows=("all",), pair_subsample=3)
    red.update(0, sw, np.array([5, 6]))
    ds = red.result()
    sub = stats.stratified_pair_mask(T, 3, seed=0)
    win = np.tril(np.ones((T, T), bool)) & ~np.tril(np.ones((T, T), bool), -4)
    assert int(ds["leak_n_pairs"].sel(layer=0, leak_window="all")) == int(
        (L_design.pair_mask(T) & sub & win).sum()
    )
    ref = L_fit.fit_leakage(L_fit.log_attention(sw), mask=sub & win)
    np.testing.assert_allclose(
        ds["leak_delta"].sel(leak_target="logattn").values[:, 0, :, 0, 0], ref.delta, rtol=1e-12
    )


def test_reducers_inside_capture_match_eager_attention():
    # End to end through capture.capture_scores on a random-init tiny Llama; reference: the
    # model's own eager attention probabilities (float32), an independent path to log A_ij.
    import copy

    from transformers import LlamaForCausalLM

    from causalpos.capture import hook as capture
    from causalpos.paper2.extraction import reducers as P
    from tests.paper2.summary.test_planted import _tiny_llama

    model = _tiny_llama()  # 2 layers, 4 heads, 2 KV heads, seeded
    tok = np.random.default_rng(0).integers(3, 64, (5, 16))
    tok[:, 0] = 1
    tri = np.tril(np.ones((16, 16), dtype=bool))
    for variant in ("causal", "bidirectional"):
        ds = capture.capture_scores(
            model,
            tok,
            CaptureRun(variant, 2, seed=0, progress=False),
            reducers=[
                L_reducers.LeakageReducer(fits=("saturated+query",), windows=("all",)),
                P.SinkReducer(),
            ],
        )
        eager = LlamaForCausalLM(copy.deepcopy(model.config)).eval()
        eager.load_state_dict(model.state_dict())
        eager.set_attn_implementation("eager")
        eager.config.is_causal = variant == "causal"
        with torch.no_grad():
            att = eager(torch.tensor(tok), output_attentions=True).attentions
        for layer, a in enumerate(att):
            ref = L_fit.fit_leakage(np.where(tri, torch.log(a.double()).numpy(), np.nan))
            got = (
                ds["leak_delta"]
                .sel(
                    layer=layer,
                    leak_window="all",
                    leak_fit="saturated+query",
                    leak_target="logattn",
                )
                .values
            )
            np.testing.assert_allclose(got, ref.delta, rtol=0, atol=5e-6)
            np.testing.assert_allclose(
                ds["sink_attention"].sel(layer=layer).values,
                a[..., 1:, 0].double().mean(-1).numpy(),
                rtol=0,
                atol=1e-7,
            )


def test_sink_reducer_closed_form_and_threshold():
    T = 10
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    causal = j <= i
    uniform = torch.where(causal, 0.0, torch.nan)  # head 0: uniform attention
    sink = torch.where(causal, torch.where(j == 0, 30.0, 0.0), torch.nan)  # head 1: all on key 0
    scores = torch.stack([uniform, sink])[None].repeat(2, 1, 1, 1).float()
    red = L_reducers.SinkReducer()
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
    merged = L_reducers.SinkReducer.merge([ds.isel(sequence=[1]), ds.isel(sequence=[0])])
    np.testing.assert_array_equal(merged["sink_attention"].values, ds["sink_attention"].values)
