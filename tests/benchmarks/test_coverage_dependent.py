"""The dependent-text coverage simulation of ``benchmarks/coverage_dependent.py``: its
closed-form expected map against simulated means, its true ρ against an independent least-squares
fit and against the estimator's expectation on simulated prompts (the key-0 column's bias on
dependent text), and that the intervals it measures are the headline's own. The measured table:
benchmarks/results/coverage-2026-11-28.md."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import coverage_dependent as CD  # noqa: E402

pytestmark = pytest.mark.slow  # a simulation (≈ 5 CPU-s): the full suite runs it

from causalpos.paper2.estimator import expected as X  # noqa: E402
from causalpos.paper2.estimator import replicates as RP  # noqa: E402


@pytest.mark.parametrize("start", ["stationary", "bos"])
def test_the_simulations_expected_map_is_the_mean_of_its_maps(start):
    # the closed form (the chain's one- and two-position laws) against 20,000 simulated prompts
    w = CD.World(start=start)
    y = CD.sample_maps(w, np.random.default_rng(1), 100, 200, 0.0).reshape(
        -1, w.heads, CD.pairs(w.T)[0].size
    )
    z = (y.mean(0) - CD.expected_map(w)) / (y.std(0) / np.sqrt(y.shape[0]))
    assert np.abs(z).max() < 4.5  # 405 cells: P(max |z| > 4.5) < 0.3 % for unbiased means
    assert np.abs(z).mean() == pytest.approx(np.sqrt(2 / np.pi), rel=0.15)  # E|z| of N(0, 1)


def _rho_lstsq(world: CD.World, handling: str) -> float:
    """ρ of the expected map by least squares on explicit designs (no projector of the script)."""
    i, j = CD.pairs(world.T)
    off = np.eye(world.T)[i - j]
    key0 = {
        "landmark": (j == 0)[:, None] * 1.0,
        "key0_rows": np.eye(world.T)[i] * (j == 0)[:, None],
        "counted": np.zeros((i.size, 0)),
    }[handling]
    b = np.hstack([off, key0])
    f = np.hstack([b, np.eye(world.T)[i]])
    dss = sst = 0.0
    for mu in CD.expected_map(world):
        ssr = [np.sum((mu - x @ np.linalg.lstsq(x, mu, rcond=None)[0]) ** 2) for x in (b, f)]
        dss += ssr[0] - ssr[1]
        sst += np.sum((mu - mu.mean()) ** 2)
    return dss / sst


def test_the_key0_handlings_true_rho_on_position_free_text():
    """Closed form, a model without positional input: one key-0 column (the headline's) leaves
    ρ = 0 on iid tokens and on sticky tokens whose content is additive (the key-0 level is then
    constant), and ρ > 0 on sticky tokens with a token-token interaction, where key 0's excess
    over its offset's level moves with the query; key 0 modelled per row leaves 0 on stationary
    text; each value equal to an independent least-squares fit."""
    worlds = {k: w for k, (w, _) in CD.WORLDS.items()}
    for name in ("iid", "sticky-additive", "sticky"):
        b = CD.key0_bias(worlds[name])
        for h in CD.HANDLINGS:
            assert b[h] == pytest.approx(_rho_lstsq(worlds[name], h), rel=1e-8, abs=1e-12)
        assert abs(b["key0_rows"]) < 1e-12
        assert b["counted"] > 0.01  # a fixed BOS's key-0 level, counted as position
        assert (abs(b["landmark"]) < 1e-12) is (name != "sticky")
    assert CD.key0_bias(worlds["sticky"])["landmark"] > 1e-4
    # what the landmark leaves: the key-0 column's excess over its offset's level moves with i
    w = worlds["sticky"]
    mu = CD.expected_map(w)[0] / np.exp(w.scale_sd**2 / 2) - CD.tables(w)["r"][0]
    i, j = CD.pairs(w.T)
    excess = [mu[(j == 0) & (i == d)][0] - mu[(j == d - 1) & (i == 2 * d - 1)][0] for d in (1, 7)]
    assert excess[1] - excess[0] > 0.1
    # text whose law moves with the distance from BOS: a query effect under every handling
    assert min(CD.key0_bias(worlds["sticky-bos"]).values()) > 1e-4


def test_the_estimator_reads_the_key0_bias_its_closed_form_gives():
    # N̂ / (n(n − 1)) is unbiased for Σ_h ‖P_Δ μ_h‖² (and D̂ for Σ_h ‖C μ_h‖²): on 40 prompt sets of
    # 200 from the sticky world (no planted effect) its mean lies within 4 SE of the closed form,
    # and that closed form (the landmark's key-0 bias) lies more than 4 SE above 0
    w, h = CD.WORLDS["sticky"]
    rng, m = np.random.default_rng(2), 200
    g = CD.grams_for(CD.sample_maps(w, rng, 40, m, 0.0), w.T, h)
    num = RP.quadratic_form(g["num"].sum(1), np.ones((1, m)))[0] / (m * (m - 1))
    den = (g["sst_sum"] - g["sst"].sum(-1)).sum(-1) / (m * (m - 1))
    true_num, true_den = CD.truth(w, 0.0, h)
    for est, true in ((num, true_num), (den, true_den)):
        se = est.std(ddof=1) / np.sqrt(est.size)
        assert abs(est.mean() - true) < 4 * se
    assert true_num > 4 * num.std(ddof=1) / np.sqrt(num.size)


def test_the_intervals_are_the_headlines_pooled_reading():
    # one prompt set per layer (the script's batching) reads what the headline's call — estimate
    # per head, lean, pooled over the set's heads — reads of that set alone
    w, h = CD.WORLDS["sticky-bos"]
    n = 16
    g = CD.grams_for(CD.sample_maps(w, np.random.default_rng(3), 4, n, 0.3), w.T, h)
    xi = RP.rademacher(n, 500, seed=5)
    r = CD.intervals(g, xi)
    for s in range(4):
        one = X.estimate({k: v[s : s + 1] for k, v in g.items()}, xi, lean=True)
        got = [r["rho"][s], r["lo"][s], r["hi"][s]]
        np.testing.assert_allclose(got, [one["pooled"], one["pooled_lo"], one["pooled_hi"]], 1e-9)


def test_the_sign_flip_tests_size_on_dependent_text_with_a_fixed_bos():
    # ρ = 0 exactly (sticky tokens, additive content, the landmark): the one-sided sign-flip test
    # of N = 0 from the intervals' multipliers rejects at α = 0.05 within the two-sided 99 %
    # binomial band of 0.05 over the 1,000 prompt sets
    w, h = CD.WORLDS["sticky-additive"]
    sets = 1000
    m = CD.measure(CD.Setting(w, 32, 0.0, h, sets, 1000, seed=7))
    assert abs(m["rho"]) < 1e-12
    assert abs(m["reject"] - 0.05) <= 2.576 * np.sqrt(0.05 * 0.95 / sets)
