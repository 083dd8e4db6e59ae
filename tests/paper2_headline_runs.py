"""Stores of synthetic runs for the headline reading's tests: a leakage store of maps
(:func:`store`) and three runs of one (model, dataset) (:func:`headline_runs`)."""

from __future__ import annotations

import numpy as np
import torch

from causalpos.paper2.extraction import reducers as R
from tests.paper2_maps import content_maps

T, HEADS, N = 12, 3, 24


KW = dict(fits=("saturated+query",), windows=("all", "late"), expected_stats=["all", "late"])


def store(y, causal: bool):
    """A leakage store of maps y (n, heads, T, T): one layer, causal (NaN above the diagonal) or
    bidirectional."""
    y = np.array(y, dtype=np.float64)
    if causal:
        y = np.where(np.tril(np.ones((T, T), bool)), y, np.nan)
    red = R.LeakageReducer(**KW)
    red.update(0, torch.tensor(y, dtype=torch.float32), np.arange(y.shape[0]))
    return red.result()


def headline_runs():
    """The runs of one (model, dataset): a causal run with a planted query effect, the ring and
    the bidirectional run keeping half of it (the same maps), and a position-free control
    (content only)."""
    rng = np.random.default_rng(11)
    free, _ = content_maps(N, HEADS, T, rng)  # position-free content, fixed BOS
    planted = 1.5 * np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
    leaky, _ = content_maps(N, HEADS, T, rng, planted=planted)
    half = store(free + 0.5 * (leaky - free).mean(0), False)
    return {
        "causal": store(leaky, True),
        "ring": half,  # the ablation the decomposition reads (no end creates position here)
        "bidirectional": half,  # paper 2's ablation: the same maps (edge_position 0 exactly)
        "identity_rope+bidirectional": store(free, False),
    }
