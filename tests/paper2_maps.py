"""Synthetic attention maps for paper 2's tests: token content like attention logits around an
expected map, with an optional fixed BOS and a planted query effect (:func:`content_maps`)."""

from __future__ import annotations

import numpy as np


def content_maps(n, heads, T, rng, *, bos=True, planted=None, row=1.0, noise=0.3, V=10):
    """Position-free maps y[p, h, i, j] = A_h[x_pi, x_pj] + noise, tokens iid (token 0 = a fixed
    BOS when ``bos``), plus a planted query effect ``planted`` (heads, T); and the exact
    expected map μ (heads, T, T). A_h has query-token effects (``row``: content every row
    shares), interactions, a self-match bonus and a BOS column, as attention logits do."""
    a = row * rng.normal(size=(heads, V + 1, 1)) + 0.5 * rng.normal(size=(heads, V + 1, V + 1))
    a = a + 2.0 * np.eye(V + 1)
    a[:, :, V] += 2.0
    x = rng.integers(0, V, (n, T))
    if bos:
        x[:, 0] = V
    hh = np.arange(heads)[None, :, None, None]
    y = a[hh, x[:, None, :, None], x[:, None, None, :]] + noise * rng.normal(size=(n, heads, T, T))
    inner = a[:, :V, :V]
    mu = np.broadcast_to(inner.mean((1, 2))[:, None, None], (heads, T, T)).copy()
    idx = np.arange(T)
    mu[:, idx, idx] = np.trace(inner, axis1=1, axis2=2)[:, None] / V
    if bos:
        mu[:, :, 0] = a[:, :V, V].mean(1)[:, None]
        mu[:, 0, 0] = a[:, V, V]
    if planted is not None:
        y = y + planted[None, :, :, None]
        mu = mu + planted[:, :, None]
    return y, mu
