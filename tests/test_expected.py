"""The content-free leakage estimator (paper2.expected): exactness, controls, test calibration."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from causalpos.paper2 import design as D
from causalpos.paper2 import expected as X
from causalpos.paper2 import metric as M
from causalpos.paper2 import reducers as R


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


def exact_rho(mu, mask, fit="saturated+query", landmark=True):
    """ΔR² of the expected maps μ (heads, T, T): per head and pooled (Σ ΔSS / Σ SST)."""
    pd, c, _ = dense_design(mask, fit, landmark)
    v = mu[:, mask]
    num = np.einsum("hx,xy,hy->h", v, pd, v)
    den = np.einsum("hx,xy,hy->h", v, c, v)
    return num / den, num.sum() / den.sum()


def headline(y, mask, fit="saturated+query", landmark=True, **kw):
    """Estimate for maps y (n, heads, T, T): one layer."""
    st = X.stats_from_maps(y[:, None], mask)
    return X.estimate(X.prompt_grams(st, D.build_design(mask, fit, landmark=landmark)), **kw)


def per_prompt(y, mask):
    return M.fit_leakage(np.where(mask, y, np.nan), mask=mask).delta  # (n, heads)


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
    g = X.prompt_grams(X.stats_from_maps(y, mask), D.build_design(mask, fit, landmark=landmark))
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


@pytest.mark.parametrize("window", ["all", "early6", "late"])
def test_prompt_stats_are_the_metric_pair_sums(window):
    # stats_from_maps sums in numpy what metric.pair_sums sums in torch (the reducer's function)
    rng = np.random.default_rng(4)
    T, n = 13, 5
    mask = D.pair_mask(T, window=window) & (rng.random((T, T)) < 0.9)
    y = rng.normal(size=(n, 2, T, T)) + 3.0
    st = X.stats_from_maps(y, mask)
    w = torch.as_tensor(mask)
    ref = M.pair_sums(torch.as_tensor(y), w, int(mask.sum()))
    tot = M.pair_sums(torch.as_tensor(y.sum(0)), w, int(mask.sum()))
    want = {
        "off": ref["off"],
        "rows": ref["rows"],
        "key0": ref["cols"][..., 0],
        "sst": ref["Q"] - ref["S"] ** 2 / mask.sum(),
        "sst_sum": tot["Q"] - tot["S"] ** 2 / mask.sum(),
    }
    for k, v in want.items():
        np.testing.assert_allclose(getattr(st, k), v.numpy(), rtol=1e-12, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("fit", ["saturated+query", "linear+query"])
@pytest.mark.parametrize("window", ["all", "early6", "late", "full3"])
def test_grams_on_the_support_drop_only_zero_rows_and_columns(fit, window):
    # the support leaves out the query rows and offsets without a pair: their sums are exactly
    # 0 (and the design's rows and columns there 0 up to the pseudo-inverse's rounding), so the
    # Grams are the whole design's up to the order of the additions
    rng = np.random.default_rng(5)
    T, n = 16, 6
    mask = D.pair_mask(T, window=window) & (rng.random((T, T)) < 0.7)
    mask[:, 0] = D.pair_mask(T, window=window)[:, 0]
    design = D.build_design(mask, fit, landmark=True)
    sub, rows_at, offs_at = X.support(design)
    kept_rows = np.zeros(T, bool)
    kept_rows[rows_at] = True
    assert np.array_equal(kept_rows, mask.any(1))
    assert not design.b[~kept_rows].any()  # G_ZX's rows of 0: exactly
    assert np.abs(design.m_pinv[~kept_rows]).max(initial=0) <= 1e-12
    y = np.where(mask, rng.normal(size=(n, 3, T, T)) + rng.normal(size=(T, T)), np.nan)
    st = X.stats_from_maps(y, mask)
    assert not st.rows[..., ~kept_rows].any()
    if offs_at is not None:
        gone = np.ones(T, bool)
        gone[np.arange(T)[offs_at]] = False
        assert np.array_equal(~gone, design.n_offset > 0)
        assert not st.off[..., gone].any()
        assert np.abs(design.gx_pinv[:T][gone]).max(initial=0) <= 1e-12
    g = X.prompt_grams(st, design)
    # the whole design, by the formula of metric.c_vector on every row and column
    off, rows = np.moveaxis(st.off, 0, -2), np.moveaxis(st.rows, 0, -2)
    u = off if fit.startswith("sat") else np.stack([off.sum(-1), off @ np.arange(T)], -1)
    u = np.concatenate([u, np.moveaxis(st.key0, 0, -1)[..., None]], -1)
    c = rows - u @ design.b.T
    s = off.sum(-1)
    num = c @ design.m_pinv @ np.swapaxes(c, -1, -2)
    low = u @ design.gx_pinv @ np.swapaxes(u, -1, -2) - s[..., :, None] * s[..., None, :] / (
        design.n_pairs
    )
    scale = np.abs(g["low"]).max()
    np.testing.assert_allclose(g["num"], num, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(g["low"], low + num, rtol=0, atol=1e-12 * scale)
    assert np.array_equal(X.numerator_grams(st, design), g["num"])


def test_negative_control_reads_zero_where_the_per_prompt_reading_does_not():
    rng = np.random.default_rng(2)
    T, n, heads = 12, 48, 6
    mask = D.pair_mask(T)
    y, mu = content_maps(n, heads, T, rng, bos=True)
    est = headline(y, mask)
    assert exact_rho(mu, mask)[1] == pytest.approx(0.0, abs=1e-12)  # landmark in B: μ ∈ span(B)
    assert est["pooled_lo"] <= 0.0 <= est["pooled_hi"]
    assert abs(est["pooled"]) <= 0.01
    fit = M.fit_leakage(np.where(mask, y, np.nan), mask=mask)
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
    g = X.prompt_grams(X.stats_from_maps(y[:, None], mask), D.build_design(mask, landmark=True))
    full = np.einsum("pahx,xy,qahy->ahpq", v, c, v)
    boot = np.random.default_rng(0).multinomial(n, np.full(n, 1 / n), size=2000).astype(float)
    u = X.u_statistics(g, boot)
    approx = u["num"].sum((1, 2)) / u["den"].sum((1, 2))
    exact = u["num"].sum((1, 2)) / X._offdiag(full, boot).sum((1, 2))
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


def test_full_window_rows_remove_the_sliding_window_mask_artifact():
    T, W = 16, 3
    i, j = np.indices((T, T))
    s = np.where(np.abs(i - j) <= W, 0.3 * np.cos(0.7 * (i - j)) + 0.1 * (i - j), np.nan)
    a = M.log_attention(s)  # bidirectional window: Z_i sums fewer keys near both ends
    lower = np.where(j <= i, a, np.nan)
    assert M.fit_leakage(lower).delta > 0.1
    assert D.query_window(f"full{W}", T) == (W, T - W)
    assert abs(M.fit_leakage(lower, window=f"full{W}").delta) < 1e-12
    causal = M.log_attention(np.where((j <= i) & (i - j < W), s, np.nan))
    assert abs(M.fit_leakage(causal, window=f"full{W}").delta) < 1e-12


def reducer_scores(n, heads, T, seed, window=None):
    rng = np.random.default_rng(seed)
    y, _ = content_maps(n, heads, T, rng, planted=0.2 * rng.normal(size=(heads, T)))
    i, j = np.indices((T, T))
    allowed = np.ones((T, T), bool) if window is None else np.abs(i - j) <= window
    return torch.tensor(np.where(allowed, y, np.nan), dtype=torch.float32)


def test_store_estimate_through_the_reducer_equals_the_maps_and_merges_exactly():
    T, heads, n = 12, 3, 10
    windows = ("all", "early6", "full2")
    layers = [reducer_scores(n, heads, T, 7), reducer_scores(n, heads, T, 8, window=4)]
    kw = dict(
        fits=("saturated+query",), windows=windows, pair_subsample=6, seed=3, expected_stats=True
    )
    one = R.LeakageReducer(**kw)
    shards = [R.LeakageReducer(**kw), R.LeakageReducer(**kw)]
    for lay, s in enumerate(layers):
        one.update(lay, s, np.arange(n))
        shards[0].update(lay, s[6:], np.arange(6, n))
        shards[1].update(lay, s[:6], np.arange(6))
    ds = one.result()
    merged = R.LeakageReducer.merge([shards[0].result(), shards[1].result()])
    for k in ("leak_offsum", "leak_key0sum", "leak_rowsum"):
        np.testing.assert_array_equal(merged[k].values, ds[k].values)
    for window in windows:
        for target in ("logit", "logattn"):
            got = X.expected_leakage(merged, window=window, target=target, n_boot=200)
            for lay, s in enumerate(layers):
                y = s.double().numpy()
                if target == "logattn":
                    y = M.log_attention(y)
                allowed = np.isfinite(y[0, 0]) & np.tril(np.ones((T, T), bool))
                mask = X.window_pairs(allowed, window, 6, 3)
                d = D.build_design(mask, landmark=True)
                g = X.prompt_grams(X.stats_from_maps(y, mask), d)
                u = X.u_statistics(g, np.ones((1, n)))
                want = u["num"][0] / u["den"][0]
                # the store keeps the per-prompt sums in float32 (u = 6e-8): relative error of
                # the ratio a few u (4e-8 seen), far below any difference of estimators
                np.testing.assert_allclose(
                    got["exp_delta"].sel(layer=lay).values, want, rtol=1e-6, atol=1e-9
                )
    # All windows and targets at once; a float32 map sum (the final store's dtype) moves the
    # headline by less than its stated rounding bound.
    table = X.expected_table(merged, n_boot=50)
    assert table["exp_pooled"].dims == ("exp_window", "exp_target")
    again = X.expected_leakage(merged, window="early6", target="logattn", n_boot=50)
    assert float(table["exp_pooled"].sel(exp_window="early6", exp_target="logattn")) == float(
        again["exp_pooled"]
    )
    f32 = X.expected_table(merged.assign(leak_map_sum=merged["leak_map_sum"].astype("float32")))
    rel = np.abs(f32["exp_pooled"] / table["exp_pooled"] - 1)
    assert (rel <= 2 * f32["exp_den_rounding"]).all() and (f32["exp_den_rounding"] < 1e-5).all()
    assert merged["leak_offsum"].dtype == np.float32
    with pytest.raises(ValueError, match="expected_stats=True"):
        X.expected_leakage(ds.drop_vars("leak_rowsum"))
    # A window subset keeps the sums of those windows only, and the estimate is the same.
    sub = R.LeakageReducer(**dict(kw, expected_stats=["early6"]))
    for lay, s in enumerate(layers):
        sub.update(lay, s, np.arange(n))
    part = sub.result()
    assert list(part["leak_exp_window"].values) == ["early6"]
    np.testing.assert_array_equal(
        part["leak_offsum"].sel(leak_exp_window="early6").values,
        ds["leak_offsum"].sel(leak_exp_window="early6").values,
    )
    with pytest.raises(ValueError, match="expected-map windows"):
        X.expected_leakage(part, window="all")
    with pytest.raises(ValueError, match="not among the reducer's windows"):
        R.LeakageReducer(**dict(kw, expected_stats=["late"]))


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
        variant="identity_rope+bidirectional",
        batch_size=8,
        seed=0,
        progress=False,
        reducers=[
            R.LeakageReducer(fits=("saturated+query",), windows=("all",), expected_stats=True)
        ],
    )
    est = X.expected_leakage(ds, target="logit")
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
