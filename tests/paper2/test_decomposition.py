"""Paper 2 §3 in one unit (paper2.decomposition): the artefact-free residual-stream reading, the
edge artefact, components that add exactly."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos.paper2 import decomposition as DC
from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import pairgrams as PG
from causalpos.paper2.extraction.design import build_design, pair_mask

T = 20


def masks(kind: str, w: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """(forward pass allowed keys, ablation pass allowed keys), (T, T) bool."""
    i, j = np.indices((T, T))
    if kind == "causal":
        return j <= i, np.ones((T, T), dtype=bool)
    if kind == "full":  # no mask at all in either pass
        return np.ones((T, T), dtype=bool), np.ones((T, T), dtype=bool)
    if kind == "sliding_window":  # the window is kept in the ablation (paper2.md §2)
        return (j <= i) & (i - j < w), np.abs(i - j) < w
    raise ValueError(kind)


def log_softmax(s, allowed):
    return DC.log_softmax_rows(s, allowed)


def relative_maps(n: int, rng, same: bool = False) -> np.ndarray:
    """(n, 2, T, T): per prompt and head, logits f_p(i − j) (a random profile per prompt)."""
    d = np.subtract.outer(np.arange(T), np.arange(T)) + T - 1
    prof = rng.normal(size=(1 if same else n, 2, 2 * T - 1))
    prof = np.broadcast_to(prof, (n, 2, 2 * T - 1))
    return prof[..., d]


def components(nums: dict, den, artefact=None) -> dict:
    """Every component and share from the numerators N (per-pair U-statistics of each map, any
    common shape) and the causal run's per-pair D̂: the summary's combination
    (``DC.COMBINATIONS``, ``DC.shares``) on plain numbers; a component whose numerators are
    missing is NaN."""
    d = np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {
            name: DC.combine(nums, co) / d
            if all(k in nums for k in co)
            else np.full(d.shape, np.nan)
            for name, co in DC.COMBINATIONS.items()
        }
        art = np.full(d.shape, np.nan) if artefact is None else np.asarray(artefact) / d
    out["artefact"] = np.broadcast_to(art, out["total"].shape).copy()
    return out | DC.shares(out)


def per_pair(g: np.ndarray) -> np.ndarray:
    """Σ_{p≠q} G_pq / (n(n − 1)) of Grams (..., n, n)."""
    n = g.shape[-1]
    return (g.sum((-2, -1)) - np.trace(g, axis1=-2, axis2=-1)) / (n * (n - 1))


def decompose_maps(s_c, s_b, fwd, abl, *, landmark=True, window="all", s_r=None):
    """Every component, pooled over heads, from per-prompt logit maps of the causal pass, paper
    2's ablation (``s_b``, its softmax over ``abl``) and the ring (``s_r``, default ``s_b``)."""
    s_r = s_b if s_r is None else s_r
    mask = pair_mask(T, window=window, allowed=fwd)
    design = build_design(mask, "saturated+query", landmark=landmark)
    a_c, a_b = log_softmax(s_c, fwd), log_softmax(s_b, abl)
    st = {
        k: PG.stats_from_maps(np.where(mask, y, 0.0), mask)
        for k, y in (("c_la", a_c), ("c_s", s_c), ("b_s", s_b), ("b_la", a_b), ("r_s", s_r))
    }
    nums = {
        "c_logattn": per_pair(PG.numerator_grams(st["c_la"], design)).sum(),
        "c_logit": per_pair(PG.numerator_grams(st["c_s"], design)).sum(),
        "c_logz": per_pair(
            PG.numerator_grams(PG.difference_stats(st["c_la"], st["c_s"]), design)
        ).sum(),
        "r_logit": per_pair(PG.numerator_grams(st["r_s"], design)).sum(),
        # the difference map's own statistics (not the library's difference_stats)
        "d_logit": per_pair(
            PG.numerator_grams(PG.stats_from_maps(np.where(mask, s_c - s_r, 0.0), mask), design)
        ).sum(),
        "b_logit": per_pair(PG.numerator_grams(st["b_s"], design)).sum(),
        "b_logattn": per_pair(PG.numerator_grams(st["b_la"], design)).sum(),
    }
    g = PG.prompt_grams(st["c_la"], design)
    n = s_c.shape[0]
    u = X.u_statistics(g, np.ones((1, n)))
    den = float(u["den"][0].sum()) / (n * (n - 1))
    art = DC.artefact_of(DC.relative_logattn(s_b.mean(0), abl), mask, design).sum()
    return components(nums, np.float64(den), art)


def test_log_softmax_rows_is_torchs_over_the_allowed_keys():
    # numpy's log-softmax over each row's allowed keys: torch.log_softmax's values
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    T = 11
    allowed = pair_mask(T) | np.eye(T, dtype=bool)
    allowed[0, 0] = True
    s = rng.normal(size=(3, T, T)) * 4 + 20.0
    got = DC.log_softmax_rows(s, allowed)
    t = torch.log_softmax(torch.as_tensor(np.where(allowed, s, -np.inf)), dim=-1).numpy()
    np.testing.assert_allclose(got[:, allowed], t[:, allowed], rtol=1e-14, atol=1e-14)
    assert np.isnan(got[:, ~allowed]).all()
    assert np.allclose(np.exp(got[:, allowed.any(1)]).sum(-1, where=allowed[allowed.any(1)]), 1.0)


@pytest.mark.parametrize("kind", ["causal", "sliding_window"])
@pytest.mark.parametrize("landmark", [True, False])
def test_exactly_relative_logits_have_no_residual_stream_component(kind, landmark):
    """f_p(i − j) logits (a different profile per prompt): the residual-stream component is 0
    under the ablation's bidirectional or sliding-window mask, the causal run's logit term and
    remainder are 0, and only the causal mask's own normalisation adds position."""
    rng = np.random.default_rng(0)
    s = relative_maps(8, rng)
    fwd, abl = masks(kind)
    c = decompose_maps(s, s, fwd, abl, landmark=landmark)
    scale = c["total"]
    assert scale > 1e-3  # the causal softmax's normaliser: position from the mask itself
    for k in ("residual_stream", "logit", "remainder", "cross"):
        assert abs(c[k]) <= 1e-10 * scale, (k, c[k])
    assert c["normaliser"] == pytest.approx(c["total"], rel=1e-10)
    assert c["causal_mask"] == pytest.approx(c["total"], rel=1e-10)
    assert c["share_causal_mask"] == pytest.approx(1.0, abs=1e-10)
    # the paper's reading (ablation log-attention) is not 0: the softmax's edge artefact
    assert c["residual_stream_paper"] > 1e-6 * scale  # far above rounding (1e-10)


def test_bidirectional_run_alone_relative_logits_read_zero():
    """Under a bidirectional forward pass too (no causal mask anywhere), relative logits give a
    residual-stream component of exactly 0."""
    rng = np.random.default_rng(1)
    s = relative_maps(6, rng)
    full = np.ones((T, T), dtype=bool)
    c = decompose_maps(s, s, full, full)
    assert abs(c["residual_stream"]) <= 1e-10 * abs(c["residual_stream_paper"])
    assert c["residual_stream_paper"] > 0


@pytest.mark.parametrize("kind", ["causal", "sliding_window"])
def test_artefact_equals_the_paper_reading_on_relative_maps(kind):
    """With the same relative logits in every prompt, the paper's residual reading is exactly the
    artefact measured from the Toeplitz projection of the expected logits."""
    s = relative_maps(5, np.random.default_rng(2), same=True)
    fwd, abl = masks(kind)
    c = decompose_maps(s, s, fwd, abl)
    assert c["residual_stream_paper"] > 0
    assert c["artefact"] == pytest.approx(c["residual_stream_paper"], rel=1e-9)
    assert c["share_artefact"] == pytest.approx(1.0, rel=1e-9)


def test_components_add_exactly_on_maps_with_absolute_position():
    """Logits with a query-position term in both passes: total = residual_stream + normaliser +
    remainder and total = logit + normaliser + cross exactly; the residual-stream component equals
    the ΔSS of the planted term computed independently (a dense least-squares projection)."""
    rng = np.random.default_rng(3)
    n = 6
    s = relative_maps(n, rng)
    i = np.arange(T, dtype=np.float64)
    b = 0.8 * np.log1p(i)
    s_abs = s + b[None, None, :, None]
    fwd, abl = masks("causal")
    c = decompose_maps(s_abs, s_abs, fwd, abl)
    assert c["total"] == pytest.approx(c["residual_stream"] + c["normaliser"] + c["remainder"])
    assert c["total"] == pytest.approx(c["logit"] + c["normaliser"] + c["cross"])
    assert c["causal_mask"] == pytest.approx(c["normaliser"] + c["remainder"])
    # independent: ΔSS of the query term b over the measured pairs by dense least squares
    mask = pair_mask(T, allowed=fwd)
    ii, jj = np.nonzero(mask)
    off = ii - jj
    y = b[ii]
    col0 = (jj == 0).astype(float)[:, None]
    xb = np.concatenate([np.eye(T)[off], col0], 1)
    xf = np.concatenate([xb, np.eye(T)[ii]], 1)
    res = lambda x: y - x @ np.linalg.lstsq(x, y, rcond=None)[0]  # noqa: E731
    dss = float(res(xb) @ res(xb) - res(xf) @ res(xf))
    a_c = log_softmax(s_abs, fwd)
    design = build_design(mask, "saturated+query", landmark=True)
    g = PG.prompt_grams(PG.stats_from_maps(np.where(mask, a_c, 0.0), mask), design)
    den = float(X.u_statistics(g, np.ones((1, n)))["den"][0].sum()) / (n * (n - 1))
    assert c["residual_stream"] == pytest.approx(2 * dss / den, rel=1e-8)  # two heads


def test_the_reading_on_log_attention_would_fail_the_relative_map_test():
    """The test above fails on a wrong reading: feed the ablation's log-attention (the paper's
    reading) where its logits belong and relative maps read > 0."""
    rng = np.random.default_rng(4)
    s = relative_maps(6, rng, same=True)
    fwd, abl = masks("causal")
    a_b = log_softmax(s, abl)
    wrong = decompose_maps(s, np.where(abl, a_b, np.nan), fwd, abl)
    assert wrong["residual_stream"] > 1e-3 * wrong["total"]


def test_toeplitz_projection_is_exact_on_relative_maps_and_means_each_offset():
    rng = np.random.default_rng(5)
    s = relative_maps(1, rng)[0]
    allowed = np.abs(np.subtract.outer(np.arange(T), np.arange(T))) < 7
    np.testing.assert_allclose(DC.toeplitz(s, allowed)[:, allowed], s[:, allowed])
    assert np.isnan(DC.toeplitz(s, allowed)[:, ~allowed]).all()
    m = rng.normal(size=(T, T))
    tp = DC.toeplitz(m, allowed)
    for d in (-5, 0, 3):
        sel = (np.subtract.outer(np.arange(T), np.arange(T)) == d) & allowed
        np.testing.assert_allclose(tp[sel], m[sel].mean())


def test_edge_position_is_the_bidirectional_pass_beyond_the_ring():
    """Paper 2's ablation carries position its sequence ends create (here a term in each row's
    distance to the nearer end, the same in every prompt); the ring's logits (relative) do not:
    the headline residual-stream component is 0, ``edge_position`` is that term's ΔSS, and
    ``residual_stream_bidirectional`` = residual_stream + edge_position exactly."""
    rng = np.random.default_rng(7)
    n = 6
    ring = relative_maps(n, rng)
    i = np.arange(T, dtype=np.float64)
    edge = 0.5 * np.exp(-np.minimum(i, T - 1 - i) / 3.0)  # rows near either end
    bidir = ring + edge[None, None, :, None]
    fwd, abl = masks("causal")
    c = decompose_maps(ring, bidir, fwd, abl, s_r=ring)
    assert abs(c["residual_stream"]) <= 1e-10 * c["total"]
    assert c["edge_position"] > 1e-3 * c["total"]
    assert c["residual_stream_bidirectional"] == pytest.approx(
        c["residual_stream"] + c["edge_position"], rel=1e-10
    )
    assert c["share_edge"] == pytest.approx(1.0, rel=1e-9)
    # the edge term itself, read as the ring's (the test would fail on the bidirectional logits)
    wrong = decompose_maps(ring, bidir, fwd, abl, s_r=bidir)
    assert wrong["residual_stream"] > 1e-3 * wrong["total"]


def test_a_missing_run_leaves_its_components_nan_and_the_others_exact():
    rng = np.random.default_rng(8)
    s = relative_maps(6, rng)
    fwd, abl = masks("causal")
    full = decompose_maps(s, s, fwd, abl)
    nums = {"c_logattn": 1.0, "c_logit": 0.2, "c_logz": 0.7, "r_logit": 0.1}
    c = components(nums, np.float64(2.0))
    assert c["total"] == 0.5 and c["residual_stream"] == 0.05 and c["causal_mask"] == 0.45
    for k in ("residual_stream_paper", "residual_stream_bidirectional", "edge_position"):
        assert np.isnan(c[k]), k
    assert np.isfinite(full["edge_position"])


def relative_noise(n: int, rng, scale: float = 0.3) -> np.ndarray:
    """(n, 2, T, T) per-prompt noise that is itself relative: a fresh random profile of the
    offset per prompt and head."""
    return scale * relative_maps(n, rng)


@pytest.mark.parametrize("kind", ["causal", "sliding_window", "full"])
@pytest.mark.parametrize("landmark", [True, False])
def test_exactly_relative_logits_read_zero_on_the_indirect_and_mask_free_routes(kind, landmark):
    """Causal and ring logits both exactly relative, f(i − j) + g_p(i − j) with relative noise
    (different maps in the two runs): the indirect route, its own part and its cross term and the
    mask-free route read 0 under every mask; the direct route is the whole total."""
    rng = np.random.default_rng(10)
    n = 8
    s_c = relative_maps(1, rng).repeat(n, 0) + relative_noise(n, rng)
    s_r = relative_maps(1, rng).repeat(n, 0) + relative_noise(n, rng)
    fwd, abl = masks(kind)
    c = decompose_maps(s_c, s_r, fwd, abl, landmark=landmark, s_r=s_r)
    scale = max(c["total"], c["indirect_own"], 1e-3)
    for k in ("indirect_mask", "indirect_own", "indirect_cross", "mask_free", "share_mask_free"):
        assert abs(c[k]) <= 1e-10 * scale, (k, c[k])
    assert c["direct_mask"] == pytest.approx(c["total"], rel=1e-10, abs=1e-12)
    assert c["direct_mask"] == pytest.approx(c["normaliser"] + c["direct_cross"], abs=1e-12)
    # every softmax here normalises row i over offsets that depend on i (a full pass: i − T + 1
    # … i, the edge artefact), so the direct route is > 0 under every mask
    assert c["total"] > 1e-3
    assert c["share_causal_mask_mechanism"] == pytest.approx(1.0, abs=1e-9)


def test_the_three_routes_and_their_cross_terms_add_up_to_the_total():
    """Causal logits with a query term b, ring logits with part of it (c_b b, c_b < 1) and a
    different relative profile: total = mask_free + indirect + direct exactly; each route equals
    its own part plus its cross term; the indirect route's own part is the ΔSS of the planted
    difference (1 − c_b) b by dense least squares; the two mappings' shares read as defined."""
    rng = np.random.default_rng(12)
    n = 6
    i = np.arange(T, dtype=np.float64)
    b = 0.8 * np.log1p(i)
    s_c = relative_maps(n, rng) + b[None, None, :, None]
    s_r = relative_maps(n, rng) + 0.4 * b[None, None, :, None]
    fwd, abl = masks("causal")
    c = decompose_maps(s_c, s_c, fwd, abl, s_r=s_r)
    assert c["total"] == pytest.approx(c["mask_free"] + c["indirect_mask"] + c["direct_mask"])
    assert c["direct_mask"] == pytest.approx(c["normaliser"] + c["direct_cross"])
    assert c["indirect_mask"] == pytest.approx(c["indirect_own"] + c["indirect_cross"])
    assert c["mask_free"] > 1e-3 * c["total"] and c["indirect_own"] > 1e-3 * c["total"]
    # independent: the difference map's position is (1 − 0.4) b on the measured pairs, so its
    # own part is 0.6² × the planted term's ΔSS, and the cross term 2 × 0.6 × 0.4 × it
    mask = pair_mask(T, allowed=fwd)
    ii, jj = np.nonzero(mask)
    y = b[ii]
    xb = np.concatenate([np.eye(T)[ii - jj], (jj == 0).astype(float)[:, None]], 1)
    xf = np.concatenate([xb, np.eye(T)[ii]], 1)
    res = lambda x: y - x @ np.linalg.lstsq(x, y, rcond=None)[0]  # noqa: E731
    dss = 2 * float(res(xb) @ res(xb) - res(xf) @ res(xf))  # two heads
    u = c["mask_free"] / (0.16 * dss)  # the unit: the causal run's D̂
    assert c["indirect_own"] == pytest.approx(0.36 * dss * u, rel=1e-6)
    assert c["indirect_cross"] == pytest.approx(2 * 0.24 * dss * u, rel=1e-6)
    # the mappings: ablation = direct + indirect, mechanism = direct alone
    assert c["share_causal_mask_ablation"] == pytest.approx(1 - c["share_mask_free"])
    assert c["share_causal_mask_ablation"] == pytest.approx(c["share_causal_mask"])
    assert c["share_causal_mask_mechanism"] == pytest.approx(c["direct_mask"] / c["total"])
    assert c["logit"] == pytest.approx(c["indirect_mask"] + c["mask_free"])
    assert c["causal_mask"] == pytest.approx(c["direct_mask"] + c["indirect_mask"])
