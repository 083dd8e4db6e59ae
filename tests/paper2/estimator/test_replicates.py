"""The multiplier replicates of U-statistics (paper2.estimator.replicates): the quadratic form's
two paths against the double sum, the unbiased linear variance, the plug-in linear part's bias at
the null, replicates of a sum of Grams from the sums of their linear parts."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos.paper2 import inference as I
from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import replicates as RP
from tests.paper2.replicates_world import amp_for, readings, simulate


def test_quadratic_form_and_the_unbiased_linear_variance_are_exact():
    rng = np.random.default_rng(0)
    n, k = 9, 4
    c = rng.normal(size=(3, n, k)) + 0.7
    g = c @ np.swapaxes(c, 1, 2)
    w = rng.normal(size=(5, n))
    explicit = np.array(
        [[sum(w[b, p] * w[b, q] * g[a, p, q] for p in range(n) for q in range(n) if p != q)
          for a in range(3)] for b in range(5)]
    )  # fmt: skip
    assert np.allclose(RP.quadratic_form(g, w), explicit)
    # ζ̂1: the mean over distinct triples minus the mean over distinct quadruples, by brute force
    import itertools

    h = g[0]
    t3 = np.mean([h[p, q] * h[p, r] for p, q, r in itertools.permutations(range(n), 3)])
    t4 = np.mean([h[p, q] * h[r, s] for p, q, r, s in itertools.permutations(range(n), 4)])
    zeta1 = RP.u_replicates(h, np.ones((1, n)))["zeta1"]  # ζ̂1 of the replicates' variance
    assert zeta1 == pytest.approx(t3 - t4, rel=1e-10)
    # Var*(N*) given the data: the replicates' variance over all 2^n sign vectors
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=n)))
    u = RP.u_replicates(g, signs)
    assert np.allclose(u["delta"].mean(0), 0.0, atol=1e-9 * np.abs(u["est"]).max())
    assert np.allclose(u["delta"].var(0), u["var"], rtol=1e-10)
    # at the null the sign-flip statistic is exactly the replicates without linear part/centring
    assert np.allclose(u["null"], RP.quadratic_form(g, signs))


@pytest.mark.parametrize("n, b", [(12, 300), (97, 2000)])
def test_both_paths_of_the_quadratic_form_equal_the_double_sum(n, b):
    # n = 12: the cached pair-product table; n = 97, B = 2000: its table would exceed
    # _PAIR_BYTES, so one triangular product per Gram. Non-symmetric Grams and weights other
    # than ±1 (the bootstrap's counts) too; a second call hits the cache.
    assert (b * n * (n - 1) // 2 * 8 <= RP._PAIR_BYTES) == (n == 12)
    rng = np.random.default_rng(n)
    g = rng.normal(size=(2, 3, n, n))
    w = rng.choice([-1.0, 1.0], size=(b, n)) * rng.integers(0, 3, size=(b, n))
    explicit = np.einsum("bp,bq,klpq->bkl", w, w, g) - np.einsum("bp,klpp->bkl", w * w, g)
    for _ in range(2):
        got = RP.quadratic_form(g, w)
        assert got.shape == (b, 2, 3)
        assert np.abs(got - explicit).max() <= 1e-12 * np.abs(explicit).max()
    few = RP.quadratic_form(g[0, 0], w[:3])  # B <= 8: the direct product
    assert few.shape == (3,)
    assert np.abs(few - explicit[:3, 0, 0]).max() <= 1e-12 * np.abs(explicit).max()


@pytest.mark.slow
def test_the_plug_in_linear_part_doubles_the_degenerate_variance_at_the_null():
    # Why the percentile bootstrap over-covers: 4(n−1)² Σ ĝ1² ≈ 2 × 2n(n−1) E g2² at the null,
    # while the unbiased ζ̂1 is ≈ 0.
    num, _, _ = simulate(32, 0.0, 0)
    n = 32
    m = RP._moments(num)
    g1 = m["row"] / (n - 1) - (m["est"] / (n * (n - 1)))[:, None]
    plug = 4 * (n - 1) ** 2 * (g1 * g1).sum(-1)
    var_n = readings(n, 0.0, pct=True)["n"].var()
    print(f"null, n = {n}: plug-in linear variance / Var N̂ = {plug.mean() / var_n:.2f}")
    assert plug.mean() / var_n == pytest.approx(2.0, rel=0.12)
    z1 = RP.u_replicates(num, np.ones((1, n)))["zeta1"]
    assert abs(4 * n * (n - 1) ** 2 * z1.mean()) < 0.1 * var_n


def test_replicates_of_a_sum_of_grams_from_the_sums_of_their_linear_parts():
    # A layer's (Σ heads), the pooled (Σ all) and a combination's (a contrast of runs) replicates
    # take the multiplier products of the finest Grams, summed: the same replicates as from the
    # summed Gram itself, up to rounding; another Gram's parts give other replicates.
    num, low, _ = simulate(32, amp_for(32, 3.0), 0)
    n = 32
    g, h = num[:6].reshape(2, 3, n, n), low[:6].reshape(2, 3, n, n)
    xi = RP.rademacher(n, 300, seed=4)
    heads = {"g": RP.linear_parts(g, xi), "h": RP.linear_parts(h, xi)}
    for axis in (1, (0, 1)):
        for gram, parts in (
            (g.sum(axis), RP.sum_parts(heads["g"], axis)),
            (
                (g - 0.5 * h).sum(axis),
                {k: (heads["g"][k] - 0.5 * heads["h"][k]).sum(2 if axis == 1 else (1, 2))
                 for k in RP.LINEAR_PARTS},
            ),
        ):  # fmt: skip
            direct = RP.linear_parts(gram, xi)
            for k in RP.LINEAR_PARTS:
                assert parts[k].shape == direct[k].shape == (300,) + gram.shape[:-2]
                assert np.abs(parts[k] - direct[k]).max() <= 1e-12 * np.abs(direct[k]).max()
            a, b = RP.u_replicates(gram, xi), RP.u_replicates(gram, xi, parts)
            for k in ("delta", "null"):
                assert np.abs(a[k] - b[k]).max() <= 1e-12 * np.abs(a[k]).max()
            ca, cb = I.calibrated(gram, xi), I.calibrated(gram, xi, parts=parts)
            assert np.abs(ca["boot"] - cb["boot"]).max() <= 1e-12 * np.abs(ca["boot"]).max()
            assert np.array_equal(ca["p"], cb["p"])
    layer = g.sum(1)
    wrong = RP.sum_parts(RP.linear_parts(g[:, :2], xi), 1)  # two of the three heads
    a, c = RP.u_replicates(layer, xi), RP.u_replicates(layer, xi, wrong)
    assert np.abs(a["delta"] - c["delta"]).max() > 0.1 * np.abs(a["delta"]).std()
    # the per-head estimate's layer and pooled readings are those of the summed Grams
    rng = np.random.default_rng(3)
    grams = {"num": g, "low": h, "sst": rng.uniform(50, 60, size=(2, 3, n))}
    d_full = RP.quadratic_form(h, np.ones((1, n)))[0] + 5.0  # a residual part of 5 per map
    grams["sst_sum"] = d_full + grams["sst"].sum(-1)
    e = X.estimate(grams, xi)
    for name, axes in (("layer", (1,)), ("pooled", (0, 1))):
        r = I.calibrated_ratio(g.sum(axes), h.sum(axes), xi, np.full(d_full.shape, 5.0).sum(axes))
        assert np.abs(e[f"{name}_boot"] - r["boot"]).max() <= 1e-10 * np.abs(r["boot"]).max()
        assert np.allclose(e[name], r["est"], rtol=1e-12, atol=0)
    parts = e["num_parts_layer"]
    assert all(np.abs(parts[k] - RP.linear_parts(g.sum(1), xi)[k]).max()
               <= 1e-12 * np.abs(parts[k]).max() for k in RP.LINEAR_PARTS)  # fmt: skip
    # lean: the same readings, without the per-head SST companion and replicates
    lean = X.estimate(grams, xi, lean=True)
    assert not {"head_sst", "head_boot", "head_num_boot", "layer_sst"} & set(lean)
    for k in lean:
        if k != "num_parts_layer":
            assert np.array_equal(np.asarray(lean[k]), np.asarray(e[k]), equal_nan=True), k
    # without the per-head reading: each layer's parts from its own Gram, the layers' and the
    # pooled readings those of the per-head estimate (up to rounding), no per-head key
    lay = X.estimate(grams, xi, lean=True, heads=False)
    assert not [k for k in lay if k.startswith("head") or k in ("p", "q")]
    assert {k for k in lean if not k.startswith("head") and k not in ("p", "q")} == set(lay)
    for k in lay:
        if k == "num_parts_layer":
            for x in RP.LINEAR_PARTS:  # the layer's Gram's own parts, exactly
                assert np.array_equal(lay[k][x], RP.linear_parts(g.sum(1), xi)[x])
            continue
        a, b = np.asarray(lay[k], dtype=np.float64), np.asarray(lean[k], dtype=np.float64)
        assert np.abs(a - b).max() <= 1e-10 * np.abs(b).max(), k
