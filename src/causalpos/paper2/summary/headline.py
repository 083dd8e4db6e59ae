"""Paper 2's headline reading in the summary: the leakage of every run (ΔR² of its expected map,
:mod:`causalpos.paper2.estimator.expected`), its decomposition, and the controls built into every
(model, dataset); :func:`headline_blocks` merges them. Its CIs come from the summary's shared
multipliers, so differences between runs are paired. The per-prompt reading
(:mod:`causalpos.paper2.summary.per_prompt`) is kept as a second column: it reads token content
as position.

Controls. A run is *position-free* (:func:`position_free`) when its forward pass has no positional
input at all; it is a control only where the prompts are exchangeable over positions (chunks at
random offsets; document openings carry position in their content). Its expected map carries no
absolute position beyond the key-0 level the landmark column models, so its headline must read
≈ 0 in the model's units: ``control_tost`` is its (1 − 2α) interval, which
:func:`causalpos.verdicts.negative_control` judges against the margin declared before the run
(``control_margin``, config ``leakage.controls``). On each position-free run a query effect of
known size is planted in the statistics and read back (:func:`planted_control`); the positive
controls planted in the forward pass are :mod:`causalpos.paper2.summary.planted` and
:mod:`causalpos.paper2.summary.doses`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos.models.variants import parse_variant
from causalpos.paper2 import inference as inf
from causalpos.paper2.estimator.grams import GramCache
from causalpos.paper2.estimator.pairgrams import prompt_grams, stats_from_maps
from causalpos.paper2.estimator.replicates import LINEAR_PARTS, sum_parts
from causalpos.paper2.estimator.storeview import store_grams, store_masks
from causalpos.paper2.extraction.design import build_design
from causalpos.paper2.extraction.metric import TARGETS
from causalpos.paper2.labels import (
    CONTROL_TOL,
    HEADLINE_BOOT_TARGET,
    LANDMARKS,
    LOCAL_RUN,
    WHOLE_RUN,
)
from causalpos.paper2.prompts import PromptSet
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary.bos import bos_headline_block, bos_plan, pooled_reading
from causalpos.paper2.summary.decomposition import decomposition_block
from causalpos.paper2.summary.doses import dose_block
from causalpos.paper2.summary.factors import factor_block
from causalpos.paper2.summary.per_prompt import block_coords
from causalpos.paper2.summary.planted import planted_block

#: Columns of ``leakage_planted``: the planted effect's exact size in the model's units, then the
#: estimate with its CI.
PLANTED = ("planted", "estimate", "lo", "hi")
#: ``baseline_leakage``: the headline under the saturated and the linear-in-offset baseline (both
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
#: The runs whose headline is also read under the linear-in-offset baseline (claim 6).
LINEAR_VARIANTS = ("causal",)


def position_free(variant: str, positional: str = "", windowed: bool = False) -> bool:
    """Whether a run has no positional input: no causal mask, no sliding window that masks
    anything (``windowed``: the model's windows are shorter than the sequence, or ``positional
    == "swa"``; the ring removes them), and no rotary position (identity RoPE, or a NoPE model:
    ``positional == "nope"``). Such a forward pass is permutation-equivariant over the tokens."""
    v = parse_variant(variant)
    if v.causal or v.plant is not None or v.stream:
        return False  # a planted run carries the plant's position by construction
    if (windowed or positional == "swa") and not v.ring:
        return False  # a window's edges give each row near an end its own key count
    return v.rope == "identity" or positional == "nope"


def planted_profile(T: int) -> np.ndarray:
    """The planted query effect's shape: log(i) for i ≥ 1 (0 at row 0), the decay with position
    absolute-position effects show; scaled by :func:`planted_control`."""
    i = np.arange(T, dtype=np.float64)
    return np.where(i > 0, np.log(np.maximum(i, 1.0)), 0.0)


def planted_control(cache: GramCache, run: str, window: str, target: str, size: float):
    """Positive control on one position-free run, in the model's units: a query effect a·log(i)
    added to every map of ``run`` (in its statistics), a chosen so that the effect's exact
    numerator Σ‖P_Δ b‖² is ``size`` × the causal run's D̂ (pooled), then read back as the run's
    N̂ over that D̂ with paired replicates (the negative control's reading,
    ``control_units``). Returns (planted, estimate, lo, hi), ``planted`` = ``size`` (the
    truth, given P_Δ μ = 0 on a position-free run); NaN without a causal run or where the
    profile has no ΔSS on the measured pairs."""
    if not 0 < size < 1:
        raise ValueError(f"the planted share must be in (0, 1), got {size}")
    ps = cache.ps
    if "causal" not in ps.runs:
        return np.full(len(PLANTED), np.nan)
    ds = cache.data(run)
    unit = planted_profile(int(ds.sizes["query"]))
    pdb = 0.0  # Σ over maps of ‖P_Δ b‖² for b = log(i) (a = 1)
    for mask in store_masks(ds, window, target).values():
        d = build_design(mask, "saturated+query", landmark=True)
        sb = stats_from_maps(np.where(mask, unit[:, None], 0.0)[None], mask)
        pdb += float(prompt_grams(sb, d)["num"][0, 0]) * int(ds.sizes["head"])
    d0, db = cache.denominator("causal", window, target, "pooled")
    if not (pdb > 0 and d0 > 0):
        return np.full(len(PLANTED), np.nan)
    a = float(np.sqrt(size * d0 / pdb))
    g, _ = store_grams(ds, window=window, target=target, plant=a * unit)
    n0, nb = cache.numerator(g["num"].sum((0, 1)))
    return np.concatenate([[size], ps.ci(inf.ratio(nb, db), inf.ratio(n0, d0))])


def headline_blocks(
    ps: PromptSet,
    settings: LeakageSettings,
    *,
    conditions: Mapping[str, tuple[str, str]],
    position_free_runs: Sequence[str] = (),
    bos_pairs: Mapping[str, tuple[str, str, str]] | None = None,
    bos_target: str | None = None,
) -> xr.Dataset:
    """The headline reading of every run (empty when a run lacks the expected-map statistics):
    named blocks over one shared :class:`~causalpos.paper2.estimator.grams.GramCache`
    (``settings``: ``alpha``, ``planted``, the controls' ``control_alpha`` and margins).

    Variables (``stat`` = estimate, lo, hi), by block: :func:`leakage_block`,
    :func:`control_block`, :func:`~causalpos.paper2.summary.decomposition.decomposition_block`,
    the ablation, BOS replacement (read on ``bos_target``, default each reading's own), the
    plant in the model (``plant_model*``), :func:`~causalpos.paper2.summary.doses.dose_block` and
    :func:`~causalpos.paper2.summary.factors.factor_block`; each variable's dims, reading and
    units: :mod:`causalpos.catalogue_stores`.
    Attribute ``counts_digest`` says which resampled prompts every replicate used.
    """
    # the expected-map windows every run stores (none: the estimator is not run)
    sets = [
        list(ds["leak_exp_window"].values) if "leak_offsum" in ds else [] for ds in ps.runs.values()
    ]
    wins = [str(w) for w in sets[0] if all(w in s for s in sets[1:])] if sets else []
    if not wins:
        return xr.Dataset()
    cache = GramCache(ps)
    out = leakage_block(cache, wins, settings.alpha)
    out = out.merge(control_block(cache, wins, position_free_runs, settings))
    out.attrs.update(
        {
            "planted_size": settings.planted,
            "control_tol": CONTROL_TOL,
            "control_alpha": settings.control_alpha,
            "counts_digest": counts_digest(ps.multipliers),
            "linear_fit": LINEAR_FIT,
        }
    )
    if LOCAL_RUN in ps.runs and WHOLE_RUN in ps.runs:
        out = out.merge(_ablation_block(cache, wins))
    bos_runs, sink_sel = bos_plan(ps, bos_pairs or {})
    if bos_runs:
        bos = bos_headline_block(cache, bos_runs, wins, sink_sel, bos_target)
        out = out.merge(bos)
        out.attrs.update(bos.attrs)
    plant = planted_block(ps.runs, ps.counts, position_free_runs, level=ps.level)
    if plant.data_vars:
        out = out.merge(plant)
    doses = dose_block(cache, wins, position_free_runs, margin=settings.control_margin_logit)
    if doses.data_vars:
        out = out.merge(doses)
        out.attrs.update(doses.attrs)
    comp = decomposition_block(cache, wins, conditions, position_free_runs)
    if comp["condition"].size:
        out = out.merge(comp)
    factors = factor_block(cache, wins)
    if factors.data_vars:
        out = out.merge(factors)
        out.attrs.update(factors.attrs)
    return out


def leakage_block(cache: GramCache, wins: Sequence[str], alpha: float) -> xr.Dataset:
    """The leakage of every run, window and target: pooled, per layer, per head (sign-flip p,
    BH q, the fractions of heads below ``alpha``), the companion ρ_SST, the reading without the
    key-0 column (headline window), claim 6's baselines for :data:`LINEAR_VARIANTS`, and the
    pooled replicates of :data:`HEADLINE_BOOT_TARGET` on the first window (``leakage_model_boot``,
    float32)."""
    ps = cache.ps
    nv, nw, nt = len(ps.variants), len(wins), len(TARGETS)
    nl, nh = len(ps.layers), len(ps.heads)
    model, model_sst, frac, frac_p = (np.full((nv, nw, nt, 3), np.nan) for _ in range(4))
    model_nl = np.full((nv, nt, 3), np.nan)
    layer = np.full((nv, nw, nt, nl, 3), np.nan)
    head = np.full((nv, nw, nt, nl, nh, 3), np.nan)
    pval, qval = (np.full((nv, nw, nt, nl, nh), np.nan) for _ in range(2))
    lin = np.full((nv, nt, len(BASELINES), 3), np.nan)
    n_rep = len(ps.multipliers)
    boot = np.full((nv, n_rep), np.nan, dtype=np.float32)
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
                    f = inf.fraction_below(x, alpha)
                    arr[vi, wi, ti] = [f, *inf.wilson(f, x.size, ps.level)]
                if wi == 0 and v in LINEAR_VARIANTS:
                    lin[vi, ti] = _baseline_rows(cache, v, w, t)
                if wi == 0 and t == HEADLINE_BOOT_TARGET:  # claim 1's paired contrasts
                    boot[vi] = r["pooled_boot"]
                if wi == 0:  # the reading with the key-0 column counted, headline window
                    r2 = cache.estimate(v, w, t, landmark=False)
                    model_nl[vi, ti] = [r2["pooled"], r2["pooled_lo"], r2["pooled_hi"]]
    vwt = ("variant", "window", "target")
    return xr.Dataset(
        {
            "leakage_model": (vwt + ("stat",), model),
            "leakage_model_boot": (("variant", "replicate"), boot),
            "leakage_model_sst": (vwt + ("stat",), model_sst),
            "leakage_model_nolandmark": (("variant", "target", "stat"), model_nl),
            "leakage_layer": (vwt + ("layer", "stat"), layer),
            "leakage_head": (vwt + ("layer", "head", "stat"), head),
            "p_value": (vwt + ("layer", "head"), pval),
            "q_value": (vwt + ("layer", "head"), qval),
            "fraction_significant": (vwt + ("stat",), frac),
            "fraction_p": (vwt + ("stat",), frac_p),
            "baseline_leakage": (("variant", "target", "fit", "stat"), lin),
        },
        coords=block_coords(
            ps, "variant window target layer head stat fit", window=list(wins), fit=list(BASELINES)
        ),
    )


def control_block(
    cache: GramCache,
    wins: Sequence[str],
    position_free_runs: Sequence[str],
    settings: LeakageSettings,
) -> xr.Dataset:
    """Negative controls in the model's units and the statistics-level positive control (module
    docstring): ``control_units`` (variant, landmark, window, target, stat) a position-free run's
    N̂ over the *causal* run's D̂ (a ratio over the control's own, nearly flat map is
    ill-conditioned), paired replicates, at the summary's level; ``control_tost`` (...) its
    (1 − 2α) interval (α = ``settings.control_alpha``, each one-sided test's level), NaN where
    the run is not position-free or there is no causal run; ``control_margin`` (target) the
    declared margin δ (``settings.control_margins``); ``leakage_planted`` (variant, target,
    planted) :func:`planted_control` on each position-free run."""
    ps = cache.ps
    nv, nw, nt = len(ps.variants), len(wins), len(TARGETS)
    free = np.array([v in position_free_runs for v in ps.variants])
    units = np.full((nv, len(LANDMARKS), nw, nt, 3), np.nan)
    tost = np.full_like(units, np.nan)
    tost_level = 1.0 - 2.0 * settings.control_alpha
    for vi in np.flatnonzero(free) if "causal" in ps.runs else []:
        v = ps.variants[vi]
        for li, modelled in enumerate(lm == "modelled" for lm in LANDMARKS):
            for wi, w in enumerate(wins):
                for ti, t in enumerate(TARGETS):
                    g = cache.grams(v, w, t, landmark=modelled)["num"].sum((0, 1))
                    parts = sum_parts(cache.parts(v, w, t, landmark=modelled), 0)
                    n0, nb = cache.numerator(g, parts=parts)
                    d0, db = cache.denominator("causal", w, t, "pooled", landmark=modelled)
                    boot, est = inf.ratio(nb, db), inf.ratio(n0, d0)
                    units[vi, li, wi, ti] = ps.ci(boot, est)
                    tost[vi, li, wi, ti] = ps.ci(boot, est, tost_level)
    plant = np.full((nv, nt, len(PLANTED)), np.nan)
    for vi in np.flatnonzero(free):
        for ti, t in enumerate(TARGETS):
            plant[vi, ti] = planted_control(cache, ps.variants[vi], wins[0], t, settings.planted)
    dims = ("variant", "landmark", "window", "target")
    margins = settings.control_margins()
    return xr.Dataset(
        {
            "position_free": (("variant",), free),
            "control_units": (dims + ("stat",), units),
            "control_tost": (dims + ("stat",), tost),
            "control_margin": (("target",), [float(margins[t]) for t in TARGETS]),
            "leakage_planted": (("variant", "target", "planted"), plant),
        },
        coords=block_coords(
            ps,
            "variant landmark window target stat planted",
            window=list(wins),
            planted=list(PLANTED),
        ),
    )


def counts_digest(counts: np.ndarray) -> str:
    """A short digest of bootstrap counts: two summaries with the same digest resampled the same
    prompts, so their replicates pair."""
    c = np.ascontiguousarray(np.asarray(counts, dtype=np.int64))
    return hashlib.sha256(c.tobytes() + str(c.shape).encode()).hexdigest()[:16]


def _baseline_rows(cache: GramCache, run: str, w: str, t: str):
    """:data:`BASELINES` × (estimate, lo, hi): the saturated and linear readings, and their
    difference calibrated on its own Gram (linear minus saturated numerators) over the expected
    map's variance, which both readings share."""
    ps = cache.ps
    readings = (cache.estimate(run, w, t), cache.estimate(run, w, t, fit=LINEAR_FIT))
    g = cache.grams(run, w, t, fit=LINEAR_FIT)["num"] - cache.grams(run, w, t)["num"]
    lin_p, sat_p = cache.parts(run, w, t, fit=LINEAR_FIT), cache.parts(run, w, t)
    parts = sum_parts({x: lin_p[x] - sat_p[x] for x in LINEAR_PARTS}, 0)
    n0, nb = cache.numerator(g.sum((0, 1)), contrast=True, parts=parts)
    d0, db = cache.denominator(run, w, t, "pooled")
    rows = [ps.ci(np.asarray(x["pooled_boot"]), float(x["pooled"])) for x in readings]
    rows.append(ps.ci(inf.ratio(nb, db), inf.ratio(n0, d0)))
    return np.stack(rows)


def _ablation_block(cache: GramCache, wins: Sequence[str]):
    """Layer-local vs whole-forward ablation (:data:`ABLATIONS`), pooled and per layer, the two
    runs' replicates paired through the shared counts."""
    ps = cache.ps
    nw, nt, nl = len(wins), len(TARGETS), len(ps.layers)
    pooled = np.full((nw, nt, len(ABLATIONS), 3), np.nan)
    per_layer = np.full((nw, nt, nl, len(ABLATIONS), 3), np.nan)
    for wi, w in enumerate(wins):
        for ti, t in enumerate(TARGETS):
            for dest, key in ((pooled, "pooled"), (per_layer, "layer")):
                (le, lb), (we, wb) = (
                    pooled_reading(cache, r, w, t, key) for r in (LOCAL_RUN, WHOLE_RUN)
                )
                cis = [ps.ci(lb, le), ps.ci(wb, we), ps.ci(lb - wb, le - we)]
                dest[wi, ti] = np.stack(cis, axis=-2)
    return xr.Dataset(
        {
            "leakage_ablation": (("window", "target", "ablation", "stat"), pooled),
            "leakage_ablation_layer": (
                ("window", "target", "layer", "ablation", "stat"),
                per_layer,
            ),
        },
        coords=block_coords(
            ps, "window target layer ablation stat", window=list(wins), ablation=list(ABLATIONS)
        ),
    )
