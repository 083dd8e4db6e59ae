"""The design of a fit (paper2.extraction.design): the null floor's parameter counts, the full
window's rows remove the sliding window's mask artefact."""

from __future__ import annotations

import numpy as np
import pytest

import tests.leakage_fit_oracle as F
from causalpos.paper2.extraction import design as D
from causalpos.paper2.extraction import design as L_design


def test_full_window_rows_remove_the_sliding_window_mask_artifact():
    T, W = 16, 3
    i, j = np.indices((T, T))
    s = np.where(np.abs(i - j) <= W, 0.3 * np.cos(0.7 * (i - j)) + 0.1 * (i - j), np.nan)
    a = F.log_attention(s)  # bidirectional window: Z_i sums fewer keys near both ends
    lower = np.where(j <= i, a, np.nan)
    assert F.fit_leakage(lower).delta > 0.1
    assert D.query_window(f"full{W}", T) == (W, T - W)
    assert abs(F.fit_leakage(lower, window=f"full{W}").delta) < 1e-12
    causal = F.log_attention(np.where((j <= i) & (i - j < W), s, np.nan))
    assert abs(F.fit_leakage(causal, window=f"full{W}").delta) < 1e-12


def test_null_floor_parameter_counts():
    T = 16
    m = L_design.pair_mask(T)
    n = T * (T + 1) // 2 - 1
    assert m.sum() == n
    assert L_design.build_design(m, "saturated+query").floor == pytest.approx((T - 2) / (n - 1))
    assert L_design.build_design(m, "saturated+key").floor == pytest.approx((T - 1) / (n - 1))
    assert L_design.build_design(m, "saturated+both").floor == pytest.approx((2 * T - 4) / (n - 1))
    assert L_design.build_design(m, "linear+query").floor == pytest.approx((T - 2) / (n - 1))
