"""Closed forms of paper 1 §3 against the paper's Fig. 1 and an exact float64 computation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from causalpos.paper1 import theory as T
from causalpos.paper1.settings import SimulationSettings

ALPHAS = (0.0, 0.1, 0.2, 0.5, 0.8, 0.95)


def one_layer(x: np.ndarray, residual: bool = True) -> np.ndarray:
    """Eq. 1 once, written out independently of the module: (n, d) -> (n, d)."""
    y = x / np.linalg.norm(x, axis=1, keepdims=True)
    n = len(x)
    s = y @ y.T
    s[np.triu_indices(n, 1)] = -np.inf
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p @ y + x if residual else p @ y


def test_fig1_values_to_three_decimals():
    # S(2,1) and S(3,1) round to the printed values. S(3,2) = 0.15082 (the exact computation agrees
    # to 1e-16) rounds to 0.151; Fig. 1 prints 0.150 - a discrepancy of the paper, kept visible here.
    m = T.layer2_matrix(3, 0.0)
    assert np.round(m[[1, 2, 2], [0, 0, 1]], 3).tolist() == [0.154, 0.132, 0.151]
    assert T.layer2_score(3, 2, 0.0) == pytest.approx(0.150818, abs=1e-6)
    for (i, j), printed in T.FIG1_VALUES.items():
        assert abs(float(T.layer2_score(i, j, 0.0)) - printed) < 1e-3


def test_layer2_matrix_shape_mask_and_diagonal():
    m = T.layer2_matrix(7, 0.3)
    assert m.shape == (7, 7)
    assert np.all(np.isnan(m[np.triu_indices(7, 1)]))
    assert np.array_equal(np.diag(m), np.ones(7))
    assert np.all(np.isfinite(m[np.tril_indices(7)]))


def test_layer1_weights_sum_to_one_and_match_softmax():
    for alpha in ALPHAS:
        i = np.arange(1, 30)
        diag, off = T.layer1_weights(i, alpha)
        np.testing.assert_allclose(diag + (i - 1) * off, 1.0, rtol=0, atol=1e-15)
        x = T.equicorrelated_vectors(29, alpha)
        s = x @ x.T
        row = np.exp(s[10, :11]) / np.exp(s[10, :11]).sum()
        np.testing.assert_allclose(row[:10], off[10], rtol=1e-13)
        np.testing.assert_allclose(row[10], diag[10], rtol=1e-13)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_g_and_h_match_exact_layer1_outputs(alpha):
    n = 40
    x1 = one_layer(T.equicorrelated_vectors(n, alpha))
    gram = x1 @ x1.T
    i = np.arange(1, n + 1)
    np.testing.assert_allclose(np.diag(gram), T.h2(i, alpha), rtol=1e-13)
    for q in range(1, n):  # every key j < i gives the same inner product g(i)
        np.testing.assert_allclose(gram[q, :q], T.g(q + 1, alpha), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_noresidual_g_and_h_match_exact_layer1_outputs(alpha):
    n = 40
    x1 = one_layer(T.equicorrelated_vectors(n, alpha), residual=False)
    gram = x1 @ x1.T
    i = np.arange(1, n + 1)
    np.testing.assert_allclose(np.diag(gram), T.h2_noresidual(i, alpha), rtol=1e-13)
    for q in range(1, n):
        np.testing.assert_allclose(
            gram[q, :q], T.g_noresidual(q + 1, alpha), rtol=1e-12, atol=1e-14
        )


def test_layer1_output_formula():
    # x_i^(1) = [(2e + (i-1)e^a) x_i + sum_{k<i} e^a x_k] / (e + (i-1)e^a)  (§3)
    alpha, n = 0.4, 9
    x = T.equicorrelated_vectors(n, alpha)
    ea = math.exp(alpha)
    expect = np.stack(
        [((2 * math.e + i * ea) * x[i] + ea * x[:i].sum(0)) / (math.e + i * ea) for i in range(n)]
    )
    np.testing.assert_allclose(one_layer(x), expect, rtol=0, atol=1e-14)


def test_residual_g_is_twice_alpha_plus_twice_noresidual_g():
    # <x_i + a_i, x_j + a_j> = alpha + <x_i, a_j> + <a_i, x_j> + <a_i, a_j> = 2 alpha + 2 g'(i)
    i = np.arange(1, 200)
    for alpha in ALPHAS:
        np.testing.assert_allclose(
            T.g(i, alpha), 2 * alpha + 2 * T.g_noresidual(i, alpha), rtol=1e-14
        )


@pytest.mark.parametrize("alpha", ALPHAS + (1.0,))
@pytest.mark.parametrize("n", [3, 17, 50])
@pytest.mark.parametrize("residual", [True, False])
def test_exact_gram_equals_closed_form(alpha, n, residual):
    exact = T.exact_gram_layer2(n, alpha, residual=residual)
    closed = T.layer2_matrix(n, alpha, residual=residual)
    assert np.array_equal(np.isnan(exact), np.isnan(closed))
    assert np.nanmax(np.abs(exact - closed)) < 1e-12


def test_exact_gram_padded_dimension_is_the_same():
    a = T.exact_gram_layer2(12, 0.3)
    b = T.exact_gram_layer2(12, 0.3, dim=40)
    assert np.nanmax(np.abs(a - b)) < 1e-14


def test_equicorrelated_vectors_gram():
    for alpha in ALPHAS + (1.0,):
        x = T.equicorrelated_vectors(20, alpha)
        expect = (1 - alpha) * np.eye(20) + alpha
        assert np.abs(x @ x.T - expect).max() < 1e-14
    with pytest.raises(ValueError, match="dim must be >= n"):
        T.equicorrelated_vectors(5, 0.2, dim=4)


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 0.9])
def test_layer2_strictly_increasing_in_key(alpha):
    n = 50
    for m in (T.layer2_matrix(n, alpha), T.exact_gram_layer2(n, alpha)):
        step = np.diff(m, axis=1)
        finite = np.isfinite(step)
        assert finite.sum() == n * (n - 1) // 2
        assert np.all(step[finite] > 0)


def test_h_strictly_decreasing_with_and_without_residual():
    i = np.arange(1, 500)
    for alpha in np.linspace(0.0, 0.99, 23):
        assert np.all(np.diff(T.h(i, alpha)) < 0)
        assert np.all(np.diff(T.h_noresidual(i, alpha)) < 0)


def test_h_at_first_position():
    # row 1 attends only to itself: x_1^(1) = 2 x_1 (residual), x_1 (no residual)
    for alpha in ALPHAS:
        assert T.h(1, alpha) == pytest.approx(2.0, abs=1e-15)
        assert T.h_noresidual(1, alpha) == pytest.approx(1.0, abs=1e-15)


def test_eq1_scores_layer1_is_cosines_and_bidirectional_is_symmetric():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 5))
    s = T.eq1_scores(x, 3, causal=False)
    assert s.shape == (2, 3, 6, 6)
    y = x / np.linalg.norm(x, axis=-1, keepdims=True)
    np.testing.assert_allclose(s[:, 0], y @ np.swapaxes(y, -1, -2), atol=1e-15)
    np.testing.assert_allclose(s, np.swapaxes(s, -1, -2), atol=1e-15)


def test_exact_limit_monotonicity_holds_at_layer2_and_fails_late_at_layers3_4():
    # Finding of the reproduction (paper1.md §2): at alpha = 0, d -> infinity, layer 2 is
    # strictly increasing in j, layers 3 and 4 are not for late queries, by < 1e-3.
    s = T.exact_gram_scores(50, 0.0, 4)
    v = T.monotonicity_violations(s)
    assert v[1].sum() == 0 and np.nanmin(np.diff(s[1], axis=1)) > 1e-5
    for layer in (2, 3):
        rows = np.flatnonzero(v[layer].any(axis=1))
        assert rows.size > 0 and rows.min() + 1 >= 27  # 1-indexed query
        assert np.nanmin(np.diff(s[layer], axis=1)) > -1e-3


def test_monotonicity_violations_flags_exactly_the_decreasing_steps():
    m = np.array([[1.0, np.nan, np.nan], [0.2, 1.0, np.nan], [0.5, 0.4, 1.0]])
    v = T.monotonicity_violations(m)
    assert v.tolist() == [[False, False], [False, False], [True, False]]


def test_invalid_inputs_raise():
    with pytest.raises(ValueError, match="alpha"):
        T.g(2, 1.5)
    with pytest.raises(ValueError, match="1-indexed"):
        T.layer2_score(0, 0, 0.0)


def test_theory_table_without_simulation():
    tab = T.theory_table(None, n=10, alphas=[0.0, 0.5])
    assert len(tab) == 2 * 45
    assert list(tab.columns[:4]) == ["alpha", "layer", "query", "key"]
    assert (tab["query"] > tab["key"]).all() and (tab["key"] >= 1).all()
    assert tab["exact_diff"].max() < 1e-12
    assert tab["simulation"].isna().all()
    paper = tab.dropna(subset=["paper_value"])
    assert sorted(zip(paper["query"], paper["key"])) == [(2, 1), (3, 1), (3, 2)]
    np.testing.assert_allclose(paper["closed_form"], paper["paper_value"], atol=1e-3)
    row = tab[(tab.alpha == 0.5) & (tab["query"] == 7) & (tab["key"] == 3)].iloc[0]
    assert row["closed_form"] == pytest.approx(float(T.layer2_score(7, 3, 0.5)), abs=1e-15)


def test_theory_table_with_simulation():
    from causalpos.paper1.simulate import run_simulation

    ds = run_simulation(
        SimulationSettings(
            alpha=0.2, n_samples=256, seq_len=6, dim=32, n_layers=2, seed=0, n_groups=8
        )
    )
    tab = T.theory_table({0.2: ds}, n=8)
    assert (tab["alpha"] == 0.2).all() and len(tab) == 28
    inside = tab[tab["query"] <= 6]
    outside = tab[tab["query"] > 6]
    assert outside["simulation"].isna().all() and inside["simulation"].notna().all()
    s = ds["score"].values[1]
    np.testing.assert_array_equal(inside["simulation"], s[inside["query"] - 1, inside["key"] - 1])
    g = ds["score_group"].values[:, 1].astype(np.float64)
    se = g.std(0, ddof=1) / np.sqrt(8)
    np.testing.assert_allclose(
        inside["simulation_se"], se[inside["query"] - 1, inside["key"] - 1], rtol=1e-12
    )
    np.testing.assert_allclose(
        inside["abs_diff"], np.abs(inside["simulation"] - inside["closed_form"]), rtol=1e-15
    )

    rope = ds.copy()
    rope.attrs = {**ds.attrs, "rope": True}
    with pytest.raises(ValueError, match="RoPE"):
        T.theory_table({0.2: rope}, n=8)
