"""Paper 1's tables for the scorecard's tests: rows of the llm_index table (one model's layers,
with the share, first keys and a random-init twin)."""

from __future__ import annotations

import math

import pandas as pd


def _llm_p1(model, l1diff, bands, share1=(0.1, 0.05, 0.15), twin=None, twin_diff=None):
    """llm_index rows with the share and first-keys columns: ``l1diff`` one (est, lo, hi) of
    share(L) - share(1) per layer from 2 on, ``bands`` one (est, lo, hi) per layer from 1 on."""
    n = len(bands)
    nan3 = (math.nan,) * 3
    diffs = [nan3, *l1diff]
    df = pd.DataFrame(
        {
            "model": model,
            "dataset": "d",
            "variant": "causal",
            "layer": range(1, n + 1),
            "share": [share1[0] + d[0] if i else share1[0] for i, d in enumerate(diffs)],
            "share_lo": share1[1],
            "share_hi": share1[2],
            "share_minus_l1": [d[0] for d in diffs],
            "share_minus_l1_lo": [d[1] for d in diffs],
            "share_minus_l1_hi": [d[2] for d in diffs],
            "band_keys": 4,
            "band": [b[0] for b in bands],
            "band_lo": [b[1] for b in bands],
            "band_hi": [b[2] for b in bands],
            "band_with_sink": [b[0] - 1 for b in bands],
            "band_with_sink_lo": [b[1] - 1 for b in bands],
            "band_with_sink_hi": [b[2] - 1 for b in bands],
        }
    )
    df["share_pooled"], df["share_pooled_lo"], df["share_pooled_hi"] = 0.3, 0.25, 0.35
    if twin is not None:
        df["twin"] = twin
        df["share_pooled_minus_twin"] = twin_diff[0]
        df["share_pooled_minus_twin_lo"] = twin_diff[1]
        df["share_pooled_minus_twin_hi"] = twin_diff[2]
    return df


UP, FLAT, WIDE = (0.2, 0.1, 0.3), (-0.05, -0.08, -0.01), (0.01, -0.02, 0.04)


LOW, HIGH, ZERO = (-0.3, -0.4, -0.2), (0.3, 0.2, 0.4), (0.0, -0.1, 0.1)
