"""Stacked query-window designs (paper2.extraction.windows): each window solved as its own design."""

from __future__ import annotations

import numpy as np
import torch

import tests.leakage_fit_oracle as L_fit
from causalpos.paper2.extraction import design as L_design
from causalpos.paper2.extraction import metric as L_metric
from tests.paper2_leakage_maps import REDUCER_KW, synthetic_scores


def test_stacked_designs_solve_each_window_as_its_own_design():
    """DesignStack: one batched fit over windows equals fit_sums with each window's design."""
    from causalpos.paper2.extraction import windows as L_windows

    T = 12
    s = synthetic_scores(2, 2, T, 9).double()
    base = L_metric.measured_mask(torch.isfinite(s), None, "all")
    names = ("all", "early6", "late")
    for fit in REDUCER_KW["fits"]:
        plan = L_windows.plan_windows(base, names, (fit,))
        n = int(base.sum())
        per = [L_fit.window_sums(s, base, n, *plan.bounds[k]) for k in plan.valid]
        stacked = {
            key: torch.stack([p[key] for p in per]).reshape(len(per), 4, -1) for key in per[0]
        }
        for key in ("S", "Q"):
            stacked[key] = stacked[key][..., 0]
        got = L_metric.fit_sums(stacked, plan.stacks[0])
        for k, wi in enumerate(plan.valid):
            lo, hi = plan.bounds[wi]
            w_np = base & ((np.arange(T) >= lo) & (np.arange(T) < hi))[:, None]
            ref = L_metric.fit_sums(per[k], L_design.build_design(w_np, fit))
            for key in ("sst", "ss_base", "dss", "null"):
                np.testing.assert_allclose(
                    got[key][k].numpy(), ref[key].reshape(-1).numpy(), rtol=1e-12, atol=1e-13
                )
            assert plan.floors[wi, 0] == L_design.build_design(w_np, fit).floor
