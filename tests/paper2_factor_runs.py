"""Synthetic runs of claim 3's factor interventions (tests of paper2.summary.factors and of the
scorecard's factor rows): five layers (four sliding, one global), the plain causal run, no_window,
global_base and both rings."""

from __future__ import annotations

import numpy as np
import torch

from causalpos.models.layer_kinds import pattern
from causalpos.paper2.extraction import reducers as R
from causalpos.paper2.settings import LeakageSettings
from tests.paper2_maps import content_maps

T, HEADS, N = 12, 2, 24
KINDS = ["sliding4"] * 4 + ["global"]
KW = dict(fits=("saturated+query",), windows=("all",), expected_stats=["all"])
SETTINGS = LeakageSettings(n_boot=200, n_perm=0, bos_windows=("all",))


def store(maps, causal: bool):
    """A leakage store of len(KINDS) layers, each measured on its kind's trained pairs."""
    red = R.LeakageReducer(**KW)
    red.set_layer_kinds(KINDS)
    for layer, y in enumerate(maps):
        y = np.asarray(y, dtype=np.float64)
        if causal:
            y = np.where(pattern(KINDS[layer], T) | (not causal), y, np.nan)
        red.update(layer, torch.tensor(y, dtype=torch.float32), np.arange(y.shape[0]))
    ds = red.result().assign_coords(layer_kind=("layer", KINDS))
    ds.attrs["seq_len"] = T
    return ds


def factor_runs(slope_size: float, seed: int = 5, base_scale: float = 1.0):
    """causal: a query effect growing with depth over the sliding layers (``slope_size`` per
    layer), no_window the same prompts' content without it (and with noise of its own); global_base: the causal run's maps
    with a constant extra query effect on the sliding layers (``base_scale`` 1) or with the
    query effect scaled by ``base_scale``; the rings position-free."""
    rng = np.random.default_rng(seed)
    logi = np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
    maps = {v: [] for v in ("causal", "no_window", "global_base", "ring", "global_base+ring")}
    for layer, kind in enumerate(KINDS):
        a = slope_size * layer if kind != "global" else 0.0
        base, _ = content_maps(N, HEADS, T, rng)
        maps["causal"].append(base + a * logi[None, :, :, None])
        # the intervention's own map of the same prompts: the content plus a run-level change
        maps["no_window"].append(base + 0.3 * rng.normal(size=base.shape))
        extra = 0.6 if kind != "global" and base_scale == 1.0 else 0.0
        b = base_scale * a + extra  # base_scale < 1: the global base suppresses the term
        maps["global_base"].append(base + b * logi[None, :, :, None])
        ring, _ = content_maps(N, HEADS, T, rng)
        maps["ring"].append(ring)
        maps["global_base+ring"].append(ring)
    return {v: store(m, v in ("causal", "no_window", "global_base")) for v, m in maps.items()}
