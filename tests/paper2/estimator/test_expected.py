"""The expected-map estimator (paper2.estimator.expected): the U-statistics against the explicit
sums over prompt pairs, both controls, the landmark, the sign-flip test's calibration, the
calibrated readings pooled by level, a tiny position-free model end to end."""

from __future__ import annotations

import numpy as np
import pytest

import tests.leakage_fit_oracle as F
from causalpos.capture.settings import CaptureRun
from causalpos.paper2 import inference as I
from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import pairgrams as PG
from causalpos.paper2.estimator import replicates as RP
from causalpos.paper2.extraction import design as D
from causalpos.paper2.extraction import reducers as R
from tests.expected_oracle import estimate_bootstrap, expected_leakage
from tests.paper2.replicates_world import amp_for, simulate
from tests.paper2_maps import content_maps


def orthonormal(a):
    """Orthonormal basis of the column span of ``a`` (eigenvectors of aᵀa with an explicit rank
    cut: the designs are rank-deficient and pinv's default cut keeps spurious directions at
    T = 64)."""
    w, v = np.linalg.eigh(a.T @ a)
    keep = w > 1e-10 * w[-1]
    return a @ v[:, keep] / np.sqrt(w[keep])


def dense_design(mask, fit, landmark):
    """Independent projectors P_Δ, C and P_F on the measured pairs (numpy, explicit columns)."""
    T = mask.shape[0]
    i, j = np.nonzero(mask)
    n = i.size
    base, _ = D.parse_fit(fit)
    cols = [np.eye(T)[i - j]] if base == "saturated" else [np.ones((n, 1)), (i - j)[:, None] * 1.0]
    if landmark:
        cols.append((j == 0)[:, None] * 1.0)
    xb = np.hstack(cols)
    xf = np.hstack([xb, np.eye(T)[i]])
    proj = lambda a, u=None: (u := orthonormal(a)) @ u.T  # noqa: E731
    c = np.eye(n) - 1.0 / n
    return proj(xf) - proj(xb), c, proj(xf)


def offdiag(g):
    return g.sum((-2, -1)) - np.trace(g, axis1=-2, axis2=-1)


def exact_rho(mu, mask, fit="saturated+query", landmark=True):
    """ΔR² of the expected maps μ (heads, T, T): per head and pooled (Σ ΔSS / Σ SST)."""
    pd, c, _ = dense_design(mask, fit, landmark)
    v = mu[:, mask]
    num = np.einsum("hx,xy,hy->h", v, pd, v)
    den = np.einsum("hx,xy,hy->h", v, c, v)
    return num / den, num.sum() / den.sum()


def headline(y, mask, fit="saturated+query", landmark=True, n_boot=2000, seed=0, n_flips=2000):
    """The estimate for maps y (n, heads, T, T): one layer, under the percentile bootstrap
    (``n_boot`` multinomial draws seeded by ``seed``; sign flips seeded by ``seed`` + 1)."""
    st = PG.stats_from_maps(y[:, None], mask)
    n = y.shape[0]
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_boot)
    grams = PG.prompt_grams(st, D.build_design(mask, fit, landmark=landmark))
    return estimate_bootstrap(grams, counts, n_flips=n_flips, seed=seed)


def per_prompt(y, mask):
    return F.fit_leakage(np.where(mask, y, np.nan), mask=mask).delta  # (n, heads)


@pytest.mark.parametrize("fit", ["saturated+query", "linear+query"])
@pytest.mark.parametrize("landmark", [False, True])
@pytest.mark.parametrize("T", [9, 40])
def test_u_statistics_equal_the_explicit_sums_over_prompt_pairs(fit, landmark, T):
    rng = np.random.default_rng(1)
    n = 7
    window = "early6" if T < 20 else "all"
    mask = D.pair_mask(T, window=window) & (rng.random((T, T)) < 0.8)
    mask[:, 0] |= D.pair_mask(T, window=window)[:, 0]
    y = np.where(mask, rng.normal(size=(n, 1, 3, T, T)) + rng.normal(size=(T, T)), np.nan)
    g = PG.prompt_grams(PG.stats_from_maps(y, mask), D.build_design(mask, fit, landmark=landmark))
    pd, c, pf = dense_design(mask, fit, landmark)
    v = y[..., mask]
    gram = lambda a: np.einsum("pahx,xy,qahy->ahpq", v, a, v, optimize=True)  # noqa: E731
    scale = np.abs(gram(c)).max()
    np.testing.assert_allclose(g["num"], gram(pd), rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(g["low"], gram(c @ pf @ c), rtol=0, atol=1e-12 * scale)
    u = X.u_statistics(g, np.ones((1, n)))
    np.testing.assert_allclose(u["num"][0], offdiag(gram(pd)), rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(u["den"][0], offdiag(gram(c)), rtol=0, atol=1e-10 * scale)
    # ‖P_Δ S‖² from a least-squares fit of the sum map: N̂ + Σ_p ‖P_Δ y_p‖².
    s = v.sum(0)[0, 0]
    resid = lambda a: s - a @ np.linalg.lstsq(a, s, rcond=None)[0]  # noqa: E731
    i, j = np.nonzero(mask)
    xb = np.hstack(
        [np.eye(T)[i - j]]
        if fit.startswith("sat")
        else [np.ones((i.size, 1)), (i - j)[:, None] * 1.0]
    )
    if landmark:
        xb = np.hstack([xb, (j == 0)[:, None] * 1.0])
    dss = (resid(xb) ** 2).sum() - (resid(np.hstack([xb, np.eye(T)[i]])) ** 2).sum()
    assert u["num"][0, 0, 0] + np.trace(g["num"][0, 0]) == pytest.approx(dss, rel=1e-10)


def test_negative_control_reads_zero_where_the_per_prompt_reading_does_not():
    rng = np.random.default_rng(2)
    T, n, heads = 12, 48, 6
    mask = D.pair_mask(T)
    y, mu = content_maps(n, heads, T, rng, bos=True)
    est = headline(y, mask)
    assert exact_rho(mu, mask)[1] == pytest.approx(0.0, abs=1e-12)  # landmark in B: μ ∈ span(B)
    assert est["pooled_lo"] <= 0.0 <= est["pooled_hi"]
    assert abs(est["pooled"]) <= 0.01
    fit = F.fit_leakage(np.where(mask, y, np.nan), mask=mask)
    pp = fit.delta
    assert fit.excess.mean() > 0.25  # content read as position, far above the null mean
    boot = np.random.default_rng(0).integers(0, n, (500, n))
    assert np.quantile(pp[boot].mean((1, 2)), 0.025) > 0.25  # its CI excludes 0 by far


def test_fixed_bos_landmark_and_prompts_without_one():
    rng = np.random.default_rng(3)
    T, n, heads = 12, 64, 6
    mask = D.pair_mask(T)
    y, mu = content_maps(n, heads, T, rng, bos=True)
    # Without the key-0 column the fixed BOS reads as absolute position, exactly ρ(μ) > 0.
    rho = exact_rho(mu, mask, landmark=False)[1]
    est = headline(y, mask, landmark=False)
    assert rho > 0.02
    assert est["pooled_lo"] <= rho <= est["pooled_hi"] and est["pooled_lo"] > 0
    # Prompts with no fixed token 0 carry no landmark: both designs read 0.
    y, mu = content_maps(n, heads, T, rng, bos=False)
    for landmark in (False, True):
        assert exact_rho(mu, mask, landmark=landmark)[1] == pytest.approx(0.0, abs=1e-12)
        est = headline(y, mask, landmark=landmark)
        assert est["pooled_lo"] <= 0.0 <= est["pooled_hi"]


def test_positive_control_planted_bias_is_recovered_within_its_ci():
    rng = np.random.default_rng(4)
    T, n, heads = 12, 48, 6
    mask = D.pair_mask(T)
    planted = 1.5 * np.sqrt(np.arange(T) / T)[None, :] * rng.choice([-1, 1], (heads, 1))
    y, mu = content_maps(n, heads, T, rng, planted=planted)
    rho_h, rho = exact_rho(mu, mask)
    assert 0.05 < rho < 0.5
    est = headline(y, mask)
    assert est["pooled_lo"] <= rho <= est["pooled_hi"]
    assert est["pooled_lo"] > 0.02
    assert est["pooled_hi"] - est["pooled_lo"] < rho
    # Measured check of the denominator's residual part held at its mean: the CI with the exact
    # residual Gram (dense, per pair) has nearly the same width.
    _, c, pf = dense_design(mask, "saturated+query", True)
    v = y[:, None][..., mask]
    g = PG.prompt_grams(PG.stats_from_maps(y[:, None], mask), D.build_design(mask, landmark=True))
    full = np.einsum("pahx,xy,qahy->ahpq", v, c, v)
    boot = np.random.default_rng(0).multinomial(n, np.full(n, 1 / n), size=2000).astype(float)
    u = X.u_statistics(g, boot)
    approx = u["num"].sum((1, 2)) / u["den"].sum((1, 2))
    exact = u["num"].sum((1, 2)) / RP.quadratic_form(full, boot).sum((1, 2))
    width = lambda r: np.subtract(*np.quantile(r, [0.975, 0.025]))  # noqa: E731
    assert width(approx) == pytest.approx(width(exact), rel=0.2)
    assert est["resid_share"] < 0.9


def test_sign_flip_test_is_calibrated_on_null_heads_and_has_power():
    rng = np.random.default_rng(5)
    T, n, heads = 8, 24, 400
    mask = D.pair_mask(T)
    y, _ = content_maps(n, heads, T, rng)
    est = headline(y, mask, n_boot=10, n_flips=999)
    alpha = 0.05
    frac = (est["p"] <= alpha).mean()
    sd = np.sqrt(alpha * (1 - alpha) / heads)
    assert abs(frac - alpha) <= 3 * sd, frac
    assert (est["q"] <= alpha).mean() <= 0.02  # BH across heads: few or none on a null
    planted = 1.0 * np.linspace(-1, 1, T)[None, :] * np.ones((heads, 1))
    y, _ = content_maps(n, heads, T, rng, planted=planted)
    est = headline(y, mask, n_boot=10, n_flips=999)
    assert (est["q"] <= alpha).mean() >= 0.9


def test_verdict_flips_between_content_noise_and_a_planted_query_effect():
    rng = np.random.default_rng(6)
    T, n, heads = 12, 40, 4
    mask = D.pair_mask(T)
    noisy, _ = content_maps(n, heads, T, rng, row=2.0)
    planted = 1.0 * np.linspace(-1, 1, T)[None, :] * np.ones((heads, 1))
    quiet, _ = content_maps(n, heads, T, rng, row=0.2, noise=1.0, planted=planted)
    pp_noisy, pp_quiet = per_prompt(noisy, mask).mean(), per_prompt(quiet, mask).mean()
    e_noisy, e_quiet = headline(noisy, mask), headline(quiet, mask)
    assert pp_noisy > 2 * pp_quiet  # per prompt: the content-only maps "leak" more
    assert e_quiet["pooled_lo"] > e_noisy["pooled_hi"]  # headline: the planted effect does
    assert (e_quiet["q"] <= 0.05).all() and not (e_noisy["q"] <= 0.05).any()


def test_tiny_position_free_model_end_to_end(make_tiny):
    from causalpos.capture import hook as capture

    model, _ = make_tiny("llama")
    T, n = 16, 32
    vocab = model.config.vocab_size
    tok = np.random.default_rng(0).integers(3, vocab, (n, T))
    tok[:, 0] = model.config.bos_token_id
    ds = capture.capture_scores(
        model,
        tok,
        CaptureRun("identity_rope+bidirectional", 8, seed=0, progress=False),
        reducers=[
            R.LeakageReducer(fits=("saturated+query",), windows=("all",), expected_stats=True)
        ],
    )
    est = expected_leakage(ds, target="logit")
    sel = dict(leak_window="all", leak_fit="saturated+query", leak_target="logit")
    excess = (ds["leak_delta"].sel(**sel) - ds["leak_null"].sel(**sel)).mean(("layer", "head"))
    boot = np.random.default_rng(0).integers(0, n, (1000, n))
    pooled = float(est["exp_pooled"])
    print(
        "tiny position-free: headline",
        pooled,
        float(est["exp_pooled_lo"]),
        float(est["exp_pooled_hi"]),
        "per-prompt",
        float(ds["leak_delta"].sel(**sel).mean()),
        "excess",
        float(excess.mean()),
    )
    assert float(est["exp_pooled_lo"]) <= 0.0 <= float(est["exp_pooled_hi"]) or abs(pooled) <= 0.01
    # A random-weight model's expected map is nearly flat (D̂'s CI reaches 0, ρ̂'s CI is wide):
    # the companion in units of a prompt map's SST is ≈ 0 with a tight CI.
    print("sst units", [float(est[f"exp_pooled_sst{k}"]) for k in ("", "_lo", "_hi")])
    assert float(est["exp_pooled_sst_lo"]) <= 0.0 <= float(est["exp_pooled_sst_hi"])
    assert float(est["exp_pooled_sst_hi"]) - float(est["exp_pooled_sst_lo"]) < 0.01
    # The per-prompt reading fails the same control: above its own null, CI far from 0.
    assert np.quantile(excess.values[boot].mean(1), 0.025) > 0.02
    assert float(est["exp_significant"].mean()) <= 0.1


def test_estimate_with_multipliers_pools_by_level_and_pairs_runs():
    num, low, _ = simulate(32, amp_for(32, 3.0), 0)
    n = 32
    rng = np.random.default_rng(3)
    sst = rng.uniform(50, 60, size=(2, 3, n))
    grams = {
        "num": num[:6].reshape(2, 3, n, n),
        "low": low[:6].reshape(2, 3, n, n),
        "sst": sst,
        "sst_sum": np.full((2, 3), 0.0),
    }
    grams["sst_sum"] = (
        RP.quadratic_form(grams["low"], np.ones((1, n)))[0] + sst.sum(-1) + 5.0
    )  # a residual part of 5 per map
    xi = RP.rademacher(n, 300, seed=4)
    e = X.estimate(grams, xi)
    ref = I.calibrated_ratio(grams["num"].sum((0, 1)), grams["low"].sum((0, 1)), xi, 30.0)
    assert e["pooled"] == pytest.approx(ref["est"], rel=1e-12)
    assert np.allclose(e["pooled_boot"], ref["boot"])
    assert (e["pooled_lo"], e["pooled_hi"]) == pytest.approx(
        tuple(np.quantile(ref["boot"], [0.025, 0.975]))
    )
    head = I.calibrated_ratio(grams["num"], grams["low"], xi, 5.0)
    assert np.allclose(e["head"], head["est"]) and np.allclose(e["p"], head["p"])
    assert e["q"].shape == (2, 3) and np.all(e["q"] >= e["p"] - 1e-15)
    assert e["layer_boot"].shape == (300, 2) and e["pooled_num_boot"].shape == (300,)
    assert e["pooled_num"] == pytest.approx(ref["num"] / (n * (n - 1)))
    sel = np.array([[True, False, True], [False, False, True]])
    est, boot = X.pooled_subset(grams, sel, multipliers=xi)
    sub = I.calibrated_ratio(grams["num"][sel].sum(0), grams["low"][sel].sum(0), xi, 15.0)
    assert est == pytest.approx(sub["est"]) and np.allclose(boot, sub["boot"])
    with pytest.raises(ValueError, match=r"multipliers must have shape \(n_boot, 32\)"):
        X.estimate(grams, xi[:, :3])
    # the same multipliers pair two runs: a run against itself has replicates identical
    e2 = X.estimate(grams, xi)
    assert np.array_equal(e2["pooled_boot"], e["pooled_boot"])
