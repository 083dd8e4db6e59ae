"""Content-free leakage: the ΔR² of the expected (prompt-mean) map, by U-statistics over prompts.

**Quantity.** Prompts p = 1..n are iid draws; a map is y_p = μ + ε_p over the measured pairs of
one (layer, head, window, target), with μ the expected map and ε_p the prompt's content. With C
the centring projector on the measured pairs and P_Δ = P_F − P_B the extra projector of the fit
(:mod:`causalpos.paper2.metric`), the headline is ρ = ‖P_Δ μ‖² / ‖C μ‖², the ΔR² of μ.

**Estimator (decision).** For any fixed A, E[y_pᵀ A y_q] = μᵀ A μ when p ≠ q (independence),
while E[y_pᵀ A y_p] = μᵀ A μ + tr(A Σ). The per-prompt reading carries tr(P_Δ Σ) / tr(C Σ): a row
i shares its query token, so the content covariance Σ has row blocks that the query effects
absorb, and the per-prompt ΔR² is large for a model with no positional input at all. The
U-statistics over distinct prompt pairs

    N̂ = Σ_{p≠q} y_pᵀ P_Δ y_q = ‖P_Δ S‖² − Σ_p ‖P_Δ y_p‖²,
    D̂ = Σ_{p≠q} y_pᵀ C y_q  = ‖C S‖²  − Σ_p ‖C y_p‖²        (S = Σ_p y_p)

are unbiased for n(n−1)‖P_Δ μ‖² and n(n−1)‖C μ‖²; the headline ρ̂ = N̂ / D̂ is consistent with
bias O(1/n) (delta method; no content term at any n). Pooled over heads (per layer, or over
all layers and heads) the estimate is Σ N̂ / Σ D̂, the share of the expected maps' summed variance
that absolute position explains — never a mean of per-head ratios, which explode where a head's
expected map is nearly constant (D̂ → 0). A cross-fitted split-half estimate has the same
expectation but uses only n²/2 of the n(n − 1) pairs.

**Per-prompt sufficient statistics.** By FWL, y_pᵀ P_Δ y_q = c_pᵀ M⁺ c_q with c_p = Zᵀy_p −
G_ZX G_X⁺ Xᵀy_p, and ⟨P_B y_p, P_B y_q⟩ = u_pᵀ G_X⁺ u_q with u_p = Xᵀy_p. For the query fits
both come from the map's per-offset, per-query-row and key-0 sums (the reducer's
``leak_offsum``, ``leak_rowsum``, ``leak_key0sum``: O(T) per map). The Gram

    ⟨C y_p, C y_q⟩ = ⟨C P_F y_p, C P_F y_q⟩ + ⟨R y_p, R y_q⟩,   R = I − P_F

is exact in its first (low-rank) part for every pair; the residual part is known on the diagonal
(‖C y_p‖² = SST_p, ``leak_sst``) and in total (‖C S‖², the SST of ``leak_map_sum``), not per pair.

**Resampling (decision).** Headline CIs: calibrated multiplier intervals over prompts
(:mod:`causalpos.paper2.inference`; ``estimate(..., multipliers=)``): near 0 the U-statistic is
degenerate and the percentile bootstrap below overstates its spread. The percentile bootstrap
(``counts``) stays for readings paired with per-prompt means. A resample with
multiplicities m_p keeps only pairs of distinct prompts, N*(m) = Σ_{p≠q} m_p m_q y_pᵀ P_Δ y_q
(copies of one prompt would bring the content term back). N* and the low-rank part of D* are
exact. The residual part of D* is held at its per-pair mean, D̂_R · Σ_{p≠q} m_p m_q / (n(n−1)):
its pair-resolved terms need ⟨y_p, S⟩, which no one-pass statistic of O(T) per prompt gives
(S is known only after the last prompt; K group-sum maps would cost K × 71 MB at the default
scale). What this drops is the variance of ⟨R ε_p, R μ⟩, the prompts' covariance with the part
of the expected map the two-way model leaves; :func:`expected_leakage` reports D̂_R / D̂
(``exp_resid_share``) and the tests measure the CI against one with the exact residual Gram.
Where N̂ ≈ 0 (the negative control) the denominator's spread enters only at second order.

**Conditioning (companion).** ρ is a ratio of the expected map's variances; where the expected map
is nearly flat (a random-weight model without positional input) D̂ is within its noise of 0 and ρ̂
with its CI is uninformative (a CI covering 0 then says nothing). The companion
ρ_SST = ‖P_Δ μ‖² / E‖C y_p‖² — the expected map's absolute-position variance in units of one
prompt map's variance, N̂/(n(n − 1)) over the mean SST_p — has an exactly resampled, well
conditioned denominator, and is ≤ ρ·‖Cμ‖²/E‖Cy_p‖². Report both; judge "≈ 0" on ρ_SST where D̂'s
CI reaches 0.

**Landmark (decision).** With a fixed token 0 (BOS) and a model without positional input
(permutation-equivariant forward pass, iid tokens at positions 1..T−1), exchangeability of those
positions gives E y_ij = b (i ≠ j ≥ 1), E y_ii = c, E y_i0 = a: μ = b + (c − b)[i = j] +
(a − b)[j = 0]. The first two terms are offset levels; the key-0 column is not in the span of
offsets and query effects, so such a run reads ρ > 0 (0.15 measured on SmolLM2). The headline
therefore models the key-0 column in both B and F (``landmark=True``: one indicator column,
:func:`causalpos.paper2.metric.build_design`), which puts μ of every position-free run in the span
of B: ρ = 0 by construction, with or without a fixed token 0. It removes only a key-0 level
shared by all queries; attention to key 0 that varies with the query position (sinks read
differently by position) stays in ΔSS. In a causal run that shared key-0 level has two sources,
the fixed token and position 0's closed causal dynamics (the residual-stream route): with the
landmark the headline counts neither, i.e. it measures query-position structure only, and the
key-0 level is the sink readings' business. Without it (``landmark=False``) a constant key-0 level
leaks into the query effects only through the design's non-orthogonality (pair (i, 0) sits at
offset i), which is why that reading is kept as a second column, not the headline. Prompts
without a fixed token 0 carry no landmark at all
(μ = b + (c − b)[i = j]), a second negative control that reads 0 with ``landmark=False`` too.

**Sliding window (decision).** A bidirectional pass keeps a symmetric window, so the visible-key
count depends on i near both ends and a uniform map already has query effects on log-attention.
Windowed models are read on the query window ``"full<W>"`` (rows W ≤ i < T − W,
:func:`causalpos.paper2.design.query_window`), whose rows all see a full window in the causal and
the bidirectional pass; normalising by the count would instead keep a row-dependent pair set.

**Per-head test (decision).** Under H0: P_Δ μ = 0 the per-prompt vectors c_p have mean 0. The
sign-flip test (with ``multipliers``: the same draws as the intervals) compares N̂ = 1ᵀG1 − tr G (G_pq = c_pᵀ M⁺ c_q) with εᵀGε − tr G over random signs ε:
exact when the c_p are symmetric about 0, asymptotically valid for mean-zero iid c_p. Resampling
prompts, not cells, keeps the row-shared content inside each unit. Benjamini–Hochberg runs across
(layer, head).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from causalpos import stats
from causalpos.paper2 import inference as inf
from causalpos.paper2.design import Design, build_design, pair_mask, parse_fit, query_window
from causalpos.paper2.pairgrams import (  # noqa: F401 (re-exported: the estimator's inputs)
    PromptStats,
    numerator_grams,
    prompt_grams,
    stats_from_maps,
    support,
)
from causalpos.paper2.storeview import store_view


def _offdiag(g: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Σ_{p≠q} m_p m_q g_pq for weights m (B, n) and Grams g (..., n, n) -> (B, ...)."""
    return inf.quadratic_form(g, m)


def u_statistics(grams: dict[str, np.ndarray], weights: np.ndarray) -> dict[str, np.ndarray]:
    """N*(m), D*(m) (B, ...) for prompt multiplicities ``weights`` (B, n); m = 1 gives N̂, D̂.

    D*(m) = low-rank part (exact) + D̂_R · Σ_{p≠q} m_p m_q / (n(n − 1)) (residual part at its
    per-pair mean; see the module docstring).
    """
    m = np.asarray(weights, dtype=np.float64)
    n = m.shape[-1]
    ones = np.ones((1, n))
    d_full = grams["sst_sum"] - grams["sst"].sum(-1)
    d_low1 = _offdiag(grams["low"], ones)[0]
    d_r = d_full - d_low1
    pairs = m.sum(-1) ** 2 - (m * m).sum(-1)  # (B,)
    extra = (1,) * d_r.ndim
    den = _offdiag(grams["low"], m) + d_r * (pairs / (n * (n - 1))).reshape((-1,) + extra)
    sst = np.einsum("bp,...p->b...", m, grams["sst"]) / m.sum(-1).reshape((-1,) + extra)
    return {
        "num": _offdiag(grams["num"], m),
        "den": den,
        "den_resid": d_r,
        "pairs": pairs,
        "sst": sst,
    }


def sign_flip_pvalues(num_gram: np.ndarray, n_flips: int = 2000, seed: int = 0) -> np.ndarray:
    """Per-map p-values of H0: P_Δ μ = 0 by random sign flips of the prompts' c-vectors.

    Statistic N̂ = Σ_{p≠q} c_pᵀM⁺c_q; p = (1 + #{flips with N(ε) ≥ N̂}) / (1 + n_flips).
    """
    n = num_gram.shape[-1]
    eps = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_flips, n))
    obs = _offdiag(num_gram, np.ones((1, n)))[0]
    flips = _offdiag(num_gram, eps)
    return (1.0 + (flips >= obs - 1e-12 * np.abs(obs)).sum(0)) / (1.0 + n_flips)


def estimate(
    grams: dict[str, np.ndarray],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    n_flips: int = 2000,
    counts: np.ndarray | None = None,
    multipliers: np.ndarray | None = None,
    lean: bool = False,
    heads: bool = True,
) -> dict[str, np.ndarray]:
    """Headline ΔR² of the expected maps of ``grams`` with leading (layer, head): per head, per
    layer (Σ over heads) and pooled (Σ over all), each with a CI over prompts, and per-head
    sign-flip p-values with BH q-values across (layer, head). ``*_sst`` keys: the companion
    ρ_SST (module docstring), with the same draws. ``*_boot`` (B, ...): the ratio's replicates;
    ``*_num_boot``, ``*_den_boot``: N and D per prompt pair (layer and pooled levels).

    ``multipliers`` (B, n) (:func:`causalpos.paper2.inference.rademacher`, shared by every run
    of the prompt set): calibrated intervals (:func:`_estimate_calibrated`); the replicates are
    reflected (their percentile interval is the calibrated one) and ``p`` uses the same draws
    (``n_flips`` unused), and ``num_parts_layer`` holds the numerator Grams' linear parts per
    layer (:func:`causalpos.paper2.inference.linear_parts`, (B, layer) each: what a
    combination of Grams reuses). Otherwise the percentile bootstrap with prompt multiplicities
    ``counts`` (B, n) (default ``n_boot`` multinomial draws) and sign flips of their own.
    ``lean`` (multipliers only): ρ_SST pooled only, and no per-head ``*_boot``, ``*_num_boot``,
    ``*_den_boot`` (what :class:`causalpos.paper2.grams.GramCache`'s readers never take).
    ``heads`` False (multipliers only): no per-head reading (no ``head*``, ``p``, ``q``), and the
    linear parts of each layer come from the layer's own Gram (:func:`_estimate_calibrated`)."""
    n = grams["sst"].shape[-1]
    if n < 3:
        raise ValueError(f"the expected-map estimator needs at least 3 prompts, got {n}")
    if multipliers is not None:
        if counts is not None:
            raise ValueError(
                "estimate: pass counts (percentile bootstrap) or multipliers, not both"
            )
        xi = np.asarray(multipliers, dtype=np.float64)
        return _estimate_calibrated(grams, xi, level, lean=lean, heads=heads)
    if counts is None:
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)
    weights = np.concatenate([np.ones((1, n)), np.asarray(counts, dtype=np.float64)])
    u = u_statistics(grams, weights)
    num, den = u["num"], u["den"]  # (1 + B, layer, head)
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
    out = {}
    for name, (a, b) in {
        "head": (num, den),
        "layer": (num.sum(-1), den.sum(-1)),
        "pooled": (num.sum((-2, -1)), den.sum((-2, -1))),
    }.items():
        r = inf.ratio(a, b)
        out[f"{name}_boot"] = r[1:]
        pairs = u["pairs"].reshape((-1,) + (1,) * (a.ndim - 1))
        out[f"{name}_num_boot"], out[f"{name}_den_boot"] = a[1:] / pairs[1:], b[1:] / pairs[1:]
        out[f"{name}_num"], out[f"{name}_den"], out[name] = (
            a[0] / (n * (n - 1)),
            b[0] / (n * (n - 1)),
            r[0],
        )
        out[f"{name}_lo"], out[f"{name}_hi"] = np.quantile(r[1:], [lo_q, hi_q], axis=0)
        a_sst, b_sst = {"head": (num, u["sst"]), "layer": (num.sum(-1), u["sst"].sum(-1))}.get(
            name, (num.sum((-2, -1)), u["sst"].sum((-2, -1)))
        )
        r_sst = inf.ratio(a_sst / pairs, b_sst)
        out[f"{name}_sst"] = r_sst[0]
        out[f"{name}_sst_lo"], out[f"{name}_sst_hi"] = np.quantile(r_sst[1:], [lo_q, hi_q], axis=0)
    p = sign_flip_pvalues(grams["num"], n_flips, seed + 1)
    out["p"], out["q"] = p, stats.benjamini_hochberg(p)
    out["resid_share"] = u["den_resid"].sum() / den[0].sum()
    return out


def _levels(grams: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """The Grams and the residual part of D̂ per head, per layer (Σ heads) and pooled (Σ all)."""
    n = grams["sst"].shape[-1]
    d_full = grams["sst_sum"] - grams["sst"].sum(-1)
    d_r = d_full - _offdiag(grams["low"], np.ones((1, n)))[0]
    num, low = np.asarray(grams["num"]), np.asarray(grams["low"])
    sst = np.asarray(grams["sst"])
    return {
        "head": {"num": num, "low": low, "d_r": d_r, "sst": sst},
        "layer": {"num": num.sum(1), "low": low.sum(1), "d_r": d_r.sum(-1), "sst": sst.sum(1)},
        "pooled": {
            "num": num.sum((0, 1)),
            "low": low.sum((0, 1)),
            "d_r": d_r.sum((-2, -1)),
            "sst": sst.sum((0, 1)),
        },
    }


def _estimate_calibrated(
    grams: dict[str, np.ndarray],
    xi: np.ndarray,
    level: float,
    *,
    lean: bool = False,
    heads: bool = True,
) -> dict[str, np.ndarray]:
    """:func:`estimate` with the calibrated multiplier intervals of
    :mod:`causalpos.paper2.inference`: each level's N and D from its own summed Grams (the
    variance calibration is not additive over maps), the residual part of D̂ held fixed.
    ``heads`` False: the layers and the pooled reading only."""
    n = grams["sst"].shape[-1]
    if xi.ndim != 2 or xi.shape[1] != n:
        raise ValueError(f"multipliers must have shape (n_boot, {n}), got {xi.shape}")
    pairs = float(n * (n - 1))
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
    out = {}
    levels = _levels(grams)
    # The replicates' products with the multipliers once, per head; a layer's and the pooled
    # Gram's are their sums (inference.linear_parts). Without the per-head reading, once per
    # layer (the layer's Gram: a B × n² product per layer instead of per head)
    if heads:
        head = {k: inf.linear_parts(grams[k], xi) for k in ("num", "low")}
        parts = {
            "head": head,
            "layer": {k: inf.sum_parts(v, 1) for k, v in head.items()},
            "pooled": {k: inf.sum_parts(v, (0, 1)) for k, v in head.items()},
        }
    else:
        del levels["head"]
        layer = {k: inf.linear_parts(levels["layer"][k], xi) for k in ("num", "low")}
        parts = {"layer": layer, "pooled": {k: inf.sum_parts(v, 0) for k, v in layer.items()}}
    out["num_parts_layer"] = parts["layer"]["num"]
    for name, g in levels.items():
        lp = parts[name]
        r = inf.calibrated_ratio(g["num"], g["low"], xi, g["d_r"], level, (lp["num"], lp["low"]))
        out[name], out[f"{name}_boot"] = r["est"], r["boot"]
        out[f"{name}_num"], out[f"{name}_den"] = r["num"] / pairs, r["den"] / pairs
        out[f"{name}_lo"], out[f"{name}_hi"] = np.quantile(r["boot"], [lo_q, hi_q], axis=0)
        if name == "head":
            out["p"] = r["p"]
        if lean and name == "head":
            del out["head_boot"]  # its interval is what a lean reader takes
            continue
        out[f"{name}_num_boot"], out[f"{name}_den_boot"] = (
            r["num_boot"] / pairs,
            r["den_boot"] / pairs,
        )
        if lean and name != "pooled":
            continue
        # ρ_SST: N per pair over the mean SST_p (a mean: its multiplier replicates, reflected)
        m_sst = g["sst"].mean(-1)
        dev = (g["sst"] - m_sst[..., None]).reshape(-1, n)
        s_b = 2 * m_sst - (m_sst + (xi @ dev.T).reshape(xi.shape[:1] + m_sst.shape) / n)
        out[f"{name}_sst"] = inf.ratio(r["num"] / pairs, m_sst)
        r_sst = inf.ratio(r["num_boot"] / pairs, s_b)
        out[f"{name}_sst_lo"], out[f"{name}_sst_hi"] = np.quantile(r_sst, [lo_q, hi_q], axis=0)
    if heads:
        out["q"] = stats.benjamini_hochberg(out["p"])
    out["resid_share"] = _levels_resid_share(grams)
    return out


def _levels_resid_share(grams: dict[str, np.ndarray]) -> float:
    u = u_statistics(grams, np.ones((1, grams["sst"].shape[-1])))
    return float(u["den_resid"].sum() / u["den"][0].sum())


def pooled_subset(
    grams: dict[str, np.ndarray],
    select: np.ndarray,
    counts: np.ndarray | None = None,
    *,
    multipliers: np.ndarray | None = None,
    level: float = 0.95,
) -> tuple[float, np.ndarray]:
    """The pooled ratio Σ N̂ / Σ D̂ over the maps ``select`` ((layer, head) bool) only, and its
    replicates: under the bootstrap ``counts`` (B, n), or calibrated and reflected under the
    ``multipliers`` (B, n) (:func:`estimate`): the headline of a subset of heads (e.g. the sink
    heads), paired with every other reading drawn with the same draws."""
    if (counts is None) == (multipliers is None):
        raise ValueError("pooled_subset: pass exactly one of counts and multipliers")
    select = np.asarray(select, dtype=bool)
    n_b = len(counts if counts is not None else multipliers)
    if not select.any():
        return np.nan, np.full(n_b, np.nan)
    sub = {k: np.asarray(v)[select] for k, v in grams.items()}
    n = sub["sst"].shape[-1]
    if multipliers is not None:
        d_r = sub["sst_sum"] - sub["sst"].sum(-1) - _offdiag(sub["low"], np.ones((1, n)))[0]
        r = inf.calibrated_ratio(
            sub["num"].sum(0), sub["low"].sum(0), multipliers, d_r.sum(), level
        )
        return float(r["est"]), r["boot"]
    weights = np.concatenate([np.ones((1, n)), np.asarray(counts, dtype=np.float64)])
    u = u_statistics(sub, weights)
    r = inf.ratio(u["num"].sum(-1), u["den"].sum(-1))
    return float(r[0]), r[1:]


def window_pairs(
    allowed: np.ndarray, window: str, pair_subsample: int | None = None, seed: int = 0
) -> np.ndarray:
    """The reducer's measured pairs of ``window``: lower triangle without row 0, ∧ the model's
    allowed pairs ((T, T) bool) ∧ its stratified pair subsample, on the window's query rows."""
    T = allowed.shape[-1]
    sub = None
    if pair_subsample is not None:
        sub = stats.stratified_pair_mask(T, pair_subsample, seed) & allowed
    return pair_mask(T, window=window, allowed=allowed, subsample=sub)


def store_stats(ds: xr.Dataset, layer, window: str, target: str, mask: np.ndarray) -> PromptStats:
    """:class:`PromptStats` of one layer (maps: heads) from a leakage store's variables
    (``ds`` a Dataset or its :func:`~causalpos.paper2.storeview.store_view`)."""
    v = store_view(ds)
    sel = dict(layer=layer, leak_target=target)
    lo, hi = query_window(window, mask.shape[0])
    rows = v.get("leak_rowsum", **sel).copy()  # (sequence, head, query)
    rows[..., :lo] = 0.0
    rows[..., hi:] = 0.0
    sel_e = dict(sel, leak_exp_window=window)
    msum = v.get("leak_map_sum", **sel)[:, mask]  # (head, pair)
    return PromptStats(
        off=v.get("leak_offsum", **sel_e).astype(np.float64),  # (sequence, head, offset)
        rows=rows.astype(np.float64),
        key0=v.get("leak_key0sum", **sel_e).astype(np.float64),  # (sequence, head)
        sst=v.get("leak_sst", **sel, leak_window=window).astype(np.float64),
        sst_sum=((msum - msum.mean(-1, keepdims=True)) ** 2).sum(-1),
    )


def store_masks(ds: xr.Dataset, window: str, target: str) -> dict:
    """Layer -> the measured pairs ((T, T) bool) of ``window`` in a leakage store: the allowed pairs
    of its summed maps ∧ the reducer's pair subsample (``leak_pair_subsample``, ``leak_seed``)."""
    missing = [
        k for k in ("leak_offsum", "leak_key0sum", "leak_rowsum", "leak_map_sum") if k not in ds
    ]
    if missing:
        raise ValueError(
            f"the store lacks {missing}: run extraction with LeakageReducer(expected_stats=True, "
            "mean_maps=True)"
        )
    if window not in ds["leak_exp_window"].values:
        raise ValueError(
            f"window {window!r} is not among the store's expected-map windows "
            f"{list(ds['leak_exp_window'].values)} (LeakageReducer(expected_stats=[...]))"
        )
    attrs = ds["leak_delta"].attrs
    sub = int(attrs.get("leak_pair_subsample", ds.attrs.get("leak_pair_subsample", -1)))
    seed_pairs = int(attrs.get("leak_seed", ds.attrs.get("leak_seed", 0)))
    out = {}
    v = store_view(ds)
    for layer in ds["layer"].values:
        msum = v.get("leak_map_sum", layer=layer, leak_target=target)  # (head, T, T)
        allowed = np.isfinite(msum).all(0) & np.tril(np.ones(msum.shape[-2:], dtype=bool))
        out[layer] = window_pairs(allowed, window, None if sub < 0 else sub, seed_pairs)
    return out


def store_grams(
    ds: xr.Dataset,
    *,
    window: str = "all",
    target: str = "logit",
    fit: str = "saturated+query",
    landmark: bool = True,
    plant: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], float]:
    """:func:`prompt_grams` of every layer of a leakage store (leading axes (layer, head)) and a
    bound on the rounding of ‖C S‖² from the summed maps' precision (3u‖S‖²). ``plant`` (T,): a
    query effect b added to every map (:func:`plant_query_effect`)."""
    parse_fit(fit)
    masks = store_masks(ds, window, target)
    per_layer = []
    unit = np.finfo(ds["leak_map_sum"].dtype).eps / 2  # a float32 store rounds the map sums
    rounding = 0.0
    designs: dict[bytes, Design] = {}  # layers usually share one pair mask
    v = store_view(ds)
    for layer, mask in masks.items():
        msum = v.get("leak_map_sum", layer=layer, leak_target=target)
        rounding += 3 * unit * float((msum[:, mask].astype(np.float64) ** 2).sum())
        key = np.packbits(mask).tobytes()
        if key not in designs:
            designs[key] = build_design(mask, fit, landmark=landmark)
        design = designs[key]
        st = store_stats(v, layer, window, target, mask)
        if plant is not None:
            st = plant_query_effect(st, mask, plant)
        per_layer.append(prompt_grams(st, design))
    return {k: np.stack([g[k] for g in per_layer]) for k in per_layer[0]}, rounding


def plant_query_effect(st: PromptStats, mask: np.ndarray, b: np.ndarray) -> PromptStats:
    """The statistics of the maps y_p + b (b_i added to every measured pair of query row i, the
    same b for every prompt and map): exact, by linearity of the sums, with
    ‖C(y + b)‖² = ‖Cy‖² + 2⟨y, Cb⟩ + ‖Cb‖² and ⟨y, Cb⟩ = Σ_i rows_i (b_i − b̄) (b̄ the pair-mean
    of b; the sums' centring constant cancels). The positive control: a planted absolute-position
    effect of known size."""
    b = np.asarray(b, dtype=np.float64)
    T = mask.shape[0]
    if b.shape != (T,):
        raise ValueError(f"plant: b must have shape ({T},), got {b.shape}")
    bmap = np.where(mask, b[:, None], 0.0)
    ps = stats_from_maps(bmap[None], mask)
    n_i = mask.sum(1).astype(np.float64)
    bc = b - (n_i * b).sum() / n_i.sum()
    cross = (st.rows * bc).sum(-1)  # (n, ...) ⟨y_p, Cb⟩
    cb2 = float((n_i * bc**2).sum())
    n = st.sst.shape[0]
    return PromptStats(
        off=st.off + ps.off[0],
        rows=st.rows + ps.rows[0],
        key0=st.key0 + ps.key0[0],
        sst=st.sst + 2 * cross + cb2,
        sst_sum=st.sst_sum + 2 * n * cross.sum(0) + n * n * cb2,
    )


def expected_leakage(
    ds: xr.Dataset,
    *,
    window: str = "all",
    target: str = "logit",
    fit: str = "saturated+query",
    landmark: bool = True,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    alpha: float = 0.05,
) -> xr.Dataset:
    """Headline leakage (ΔR² of the expected map) of one window and target of a leakage store.

    Needs the reducer's ``leak_offsum``, ``leak_key0sum``, ``leak_rowsum``, ``leak_sst`` and
    ``leak_map_sum`` (``LeakageReducer(expected_stats=True, mean_maps=True)``), and its attrs
    ``leak_pair_subsample``, ``leak_seed`` for the measured pairs.

    Returns ``exp_delta``/``exp_lo``/``exp_hi``/``exp_num``/``exp_den``/``exp_p``/``exp_q``/
    ``exp_significant`` (layer, head); ``exp_layer*`` (layer); ``exp_pooled*`` (); and
    ``exp_resid_share`` (), the share of D̂ whose resampling is held at its mean;
    ``exp_den_rounding`` (), a bound on the relative error of the pooled D̂ from the precision of
    ``leak_map_sum`` (the final store keeps maps in float32: ‖C S‖² is then good to ≈ 3u‖S‖²). exp_num and
    exp_den are per prompt pair (N̂, D̂ / (n(n − 1))). ``*_sst``, ``*_sst_lo``, ``*_sst_hi``: the
    companion ρ_SST = N̂/(n(n − 1)) / mean SST_p and its CI (module docstring).
    """
    grams, rounding = store_grams(ds, window=window, target=target, fit=fit, landmark=landmark)
    r = estimate(grams, n_boot=n_boot, seed=seed, level=level)
    lh, lay = ("layer", "head"), ("layer",)
    data = {
        f"exp_{k}": (lh, r[f"head_{k}"])
        for k in ("num", "den", "lo", "hi", "sst", "sst_lo", "sst_hi")
    }
    data["exp_delta"] = (lh, r["head"])
    data.update({f"exp_{k}": (lh, r[k]) for k in ("p", "q")})
    data["exp_significant"] = (lh, r["q"] <= alpha)
    data["exp_layer"] = (lay, r["layer"])
    keys = ("lo", "hi", "num", "den", "sst", "sst_lo", "sst_hi")
    data.update({f"exp_layer_{k}": (lay, r[f"layer_{k}"]) for k in keys})
    data["exp_pooled"] = ((), r["pooled"])
    data.update({f"exp_pooled_{k}": ((), r[f"pooled_{k}"]) for k in keys})
    data["exp_resid_share"] = ((), r["resid_share"])
    n = int(ds.sizes["sequence"])
    data["exp_den_rounding"] = ((), rounding / abs(r["pooled_den"] * n * (n - 1)))
    return xr.Dataset(
        data,
        coords={"layer": ds["layer"].values, "head": ds["head"].values},
        attrs={
            "exp_window": window,
            "exp_target": target,
            "exp_fit": fit,
            "exp_landmark": int(landmark),
            "exp_n_prompts": int(ds.sizes["sequence"]),
            "exp_n_boot": n_boot,
            "exp_level": level,
            "exp_alpha": alpha,
            "exp_note": "headline: U-statistic ratio sum_{p!=q} y_p'P_D y_q / sum_{p!=q} y_p'C y_q "
            "(delta R2 of the expected map); CI: percentile bootstrap over prompts; p: sign flips "
            "of the prompts' c-vectors; q: BH across (layer, head)",
        },
    )


def expected_table(
    ds: xr.Dataset, *, windows=None, targets=("logit", "logattn"), **kw
) -> xr.Dataset:
    """:func:`expected_leakage` for every window (default: the store's) and target, stacked on
    ``exp_window`` and ``exp_target`` (keyword arguments pass through)."""
    windows = list(ds["leak_exp_window"].values) if windows is None else list(windows)
    rows = [
        xr.concat(
            [expected_leakage(ds, window=w, target=t, **kw) for t in targets], dim="exp_target"
        )
        for w in windows
    ]
    out = xr.concat(rows, dim="exp_window", combine_attrs="drop_conflicts")
    for k in ("exp_window", "exp_target"):
        out.attrs.pop(k, None)
    return out.assign_coords(exp_window=windows, exp_target=list(targets))
