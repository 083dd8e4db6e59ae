"""Paper 2's headline reading in the summary: the content-free leakage (:mod:`.expected`) of every
run, its decomposition, and the controls built into every (model, dataset).

Readings. ``expected-map`` (the headline): the ΔR² of the prompt-mean map, by U-statistics over
prompt pairs, key-0 column modelled (``landmark``), pooled Σ ΔSS / Σ SST over heads; CIs from the
summary's own prompt bootstrap (the same resampled prompts as every other block, so differences
between runs are paired). ``per-prompt``: the mean over prompts of each prompt's ΔR² minus its
permutation-null mean (:func:`causalpos.paper2.summary.leakage_levels`), kept as a second column:
it reads token content as position (module docstring of :mod:`.expected`).

Controls. A run is *position-free* when its forward pass has no positional input at all: a
bidirectional pass (no causal mask) with identity RoPE or a NoPE model, and no sliding window
(:func:`position_free`). It is a control only where the prompts are exchangeable over positions
(chunks at random offsets; the stage decides from the data store's ``mode``): document openings
carry position in their content, and a position-free run reads it. Its expected map carries no absolute position beyond the key-0 level
the landmark column models, so its headline must read ≈ 0 (``exp_control``: CI covers 0 or
|estimate| ≤ :data:`CONTROL_TOL`). On each position-free run the summary also plants a query
effect of known size (:func:`planted_control`) and reads it back: the positive control.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos import stats
from causalpos.models.variants import parse_variant
from causalpos.paper2 import decomposition as DC
from causalpos.paper2 import expected as X
from causalpos.paper2 import inference as inf
from causalpos.paper2.bos import bos_headline_block, bos_plan, pooled_reading
from causalpos.paper2.design import build_design
from causalpos.paper2.grams import FIT, GramCache
from causalpos.paper2.labels import CONTROL_TOL, LOCAL_RUN, STAT, WHOLE_RUN
from causalpos.paper2.metric import TARGETS
from causalpos.paper2.planted import planted_block
from causalpos.paper2.prompts import PromptSet

#: The control's equivalence bound: a negative control passes when its upper limit, in the
#: model's units, lies below this fraction of the model's own estimate (a bound from the data).
EQUIVALENCE = 0.5

#: The two landmark readings: the key-0 column modelled in both fits (position-free runs read 0
#: by construction) or counted (paper 2's reconstructed fit: nothing modelled for key 0).
LANDMARKS = ("modelled", "counted")

#: Components beside :data:`causalpos.paper2.decomposition.COMPONENTS`: the residual-stream
#: reading of a position-free run of the same summary, in the same unit, and the paired
#: difference of the condition's residual-stream component to it.
CONTROL_COMPONENTS = ("control_residual_stream", "residual_minus_control")

#: Columns of ``exp_planted``: the planted effect's exact share, then the estimate with its CI.
PLANTED = ("planted", "estimate", "lo", "hi")

#: ``exp_baseline``: the headline under the saturated and the linear-in-offset baseline (both
#: with query effects) and their paired difference (claim 6: how much the linear baseline
#: inflates the absolute part). Both share one denominator (the expected map's variance), so
#: the difference is itself a share of that variance; a ratio to the saturated reading is not
#: reported: it is unbounded where the saturated reading is ~0 (a purely relative map).
BASELINES = ("saturated", "linear", "linear_minus_saturated")
LINEAR_FIT = "linear+query"

#: Eq. 5's additivity on the headline: the residual-stream component under the layer-local
#: ablation (``layer_bidirectional``: the causal pass, each layer read without its own mask)
#: and under the whole-forward one (``bidirectional``), and their paired difference: how much
#: of the position the bidirectional ablation calls "residual stream" depends on the masks of
#: the layers below (0 when the two components add).
ABLATIONS = ("layer_local", "whole_forward", "local_minus_whole")


def position_free(variant: str, positional: str = "") -> bool:
    """Whether a run has no positional input: no causal mask, no sliding window, and no rotary
    position (identity RoPE, or a NoPE model: ``positional == "nope"``). Such a forward pass is
    permutation-equivariant over the tokens."""
    v = parse_variant(variant)
    if v.causal or positional == "swa" or v.plant is not None:
        return False  # a planted run carries the plant's position by construction
    return v.rope == "identity" or positional == "nope"


def exp_windows(ps: PromptSet) -> list[str]:
    """The expected-map windows every run of ``ps`` stores (empty: the estimator is not run)."""
    sets = [
        list(ds["leak_exp_window"].values) if "leak_offsum" in ds else [] for ds in ps.runs.values()
    ]
    return [w for w in sets[0] if all(w in s for s in sets[1:])] if sets else []


def planted_profile(T: int) -> np.ndarray:
    """The planted query effect's shape: log(i) for i ≥ 1 (0 at row 0), the decay with position
    absolute-position effects show; scaled by :func:`planted_control`."""
    i = np.arange(T, dtype=np.float64)
    return np.where(i > 0, np.log(np.maximum(i, 1.0)), 0.0)


def planted_control(
    ds: xr.Dataset,
    counts: np.ndarray | None,
    *,
    window: str,
    target: str,
    size: float,
    level: float,
    multipliers: np.ndarray | None = None,
) -> np.ndarray:
    """Positive control on one position-free run: a query effect a·log(i) added to every map,
    a chosen so that it explains ≈ ``size`` of the expected maps' variance; returns (planted,
    estimate, lo, hi). ``planted`` is the exact share the planted effect has in the expected
    maps μ + b: Σ‖P_Δ b‖² / Σ(‖Cμ‖² + 2⟨Cμ, b⟩ + ‖Cb‖²), with ‖Cμ‖² and ⟨Cμ, b⟩ from their
    unbiased estimates (D̂ and the prompt mean of ⟨y_p, Cb⟩) and P_Δ μ = 0 (the run is
    position-free)."""
    if not 0 < size < 1:
        raise ValueError(f"the planted share must be in (0, 1), got {size}")
    T = int(ds.sizes["query"])
    g0, _ = X.store_grams(ds, window=window, target=target)
    n = g0["sst"].shape[-1]
    u0 = X.u_statistics(g0, np.ones((1, n)))
    den0 = float(u0["den"][0].sum()) / (n * (n - 1))  # Σ over maps of ‖Cμ‖²
    unit = planted_profile(T)
    # Σ over maps of ‖P_Δ b‖², 2⟨Cμ, b⟩ / 2 and ‖Cb‖² for b = log(i) (a = 1): every term scales
    masks = X.store_masks(ds, window, target)
    pdb = 0.0
    cross = 0.0
    cb = 0.0
    for layer, mask in masks.items():
        d = build_design(mask, "saturated+query", landmark=True)
        sb = X.stats_from_maps(np.where(mask, unit[:, None], 0.0)[None], mask)
        pdb += float(X.prompt_grams(sb, d)["num"][0, 0]) * int(ds.sizes["head"])
        st = X.store_stats(ds, layer, window, target, mask)
        n_i = mask.sum(1).astype(np.float64)
        bc = unit - (n_i * unit).sum() / n_i.sum()
        cross += float((st.rows * bc).sum(-1).mean(0).sum())
        cb += float((n_i * bc**2).sum()) * int(ds.sizes["head"])
    # a² pdb / (den0 + 2 a cross + a² cb) = size, solved for a > 0
    qa, qb, qc = pdb - size * cb, -2 * size * cross, -size * den0
    a = (-qb + np.sqrt(qb * qb - 4 * qa * qc)) / (2 * qa) if qa > 0 else np.nan
    if not np.isfinite(a) or a <= 0:
        return np.full(len(PLANTED), np.nan)
    truth = a * a * pdb / (den0 + 2 * a * cross + a * a * cb)
    g, _ = X.store_grams(ds, window=window, target=target, plant=a * unit)
    draws = {"counts": counts} if multipliers is None else {"multipliers": multipliers}
    r = X.estimate(g, level=level, n_flips=0, lean=True, heads=False, **draws)
    return np.array([truth, r["pooled"], r["pooled_lo"], r["pooled_hi"]])


def expected_block(
    ps: PromptSet,
    *,
    conditions: Mapping[str, tuple[str, str]],
    position_free_runs: Sequence[str] = (),
    planted: float = 0.1,
    n_flips: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    bos_pairs: Mapping[str, tuple[str, str, str]] | None = None,
    linear_variants: Sequence[str] = ("causal",),
    sink_tau: float = 0.5,
    bos_target: str = "logattn",
) -> xr.Dataset:
    """The headline reading of every run (empty when a run lacks the expected-map statistics):
    named blocks over one shared :class:`~causalpos.paper2.grams.GramCache`.

    Variables (``stat`` = estimate, lo, hi): :func:`reading_block` (``exp_model``,
    ``exp_model_sst``, ``exp_model_nolandmark``, ``exp_layer``, ``exp_head``, ``exp_p``,
    ``exp_q``, ``exp_fraction_significant``, ``exp_fraction_p``, ``exp_baseline``);
    :func:`control_block` (``exp_position_free``, ``exp_control``, ``exp_control_units``,
    ``exp_planted``); :func:`components_block` (``exp_components``, ``exp_components_layer``,
    ``exp_decomposition``, ``exp_decomposition_difference``, ``exp_share_boot``); the
    ablation block (``exp_ablation``, ``exp_ablation_layer``) and the BOS block
    (``exp_bos_*``). Attribute ``exp_counts_digest`` says which resampled prompts every
    replicate used.
    """
    wins = [str(w) for w in exp_windows(ps)]
    if not wins:
        return xr.Dataset()
    cache = GramCache(ps, n_flips=n_flips, seed=seed)
    out = reading_block(cache, wins, alpha=alpha, linear_variants=linear_variants)
    out = out.merge(control_block(cache, wins, position_free_runs, planted=planted))
    out.attrs.update(
        {
            "exp_planted_size": planted,
            "exp_control_tol": CONTROL_TOL,
            "exp_equivalence": EQUIVALENCE,
            "exp_counts_digest": counts_digest(
                ps.counts if ps.multipliers is None else ps.multipliers
            ),
            "exp_linear_fit": LINEAR_FIT,
        }
    )
    if LOCAL_RUN in ps.runs and WHOLE_RUN in ps.runs:
        out = out.merge(_ablation_block(ps, wins, cache))
    bos_runs, sink_sel = bos_plan(ps, bos_pairs or {}, sink_tau)
    if bos_runs:
        bos = bos_headline_block(ps, bos_runs, wins, cache, sink_sel, sink_tau, bos_target)
        out = out.merge(bos)
        out.attrs.update(bos.attrs)
    plant = planted_block(ps.runs, ps.counts, position_free_runs, level=ps.level)
    if plant.data_vars:
        out = out.merge(plant)
    conds = {c: pair for c, pair in conditions.items() if all(r in ps.runs for r in pair)}
    if conds:
        comp = components_block(cache, wins, conds, position_free_runs)
        out = out.merge(comp)
    return out


def reading_block(
    cache: GramCache, wins: Sequence[str], *, alpha: float, linear_variants: Sequence[str]
) -> xr.Dataset:
    """The headline of every run, window and target: pooled, per layer, per head (sign-flip p,
    BH q), the companion ρ_SST, the reading without the key-0 column (headline window), and
    claim 6's baselines for ``linear_variants``."""
    ps = cache.ps
    nv, nw, nt = len(ps.variants), len(wins), len(TARGETS)
    nl, nh = len(ps.layers), len(ps.heads)
    model, model_sst, frac, frac_p = (np.full((nv, nw, nt, 3), np.nan) for _ in range(4))
    model_nl = np.full((nv, nt, 3), np.nan)
    layer = np.full((nv, nw, nt, nl, 3), np.nan)
    head = np.full((nv, nw, nt, nl, nh, 3), np.nan)
    pval, qval = (np.full((nv, nw, nt, nl, nh), np.nan) for _ in range(2))
    lin = np.full((nv, nt, len(BASELINES), 3), np.nan)
    for vi, v in enumerate(ps.variants):
        for wi, w in enumerate(wins):
            for ti, t in enumerate(TARGETS):
                r = cache.estimate(v, w, t)
                model[vi, wi, ti] = [r["pooled"], r["pooled_lo"], r["pooled_hi"]]
                model_sst[vi, wi, ti] = [r["pooled_sst"], r["pooled_sst_lo"], r["pooled_sst_hi"]]
                layer[vi, wi, ti] = np.stack([r["layer"], r["layer_lo"], r["layer_hi"]], -1)
                head[vi, wi, ti] = np.stack([r["head"], r["head_lo"], r["head_hi"]], -1)
                pval[vi, wi, ti], qval[vi, wi, ti] = r["p"], r["q"]
                for arr, x in ((frac, r["q"]), (frac_p, r["p"])):
                    f = stats.fraction_significant(x, alpha)
                    arr[vi, wi, ti] = [f, *stats.wilson_ci(f, x.size, ps.level)]
                if wi == 0 and v in linear_variants:
                    rl = cache.estimate(v, w, t, fit=LINEAR_FIT, flips=False)
                    lin[vi, ti] = _baseline_rows(cache, (v, w, t), r, rl)
                if wi == 0:  # the reading with the key-0 column counted, headline window
                    r2 = cache.estimate(v, w, t, landmark=False, flips=False)
                    model_nl[vi, ti] = [r2["pooled"], r2["pooled_lo"], r2["pooled_hi"]]
    vwt = ("variant", "exp_window", "target")
    return xr.Dataset(
        {
            "exp_model": (vwt + ("stat",), model),
            "exp_model_sst": (vwt + ("stat",), model_sst),
            "exp_model_nolandmark": (("variant", "target", "stat"), model_nl),
            "exp_layer": (vwt + ("layer", "stat"), layer),
            "exp_head": (vwt + ("layer", "head", "stat"), head),
            "exp_p": (vwt + ("layer", "head"), pval),
            "exp_q": (vwt + ("layer", "head"), qval),
            "exp_fraction_significant": (vwt + ("stat",), frac),
            "exp_fraction_p": (vwt + ("stat",), frac_p),
            "exp_baseline": (("variant", "target", "exp_fit", "stat"), lin),
        },
        coords={
            "variant": ps.variants,
            "exp_window": list(wins),
            "target": list(TARGETS),
            "layer": ps.layers,
            "head": ps.heads,
            "stat": list(STAT),
            "exp_fit": list(BASELINES),
        },
    )


def control_block(
    cache: GramCache, wins: Sequence[str], position_free_runs: Sequence[str], *, planted: float
) -> xr.Dataset:
    """Negative controls in the model's units and the statistics-level positive control.

    ``exp_control_units`` (variant, exp_landmark, exp_window, target, stat): a position-free
    run's N̂ over the *causal* run's D̂ (the model's units: a ratio over the control's own,
    nearly flat map is ill-conditioned), paired replicates; ``exp_control_bound`` (...) the
    model's own headline on the same reading; ``exp_control`` (variant, exp_landmark, exp_window,
    target): 1 passes (the control's upper limit below :data:`EQUIVALENCE` × the model's
    estimate), 0 fails, NaN not a position-free run or no causal run to compare with.
    ``exp_planted`` (variant, target, planted): the planted query effect on each position-free
    run, read back (:func:`planted_control`)."""
    ps = cache.ps
    nv, nw, nt = len(ps.variants), len(wins), len(TARGETS)
    free = np.array([v in position_free_runs for v in ps.variants])
    units = np.full((nv, len(LANDMARKS), nw, nt, 3), np.nan)
    bound = np.full((nv, len(LANDMARKS), nw, nt), np.nan)
    control = np.full((nv, len(LANDMARKS), nw, nt), np.nan)
    ref = "causal" if "causal" in ps.runs else None
    for vi in np.flatnonzero(free) if ref else []:
        v = ps.variants[vi]
        for li, lm in enumerate(LANDMARKS):
            for wi, w in enumerate(wins):
                for ti, t in enumerate(TARGETS):
                    modelled = lm == "modelled"
                    g = cache.grams(v, w, t, landmark=modelled)["num"].sum((0, 1))
                    n0, nb = cache.numerator(
                        g, parts=inf.sum_parts(cache.parts(v, w, t, landmark=modelled), 0)
                    )
                    d0, db = cache.denominator(ref, w, t, "pooled", landmark=modelled)
                    units[vi, li, wi, ti] = _ci(ps, inf.ratio(nb, db), inf.ratio(n0, d0))
                    m = cache.estimate(ref, w, t, landmark=modelled, flips=False)["pooled"]
                    bound[vi, li, wi, ti] = EQUIVALENCE * m
                    control[vi, li, wi, ti] = float(units[vi, li, wi, ti, 2] < EQUIVALENCE * m)
    plant = np.full((nv, nt, len(PLANTED)), np.nan)
    for vi in np.flatnonzero(free):
        for ti, t in enumerate(TARGETS):
            plant[vi, ti] = planted_control(
                cache.data(ps.variants[vi]),
                ps.counts,
                multipliers=ps.multipliers,
                window=wins[0],
                target=t,
                size=planted,
                level=ps.level,
            )
    dims = ("variant", "exp_landmark", "exp_window", "target")
    return xr.Dataset(
        {
            "exp_position_free": (("variant",), free),
            "exp_control_units": (dims + ("stat",), units),
            "exp_control_bound": (dims, bound),
            "exp_control": (dims, control),
            "exp_planted": (("variant", "target", "planted"), plant),
        },
        coords={
            "variant": ps.variants,
            "exp_landmark": list(LANDMARKS),
            "exp_window": list(wins),
            "target": list(TARGETS),
            "stat": list(STAT),
            "planted": list(PLANTED),
        },
    )


def _ci(ps: PromptSet, boot: np.ndarray, est: np.ndarray) -> np.ndarray:
    """(..., 3) estimate, lo, hi of the headline's replicates (one place for its interval)."""
    return ps.ci(boot, est)


def components_block(
    cache: GramCache,
    wins: Sequence[str],
    conds: Mapping[str, tuple[str, str]],
    position_free_runs: Sequence[str] = (),
) -> xr.Dataset:
    """Paper 2 §3 in one unit (:mod:`causalpos.paper2.decomposition`), for every condition
    (causal run, ablation run), both landmark readings and every window, pooled and per layer.

    ``exp_components`` (exp_condition, exp_landmark, exp_window, component_full, stat) and
    ``exp_components_layer`` (..., layer, component_full, stat): :data:`DC.COMPONENTS` and
    :data:`DC.SHARES`, plus ``control_residual_stream`` (a position-free run's logit ΔSS in the
    same unit: the residual-stream reading's negative control) and ``residual_minus_control``.
    Each component's interval is calibrated on its own Gram (the same combination of the
    numerators' Grams), its denominator's replicates shared. ``exp_decomposition``
    (exp_condition, exp_window, target, component, stat): the headline decomposition (landmark
    modelled, artefact-free) under the names total, residual, causal_mask, share_residual,
    share_causal_mask; ``target`` is log-attention (its one unit) and the logit coordinate is
    NaN; ``exp_decomposition_difference`` paired differences between conditions and
    ``exp_share_boot`` the share's replicates."""
    ps = cache.ps
    names = list(DC.COMPONENTS) + list(DC.SHARES) + list(CONTROL_COMPONENTS)
    nc, nlm, nw, nl = len(conds), len(LANDMARKS), len(wins), len(ps.layers)
    out = {
        "pooled": np.full((nc, nlm, nw, len(names), 3), np.nan),
        "layer": np.full((nc, nlm, nw, nl, len(names), 3), np.nan),
    }
    n_rep = len(ps.multipliers if ps.multipliers is not None else ps.counts)
    share_boot = np.full((nc, nw, len(TARGETS), n_rep), np.nan, dtype=np.float32)
    free = [v for v in ps.variants if v in position_free_runs]
    boots: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    for ci, (c, b) in enumerate(conds.values()):
        # b's relative log-attention per layer, once for every landmark and window
        rel = {ly: DC.relative_logattn(*cache.mean_map(b, "logit", ly)) for ly in ps.layers}
        for li, lm in enumerate(LANDMARKS):
            modelled = lm == "modelled"
            for wi, w in enumerate(wins):
                grams = {
                    "c_logattn": cache.grams(c, w, "logattn", landmark=modelled)["num"],
                    "c_logit": cache.grams(c, w, "logit", landmark=modelled)["num"],
                    "c_logz": cache.logz_gram(c, w, landmark=modelled),
                    "b_logit": cache.grams(b, w, "logit", landmark=modelled)["num"],
                    "b_logattn": cache.grams(b, w, "logattn", landmark=modelled)["num"],
                }
                if free:
                    grams["ctrl"] = cache.grams(free[0], w, "logit", landmark=modelled)["num"]
                # the Grams' linear parts under the multipliers (B, layer), by the same names
                roles = {"c": c, "b": b}
                parts = {
                    k: cache.parts(roles[k[0]], w, k[2:], landmark=modelled) for k in DC.NUMERATORS
                }
                if free:
                    parts["ctrl"] = cache.parts(free[0], w, "logit", landmark=modelled)
                art = _artefact(cache, rel, c, w, modelled)  # (layer, head), per prompt pair
                for level, axes in (("pooled", (0, 1)), ("layer", (1,))):
                    est, rep = _level_components(
                        cache,
                        {k: g.sum(axes) for k, g in grams.items()},
                        art.sum(axes),
                        {
                            k: inf.sum_parts(p, 0) if level == "pooled" else p
                            for k, p in parts.items()
                        },
                    )
                    d0, db = cache.denominator(c, w, "logattn", level, landmark=modelled)
                    est = {k: v / d0 if k in _NUMERATOR_UNITS else v for k, v in est.items()}
                    rep = {k: v / db if k in _NUMERATOR_UNITS else v for k, v in rep.items()}
                    dest = out[level][ci, li, wi]
                    for k, name in enumerate(names):
                        if name in est:
                            dest[..., k, :] = _ci(ps, rep[name], est[name])
                    if level == "pooled" and modelled:
                        boots[ci, wi] = {"est": est, "boot": rep}
                        share_boot[ci, wi, TARGETS.index("logattn")] = rep["share_causal_mask"]
    data = xr.Dataset(
        {
            "exp_components": (
                ("exp_condition", "exp_landmark", "exp_window", "component_full", "stat"),
                out["pooled"],
            ),
            "exp_components_layer": (
                ("exp_condition", "exp_landmark", "exp_window", "layer", "component_full", "stat"),
                out["layer"],
            ),
            "exp_share_boot": (("exp_condition", "exp_window", "target", "replicate"), share_boot),
        },
        coords={
            "exp_condition": list(conds),
            "exp_landmark": list(LANDMARKS),
            "exp_window": list(wins),
            "layer": ps.layers,
            "component_full": names,
            "target": list(TARGETS),
            "stat": list(STAT),
        },
        attrs={"exp_components_unit": DC.UNIT},
    )
    return data.merge(_decomposition_compat(ps, list(conds), wins, boots))


#: Components read in the one unit (divided by the causal run's D̂); the shares are not.
_NUMERATOR_UNITS = set(DC.COMPONENTS) | set(CONTROL_COMPONENTS)


def _level_components(
    cache: GramCache,
    grams: Mapping[str, np.ndarray],
    artefact: np.ndarray,
    parts: Mapping[str, Mapping[str, np.ndarray] | None] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(estimates, replicates) per prompt pair of every component at one level: each from its
    own combination of the numerators' Grams (:data:`DC.COMBINATIONS`), calibrated; shares as
    ratios of the components' replicates (the denominator cancels). ``parts``: the Grams' linear
    parts under the multipliers at this level (a component's are the same combination)."""
    combos = dict(DC.COMBINATIONS)
    if "ctrl" in grams:
        combos["control_residual_stream"] = {"ctrl": 1.0}
        combos["residual_minus_control"] = {"b_logit": 1.0, "ctrl": -1.0}
    est, rep = {}, {}
    for name, co in combos.items():
        contrast = any(c < 0 for c in co.values())
        p = None
        if parts is not None and all(parts.get(k) is not None for k in co):
            p = {x: DC.combine({k: parts[k][x] for k in co}, co) for x in inf.LINEAR_PARTS}
        est[name], rep[name] = cache.numerator(DC.combine(grams, co), contrast=contrast, parts=p)
    est["artefact"] = np.asarray(artefact, dtype=np.float64)
    rep["artefact"] = np.full(rep["total"].shape, np.nan)
    return est | DC.shares(est), rep | DC.shares(rep)


def _artefact(cache: GramCache, rel: Mapping, c: str, w: str, modelled: bool) -> np.ndarray:
    """(layer, head) the edge artefact of run b's softmax on its relative expected logits
    (``rel``: layer -> :func:`DC.relative_logattn` of b's expected logits), read on the pairs
    and design of the causal run's log-attention (per prompt pair)."""
    out = []
    masks = cache.masks(c, w, "logattn")
    for layer, mask in masks.items():
        design = cache.design(mask, FIT, modelled)
        out.append(DC.artefact_of(rel[layer], mask, design))
    return np.stack(out)


def _decomposition_compat(
    ps: PromptSet, conds: Sequence[str], wins: Sequence[str], boots: Mapping
) -> xr.Dataset:
    """``exp_decomposition`` and its paired differences between conditions from the one-unit
    components (landmark modelled, log-attention)."""
    names = {
        "total": "total",
        "residual": "residual_stream",
        "causal_mask": "causal_mask",
        "share_residual": None,
        "share_causal_mask": "share_causal_mask",
    }
    nc, nw, nt = len(conds), len(wins), len(TARGETS)
    ti = TARGETS.index("logattn")
    dec = np.full((nc, nw, nt, len(names), 3), np.nan)
    diff = np.full((nc, nc, nw, nt, len(names), 3), np.nan)

    def get(x, k):
        return 1.0 - x["share_causal_mask"] if names[k] is None else x[names[k]]

    for (ci, wi), e in boots.items():
        for k, comp in enumerate(names):
            dec[ci, wi, ti, k] = _ci(ps, get(e["boot"], comp), get(e["est"], comp))
        for cj in range(nc):
            if (cj, wi) not in boots:
                continue
            r = boots[cj, wi]
            for k, comp in enumerate(names):
                diff[ci, cj, wi, ti, k] = _ci(
                    ps,
                    get(e["boot"], comp) - get(r["boot"], comp),
                    get(e["est"], comp) - get(r["est"], comp),
                )
    return xr.Dataset(
        {
            "exp_decomposition": (
                ("exp_condition", "exp_window", "target", "component", "stat"),
                dec,
            ),
            "exp_decomposition_difference": (
                ("exp_condition", "exp_condition_ref", "exp_window", "target", "component", "stat"),
                diff,
            ),
        },
        coords={
            "exp_condition": list(conds),
            "exp_condition_ref": list(conds),
            "exp_window": list(wins),
            "target": list(TARGETS),
            "component": list(names),
            "stat": list(STAT),
        },
    )


def counts_digest(counts: np.ndarray) -> str:
    """A short digest of bootstrap counts: two summaries with the same digest resampled the same
    prompts, so their replicates pair."""
    c = np.ascontiguousarray(np.asarray(counts, dtype=np.int64))
    return hashlib.sha256(c.tobytes() + str(c.shape).encode()).hexdigest()[:16]


def _baseline_rows(cache: GramCache, key: tuple[str, str, str], sat: Mapping, lin: Mapping):
    """:data:`BASELINES` × (estimate, lo, hi): the saturated and linear readings, and their
    difference calibrated on its own Gram (linear minus saturated numerators) over the expected
    map's variance, which both readings share."""
    ps = cache.ps
    run, w, t = key
    g = cache.grams(run, w, t, fit=LINEAR_FIT)["num"] - cache.grams(run, w, t)["num"]
    lin_p, sat_p = cache.parts(run, w, t, fit=LINEAR_FIT), cache.parts(run, w, t)
    parts = None
    if lin_p is not None:
        parts = inf.sum_parts({x: lin_p[x] - sat_p[x] for x in inf.LINEAR_PARTS}, 0)
    n0, nb = cache.numerator(g.sum((0, 1)), contrast=True, parts=parts)
    d0, db = cache.denominator(run, w, t, "pooled")
    rows = [ps.ci(np.asarray(x["pooled_boot"]), float(x["pooled"])) for x in (sat, lin)]
    rows.append(ps.ci(inf.ratio(nb, db), inf.ratio(n0, d0)))
    return np.stack(rows)


def _ablation_block(ps: PromptSet, wins: Sequence[str], cache: GramCache):
    """Layer-local vs whole-forward ablation (:data:`ABLATIONS`), pooled and per layer, the two
    runs' replicates paired through the shared counts."""
    nw, nt, nl = len(wins), len(TARGETS), len(ps.layers)
    pooled = np.full((nw, nt, len(ABLATIONS), 3), np.nan)
    per_layer = np.full((nw, nt, nl, len(ABLATIONS), 3), np.nan)
    for wi, w in enumerate(wins):
        for ti, t in enumerate(TARGETS):
            (le, lb), (we, wb) = (pooled_reading(cache, r, w, t) for r in (LOCAL_RUN, WHOLE_RUN))
            pooled[wi, ti] = [ps.ci(lb, le), ps.ci(wb, we), ps.ci(lb - wb, le - we)]
            (lle, llb), (wle, wlb) = (
                pooled_reading(cache, r, w, t, "layer") for r in (LOCAL_RUN, WHOLE_RUN)
            )
            per_layer[wi, ti] = np.stack(
                [ps.ci(llb, lle), ps.ci(wlb, wle), ps.ci(llb - wlb, lle - wle)], axis=-2
            )
    return xr.Dataset(
        {
            "exp_ablation": (("exp_window", "target", "ablation", "stat"), pooled),
            "exp_ablation_layer": (
                ("exp_window", "target", "layer", "ablation", "stat"),
                per_layer,
            ),
        },
        coords={
            "exp_window": list(wins),
            "target": list(TARGETS),
            "layer": ps.layers,
            "ablation": list(ABLATIONS),
            "stat": list(STAT),
        },
    )
