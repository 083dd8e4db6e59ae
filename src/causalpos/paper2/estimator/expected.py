"""Content-free leakage: the ΔR² of the expected (prompt-mean) map, by U-statistics over prompts.

**Quantity.** Prompts p = 1..n are iid; a map is y_p = μ + ε_p over the measured pairs of one
(layer, head, window, target), μ the expected map, ε_p the prompt's content. With C the centring
projector on the measured pairs and P_Δ = P_F − P_B the fit's extra projector
(:mod:`causalpos.paper2.extraction.metric`), the headline is ρ = ‖P_Δ μ‖² / ‖C μ‖².

**Estimator (decision).** E[y_pᵀ A y_q] = μᵀ A μ for p ≠ q, but μᵀ A μ + tr(A Σ) for p = q: a row
shares its query token, so Σ has row blocks the query effects absorb, and the per-prompt ΔR² is
large for a model with no positional input at all. The U-statistics over distinct prompt pairs

    N̂ = Σ_{p≠q} y_pᵀ P_Δ y_q = ‖P_Δ S‖² − Σ_p ‖P_Δ y_p‖²,
    D̂ = Σ_{p≠q} y_pᵀ C y_q  = ‖C S‖²  − Σ_p ‖C y_p‖²        (S = Σ_p y_p)

are unbiased for n(n−1)‖P_Δ μ‖² and n(n−1)‖C μ‖²; ρ̂ = N̂ / D̂ has bias O(1/n) and no content
term. Pooled over heads (or layers) it is Σ N̂ / Σ D̂, never a mean of per-head ratios (they
explode where D̂ → 0). A cross-fitted split half uses only n²/2 of the n(n − 1) pairs.

**Per-prompt sufficient statistics.** By FWL, y_pᵀ P_Δ y_q = c_pᵀ M⁺ c_q with c_p = Zᵀy_p −
G_ZX G_X⁺ Xᵀy_p, and ⟨P_B y_p, P_B y_q⟩ = u_pᵀ G_X⁺ u_q with u_p = Xᵀy_p; for the query fits both
come from the per-offset, per-row and key-0 sums (``leak_offsum``, ``leak_rowsum``,
``leak_key0sum``: O(T) per map). In ⟨C y_p, C y_q⟩ = ⟨C P_F y_p, C P_F y_q⟩ + ⟨R y_p, R y_q⟩
(R = I − P_F) the low-rank part is exact per pair; the residual part is known on the diagonal
(SST_p, ``leak_sst``) and in total (‖C S‖², from ``leak_map_sum``), not per pair.

**Resampling (decision).** Headline CIs: calibrated multiplier intervals over prompts
(:mod:`causalpos.paper2.inference`): near 0 the U-statistic is degenerate and the percentile
bootstrap overstates its spread. The percentile bootstrap (the tests' oracle,
``tests/expected_oracle.py``, and the planted control) keeps only pairs of distinct prompts,
N*(m) = Σ_{p≠q} m_p m_q y_pᵀ P_Δ y_q. The residual part of D* is held at its per-pair mean
D̂_R · Σ_{p≠q} m_p m_q / (n(n−1)): its pair terms need ⟨y_p, S⟩, which no one-pass O(T) statistic
gives. This drops the variance of ⟨R ε_p, R μ⟩; :func:`estimate` reports D̂_R / D̂
(``resid_share``), and near N̂ ≈ 0 the denominator's spread enters only at second order.

**Conditioning (companion).** Where the expected map is nearly flat D̂ is within its noise of 0
and ρ̂ is uninformative. The companion ρ_SST = ‖P_Δ μ‖² / E‖C y_p‖² (N̂/(n(n − 1)) over the mean
SST_p) has an exactly resampled, well conditioned denominator and is ≤ ρ·‖Cμ‖²/E‖Cy_p‖². Report
both; judge "≈ 0" on ρ_SST where D̂'s CI reaches 0.

**Landmark (decision).** With a fixed token 0 (BOS) and a permutation-equivariant forward pass,
exchangeability of positions 1..T−1 gives μ = b + (c − b)[i = j] + (a − b)[j = 0]; the key-0
column is not in the span of offsets and query effects, so such a run reads ρ > 0 (0.15 on
SmolLM2). The headline models the key-0 column in both B and F (``landmark=True``,
:func:`causalpos.paper2.extraction.design.build_design`): ρ = 0 by construction for every
position-free run. It removes only a key-0 level shared by all queries (in a causal run, the
fixed token's and position 0's closed dynamics alike: the sink readings' business); attention to
key 0 that varies with the query stays in ΔSS. Without it (``landmark=False``, kept as a second
column) a key-0 level leaks through the design's non-orthogonality (pair (i, 0) sits at offset
i). Prompts without a fixed token 0 read 0 with ``landmark=False`` too.

**Sliding window (decision).** A bidirectional window's visible-key count depends on i near both
ends, so windowed models are read on the query window ``"full<W>"`` (rows W ≤ i < T − W,
:func:`causalpos.paper2.extraction.design.query_window`), whose rows all see a full window.

**Per-head test (decision).** Under H0: P_Δ μ = 0 the c_p have mean 0; the sign-flip test (the
intervals' ``multipliers``) compares N̂ = 1ᵀG1 − tr G with εᵀGε − tr G over random signs ε: exact
for c_p symmetric about 0, asymptotically valid for mean-zero iid c_p. Benjamini–Hochberg runs
across (layer, head).
"""

from __future__ import annotations

import numpy as np

from causalpos.paper2 import inference as inf
from causalpos.paper2.estimator.replicates import linear_parts, quadratic_form, sum_parts


def u_statistics(grams: dict[str, np.ndarray], weights: np.ndarray) -> dict[str, np.ndarray]:
    """N*(m), D*(m) (B, ...) for prompt multiplicities ``weights`` (B, n); m = 1 gives N̂, D̂.

    D*(m) = low-rank part (exact) + D̂_R · Σ_{p≠q} m_p m_q / (n(n − 1)) (residual part at its
    per-pair mean; see the module docstring).
    """
    m = np.asarray(weights, dtype=np.float64)
    n = m.shape[-1]
    d_r = _resid(grams)
    pairs = m.sum(-1) ** 2 - (m * m).sum(-1)  # (B,)
    extra = (1,) * d_r.ndim
    den = quadratic_form(grams["low"], m) + d_r * (pairs / (n * (n - 1))).reshape((-1,) + extra)
    sst = np.einsum("bp,...p->b...", m, grams["sst"]) / m.sum(-1).reshape((-1,) + extra)
    return {
        "num": quadratic_form(grams["num"], m),
        "den": den,
        "den_resid": d_r,
        "pairs": pairs,
        "sst": sst,
    }


def _resid(grams: dict[str, np.ndarray]) -> np.ndarray:
    """D̂_R (...): the residual part of D̂, D̂ = ‖C S‖² − Σ_p SST_p less its low-rank part."""
    ones = np.ones((1, grams["sst"].shape[-1]))
    return grams["sst_sum"] - grams["sst"].sum(-1) - quadratic_form(grams["low"], ones)[0]


def estimate(
    grams: dict[str, np.ndarray],
    multipliers: np.ndarray,
    *,
    level: float = 0.95,
    lean: bool = False,
    heads: bool = True,
) -> dict[str, np.ndarray]:
    """The leakage (ΔR² of the expected map) of ``grams`` with leading (layer, head): per head,
    per layer (Σ over heads) and pooled (Σ over all), each with its calibrated interval over
    prompts (:mod:`causalpos.paper2.inference`) under the ``multipliers`` (B, n)
    (:func:`~causalpos.paper2.estimator.replicates.rademacher`, shared by every run of the prompt
    set), and per-head sign-flip p-values from the same draws with BH q-values across (layer,
    head). Each level's N and D come from its own summed Grams (the variance calibration is not
    additive over maps), the residual part of D̂ held fixed.

    ``*_sst``: the companion ρ_SST (module docstring). ``*_boot`` (B, ...): the ratio's reflected
    replicates (their percentile interval is the calibrated one); ``*_num_boot``, ``*_den_boot``:
    N and D per prompt pair; ``num_parts_layer``: the numerator Grams' linear parts per layer
    (:func:`~causalpos.paper2.estimator.replicates.linear_parts`, (B, layer) each). ``lean``:
    ρ_SST pooled only, and no per-head ``*_boot``, ``*_num_boot``, ``*_den_boot``. ``heads``
    False: no per-head reading (no ``head*``, ``p``, ``q``), each layer's linear parts from the
    layer's own Gram."""
    n = grams["sst"].shape[-1]
    if n < 3:  # the estimator needs distinct pairs
        raise ValueError(f"the expected-map estimator needs at least 3 prompts, got {n}")
    xi = np.asarray(multipliers, dtype=np.float64)
    if xi.ndim != 2 or xi.shape[1] != n:
        raise ValueError(f"multipliers must have shape (n_boot, {n}), got {xi.shape}")
    pairs = float(n * (n - 1))
    out = {}
    # the Grams and the residual part of D̂ per head, per layer (Σ heads) and pooled (Σ all)
    per_head = {k: np.asarray(grams[k]) for k in ("num", "low", "sst")} | {"d_r": _resid(grams)}
    levels = {
        "head": per_head,
        "layer": {k: v.sum(1) for k, v in per_head.items()},
        "pooled": {k: v.sum((0, 1)) for k, v in per_head.items()},
    }
    # The products with the multipliers once per head (or, without the per-head reading, per
    # layer); a coarser level's parts are their sums
    if heads:
        head = {k: linear_parts(grams[k], xi) for k in ("num", "low")}
        parts = {
            "head": head,
            "layer": {k: sum_parts(v, 1) for k, v in head.items()},
            "pooled": {k: sum_parts(v, (0, 1)) for k, v in head.items()},
        }
    else:
        del levels["head"]
        layer = {k: linear_parts(levels["layer"][k], xi) for k in ("num", "low")}
        parts = {"layer": layer, "pooled": {k: sum_parts(v, 0) for k, v in layer.items()}}
    out["num_parts_layer"] = parts["layer"]["num"]
    for name, g in levels.items():
        lp = parts[name]
        r = inf.calibrated_ratio(g["num"], g["low"], xi, g["d_r"], level, (lp["num"], lp["low"]))
        out[name], out[f"{name}_boot"] = r["est"], r["boot"]
        out[f"{name}_num"], out[f"{name}_den"] = r["num"] / pairs, r["den"] / pairs
        out[f"{name}_lo"], out[f"{name}_hi"] = inf.bounds(r["boot"], level)
        if name == "head":
            out["p"] = r["p"]
        if lean and name == "head":
            del out["head_boot"]  # its interval is what a lean reader takes
            continue
        out[f"{name}_num_boot"] = r["num_boot"] / pairs
        out[f"{name}_den_boot"] = r["den_boot"] / pairs
        if lean and name != "pooled":
            continue
        # ρ_SST: N per pair over the mean SST_p (a mean: its multiplier replicates, reflected)
        m_sst = g["sst"].mean(-1)
        dev = (g["sst"] - m_sst[..., None]).reshape(-1, n)
        s_b = 2 * m_sst - (m_sst + (xi @ dev.T).reshape(xi.shape[:1] + m_sst.shape) / n)
        out[f"{name}_sst"] = inf.ratio(r["num"] / pairs, m_sst)
        r_sst = inf.ratio(r["num_boot"] / pairs, s_b)
        out[f"{name}_sst_lo"], out[f"{name}_sst_hi"] = inf.bounds(r_sst, level)
    if heads:
        out["q"] = inf.q_values(out["p"])
    u = u_statistics(grams, np.ones((1, n)))
    out["resid_share"] = float(u["den_resid"].sum() / u["den"][0].sum())
    return out


def pooled_subset(
    grams: dict[str, np.ndarray],
    select: np.ndarray,
    multipliers: np.ndarray,
    *,
    level: float = 0.95,
) -> tuple[float, np.ndarray]:
    """The pooled ratio Σ N̂ / Σ D̂ over the maps ``select`` ((layer, head) bool) only, and its
    replicates, calibrated and reflected under the ``multipliers`` (B, n) (:func:`estimate`):
    the headline of a subset of heads (e.g. the sink heads), paired with every other reading
    drawn with the same draws."""
    select = np.asarray(select, dtype=bool)
    if not select.any():
        return np.nan, np.full(len(multipliers), np.nan)
    sub = {k: np.asarray(v)[select] for k, v in grams.items()}
    d_r = _resid(sub).sum()
    r = inf.calibrated_ratio(sub["num"].sum(0), sub["low"].sum(0), multipliers, d_r, level)
    return float(r["est"]), r["boot"]
