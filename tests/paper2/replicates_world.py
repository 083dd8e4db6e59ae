"""The simulated world of the calibrated-inference tests (coverage, size and power of the
headline's intervals and tests).

Simulation: maps over the measured pairs of T = 12 (lower triangle without row 0) with token
content like attention logits (a query-token effect every row shares, token interactions, a
self-match bonus, a fixed BOS column) plus noise, around an expected map μ = content mean +
relative profile + a non-additive residual + a planted query effect a·log(i). Grams from dense
projectors (independent of :mod:`causalpos.paper2.extraction.design`'s solver); 2,000 simulated prompt sets
per setting, 200 multipliers each (a new multiplier draw per block of 200 sets). Binomial SE of a
coverage near 0.95: 0.005.

Measured (seeds below; printed with ``pytest -s``): at the null (n = 32) the plug-in linear
variance is 1.81 × Var N̂ and the percentile bootstrap's SD 1.57 × the estimate's SD, its 95 %
interval covering 0 in 99.5 % of sets; the calibrated interval covers 0 in 95.1 % (n = 32) and
94.8 % (n = 64), the sign-flip test at α = 0.05 rejects 4.5 % and 4.8 %; the true ratio is covered
in 93.5 % / 94.1 % of sets at a 3-SD effect and 93.9 % / 94.3 % at 60 SD (n = 32 / 64); power at
3 SD (n = 32): the interval excludes 0 in 64.6 %, the test rejects in 75.0 %, the percentile
bootstrap's interval excludes 0 in 34.0 %."""

from __future__ import annotations

import functools

import numpy as np

from causalpos.paper2 import inference as I
from causalpos.paper2.estimator import replicates as RP
from causalpos.paper2.extraction import design as D

T, V, R, B, BLOCK = 12, 10, 2000, 200, 200


def _proj(a):
    w, v = np.linalg.eigh(a.T @ a)
    keep = w > 1e-10 * w[-1]
    u = a @ v[:, keep] / np.sqrt(w[keep])
    return u @ u.T


@functools.lru_cache(maxsize=1)
def world():
    """Projectors on the measured pairs, the content table and the expected map's parts."""
    mask = D.pair_mask(T)
    i, j = np.nonzero(mask)
    d = i.size
    xb = np.hstack([np.eye(T)[i - j], (j == 0)[:, None] * 1.0])  # offsets + key-0 landmark
    pf = _proj(np.hstack([xb, np.eye(T)[i]]))
    pd = pf - _proj(xb)
    c = np.eye(d) - 1.0 / d
    rng = np.random.default_rng(11)
    a = rng.normal(size=(V + 1, 1)) + 0.5 * rng.normal(size=(V + 1, V + 1)) + 2 * np.eye(V + 1)
    a[:, V] += 2.0  # BOS column
    inner = a[:V, :V]
    mu_c = np.where(i == j, np.trace(inner) / V, inner.mean())
    mu_c = np.where(j == 0, a[:V, V].mean(), mu_c)  # exact content mean (tokens iid, BOS at 0)
    rel = 0.5 * np.cos(0.8 * (i - j))
    resid = 0.3 * np.sin(0.9 * i) * np.cos(0.7 * j)
    resid = resid - pd @ resid  # no query effect: the null is exact
    q = np.log(np.maximum(i, 1.0))
    return {
        "i": i,
        "j": j,
        "pd": pd,
        "cpf": c @ pf,
        "c": c,
        "a": a,
        "mu0": mu_c + rel + resid,
        "shift": rel + resid,  # added to the content maps, whose mean is mu_c
        "q": q,
    }


@functools.lru_cache(maxsize=8)
def simulate(n, amp, seed):
    """Grams of R prompt sets of n prompts: num (R, n, n), low (R, n, n), residual part (R,)."""
    w = world()
    rng = np.random.default_rng(seed)
    x = rng.integers(0, V, (R, n, T))
    x[..., 0] = V
    y = w["a"][x[..., w["i"]], x[..., w["j"]]] + 0.3 * rng.normal(size=(R, n, w["i"].size))
    y += w["shift"] + amp * w["q"]
    yt = np.swapaxes(y, 1, 2)
    num, low = (y @ w["pd"]) @ yt, (y @ w["cpf"]) @ yt
    yc = y @ w["c"]
    sst, s = (yc * yc).sum(-1), yc.sum(1)
    d_low = low.sum((-2, -1)) - np.trace(low, axis1=-2, axis2=-1)
    return num, low, (s * s).sum(-1) - sst.sum(-1) - d_low  # D̂'s residual part


@functools.lru_cache(maxsize=8)
def readings(n, amp, seed=0, pct=False):
    """Per prompt set: N̂, D̂, calibrated (lo, hi) of ρ and of N, the sign-flip p, and (``pct``)
    the percentile bootstrap's (lo, hi) of ρ and its replicate SD of N."""
    num, low, d_r = simulate(n, amp, seed)
    out = {k: [] for k in ("rho", "n", "lo", "hi", "n_lo", "n_hi", "p", "plo", "phi", "psd")}
    rng = np.random.default_rng(seed + 1)
    for b0 in range(0, R, BLOCK):
        sl = slice(b0, b0 + BLOCK)
        xi = RP.rademacher(n, B, seed=1000 * seed + b0)
        r = I.calibrated_ratio(num[sl], low[sl], xi, d_r[sl])
        lo, hi = np.quantile(r["boot"], [0.025, 0.975], axis=0)
        n_lo, n_hi = np.quantile(r["num_boot"], [0.025, 0.975], axis=0)
        plo = phi = nb = np.full((2, BLOCK), np.nan)
        if pct:
            cnt = rng.multinomial(n, np.full(n, 1.0 / n), size=B).astype(float)
            pairs = (cnt.sum(-1) ** 2 - (cnt * cnt).sum(-1))[:, None]
            nb = RP.quadratic_form(num[sl], cnt)
            db = RP.quadratic_form(low[sl], cnt) + d_r[sl] * pairs / (n * (n - 1))
            plo, phi = np.quantile(nb / db, [0.025, 0.975], axis=0)
        for k, v in zip(
            out,
            (r["est"], r["num"], lo, hi, n_lo, n_hi, r["p"], plo, phi, nb.std(0)),
            strict=True,
        ):
            out[k].append(v)
    return {k: np.concatenate(v) for k, v in out.items()}


def null_sd(n):
    return readings(n, 0.0, pct=n == 32)["n"].std()


def amp_for(n, k_sd):
    """Planted amplitude whose N = n(n − 1)‖P_Δ μ‖² is k_sd null SDs of N̂."""
    w = world()
    return float(np.sqrt(k_sd * null_sd(n) / (n * (n - 1) * (w["q"] @ w["pd"] @ w["q"]))))
