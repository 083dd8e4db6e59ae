"""The summary's shared cache of Grams and estimates (paper2.estimator.grams): the same Grams as
one layer at a time, the same estimates as the estimator, the numerator's replicates."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import storeview as SV
from causalpos.paper2.estimator.grams import GramCache
from causalpos.paper2.prompts import PromptSet
from causalpos.paper2.settings import LeakageSettings
from tests.paper2_headline_runs import headline_runs


@pytest.fixture(scope="module")
def two_layers():
    """Each run's store with a second layer: another run's maps (layers sharing their pairs: one
    group of the cache)."""
    runs = headline_runs()
    out = {}
    for v, ds in runs.items():
        other = runs["identity_rope+bidirectional" if v == "causal" else "causal"]
        second = other.assign_coords(layer=[1])
        out[v] = xr.concat([ds, second], dim="layer")
    return PromptSet.from_stores(out, LeakageSettings(n_boot=100))


def test_grams_of_layers_sharing_their_pairs_equal_one_layer_at_a_time(two_layers):
    cache = GramCache(two_layers)
    got = cache.grams("causal", "all", "logit")
    want, _ = SV.store_grams(two_layers.runs["causal"], window="all", target="logit")
    for k in ("num", "low", "sst"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-9)
    # the second layer is another run's: its Grams are that run's first layer's
    other = GramCache(two_layers).grams("identity_rope+bidirectional", "all", "logit")
    np.testing.assert_allclose(got["num"][1], other["num"][0], rtol=1e-12, atol=1e-9)


def test_the_cached_estimate_is_the_estimators_and_is_memoised(two_layers):
    cache = GramCache(two_layers)
    r = cache.estimate("causal", "all", "logit")
    g, _ = SV.store_grams(two_layers.runs["causal"], window="all", target="logit")
    want = X.estimate(g, two_layers.multipliers, lean=True)
    for k in ("pooled", "pooled_lo", "pooled_hi", "layer", "head", "p", "q"):
        np.testing.assert_allclose(r[k], want[k], rtol=1e-12)
    assert cache.estimate("causal", "all", "logit") is r
    assert cache.parts("causal", "all", "logit")["null"].shape == (100, 2)


def test_statistics_read_again_reuse_the_summed_maps_pass_bit_for_bit(two_layers, monkeypatch):
    """Each call's statistics equal a fresh ``store_stats`` exactly, and the pass over the summed
    maps (``map_sum``: most of a call's cost) runs once per run, window, target and layer."""
    calls = []
    real = SV.map_sum
    monkeypatch.setattr(SV, "map_sum", lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    cache = GramCache(two_layers)
    windows, layers = ("all", "late"), (0, 1)
    masks = {w: cache.masks("causal", w, "logattn") for w in windows}  # reads the maps too
    calls.clear()
    got = {
        (w, layer, i): cache.stats("causal", w, "logattn", layer)
        for i in range(3)
        for w in windows
        for layer in layers
    }
    assert len(calls) == len(windows) * len(layers)  # 3 × as many without the kept sst_sum
    for (w, layer, _), st in got.items():
        want = SV.store_stats(cache.data("causal"), layer, w, "logattn", masks[w][layer])
        for f in ("off", "rows", "key0", "sst", "sst_sum"):
            assert np.array_equal(getattr(st, f), getattr(want, f)), f
