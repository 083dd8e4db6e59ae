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
from causalpos.paper2 import expected as X
from causalpos.paper2.bos import bos_replacement
from causalpos.paper2.design import build_design
from causalpos.paper2.metric import TARGETS, decompose
from causalpos.paper2.prompts import STAT, PromptSet

#: |headline| at or below which a position-free run passes its negative control even when its CI
#: excludes 0 (a CI of a near-flat expected map can be very narrow).
CONTROL_TOL = 0.01

#: Columns of ``exp_planted``: the planted effect's exact share, then the estimate with its CI.
PLANTED = ("planted", "estimate", "lo", "hi")

#: ``exp_baseline``: the headline under the saturated and the linear-in-offset baseline (both
#: with query effects) and their paired difference (claim 6: how much the linear baseline
#: inflates the absolute part). Both share one denominator (the expected map's variance), so
#: the difference is itself a share of that variance; a ratio to the saturated reading is not
#: reported: it is unbounded where the saturated reading is ~0 (a purely relative map).
BASELINES = ("saturated", "linear", "linear_minus_saturated")
LINEAR_FIT = "linear+query"

#: Readings of a BOS replacement's effect (Table 9) on the headline, 1 − C(replaced) / C(run):
#: ``residual_stream`` the bidirectional pair's log-attention leakage (§3's C_res; a
#: bidirectional pass keeps no attention sink); ``causal_total`` the causal pair's log-attention
#: leakage (sinks kept); ``sink_heads`` the same pooled over the causal run's sink heads only
#: (prompt-mean attention to key 0 ≥ ``sink_tau``).
BOS_READINGS = ("residual_stream", "causal_total", "sink_heads")

#: Eq. 5's additivity on the headline: the residual-stream component under the layer-local
#: ablation (``layer_bidirectional``: the causal pass, each layer read without its own mask)
#: and under the whole-forward one (``bidirectional``), and their paired difference: how much
#: of the position the bidirectional ablation calls "residual stream" depends on the masks of
#: the layers below (0 when the two components add).
ABLATIONS = ("layer_local", "whole_forward", "local_minus_whole")
LOCAL_RUN, WHOLE_RUN = "layer_bidirectional", "bidirectional"


def position_free(variant: str, positional: str = "") -> bool:
    """Whether a run has no positional input: no causal mask, no sliding window, and no rotary
    position (identity RoPE, or a NoPE model: ``positional == "nope"``). Such a forward pass is
    permutation-equivariant over the tokens."""
    v = parse_variant(variant)
    if v.causal or positional == "swa":
        return False
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
    ds: xr.Dataset, counts: np.ndarray, *, window: str, target: str, size: float, level: float
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
    r = X.estimate(g, counts=counts, level=level, n_flips=0)
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
    """The headline reading of every run (empty when a run lacks the expected-map statistics).

    Variables (``stat`` = estimate, lo, hi): ``exp_model`` (variant, exp_window, target, stat) the
    pooled ΔR² of the expected maps; ``exp_model_sst`` the companion ρ_SST; ``exp_model_nolandmark``
    (variant, target, stat) the pooled ratio without the key-0 column on the headline window
    (second reading; 200 replicates); ``exp_layer`` (variant, exp_window,
    target, layer, stat); ``exp_head`` (variant, exp_window, target, layer, head, stat);
    ``exp_p`` / ``exp_q`` (variant, exp_window, target, layer, head) sign-flip p-values over
    prompts and BH q-values across (layer, head); ``exp_fraction_significant`` (q ≤ alpha: under
    the null, some head at all with probability ≤ alpha) and ``exp_fraction_p`` (p ≤ alpha:
    nominal rate alpha under the null), with Wilson CIs; ``exp_decomposition``
    (exp_condition, exp_window, target, component, stat) paper 2 §3 on the headline, the two runs'
    replicates paired, and ``exp_decomposition_difference`` (exp_condition, exp_condition_ref, ...)
    the paired differences between conditions; ``exp_position_free`` (variant) bool; ``exp_control`` (variant, exp_window,
    target): 1 passes, 0 fails the negative control, NaN not a position-free run; ``exp_planted``
    (variant, target, planted) the positive control on each position-free run (headline window).
    ``exp_share_boot`` (exp_condition, exp_window, target, replicate) float32: the causal-mask
    share's bootstrap replicates, for paired contrasts between models on the same prompts (attr
    ``exp_counts_digest`` says which resampled prompts). ``exp_baseline`` (variant, target,
    exp_fit, stat), for ``linear_variants``: :data:`BASELINES` on the headline window.
    ``exp_bos_effect``, ``exp_bos_c``, ``exp_bos_c_baseline`` (bos_replacement, bos_reading,
    exp_window, stat): Table 9 on the headline, :data:`BOS_READINGS`, for every BOS replacement
    of ``bos_pairs`` (intervention -> (variant, baseline, target), as
    :func:`causalpos.paper2.bos.wanted_bos`), on ``bos_target`` (log-attention: §3's unit).
    ``exp_ablation`` (exp_window, target, ablation, stat) and ``exp_ablation_layer`` (...,
    layer, ...): :data:`ABLATIONS`, where the runs hold both ``layer_bidirectional`` and
    ``bidirectional``.
    """
    wins = [str(w) for w in exp_windows(ps)]
    if not wins:
        return xr.Dataset()
    nv, nw, nt = len(ps.variants), len(wins), len(TARGETS)
    nl, nh = len(ps.layers), len(ps.heads)
    model = np.full((nv, nw, nt, 3), np.nan)
    model_sst = np.full((nv, nw, nt, 3), np.nan)
    model_nl = np.full((nv, nt, 3), np.nan)
    layer = np.full((nv, nw, nt, nl, 3), np.nan)
    head = np.full((nv, nw, nt, nl, nh, 3), np.nan)
    pval = np.full((nv, nw, nt, nl, nh), np.nan)
    qval = np.full((nv, nw, nt, nl, nh), np.nan)
    frac = np.full((nv, nw, nt, 3), np.nan)
    frac_p = np.full((nv, nw, nt, 3), np.nan)
    boots = {}
    bos_runs, sink_sel = _bos_plan(ps, bos_pairs or {}, sink_tau)
    sink_boots = {}
    lin = np.full((nv, nt, len(BASELINES), 3), np.nan)
    layer_boots = {}
    needed = [
        "leak_offsum",
        "leak_key0sum",
        "leak_rowsum",
        "leak_map_sum",
        "leak_sst",
        "leak_delta",
    ]
    for vi, v in enumerate(ps.variants):
        ds = ps.runs[v][needed].load()  # read once; every window, target and reading reuses it
        for wi, w in enumerate(wins):
            for ti, t in enumerate(TARGETS):
                g, _ = X.store_grams(ds, window=w, target=t)
                r = X.estimate(g, counts=ps.counts, level=ps.level, n_flips=n_flips, seed=seed)
                model[vi, wi, ti] = [r["pooled"], r["pooled_lo"], r["pooled_hi"]]
                model_sst[vi, wi, ti] = [r["pooled_sst"], r["pooled_sst_lo"], r["pooled_sst_hi"]]
                layer[vi, wi, ti] = np.stack([r["layer"], r["layer_lo"], r["layer_hi"]], -1)
                head[vi, wi, ti] = np.stack([r["head"], r["head_lo"], r["head_hi"]], -1)
                pval[vi, wi, ti], qval[vi, wi, ti] = r["p"], r["q"]
                for arr, x in ((frac, r["q"]), (frac_p, r["p"])):
                    f = stats.fraction_significant(x, alpha)
                    arr[vi, wi, ti] = [f, *stats.wilson_ci(f, x.size, ps.level)]
                boots[v, w, t] = (r["pooled"], r["pooled_boot"])
                if v in (LOCAL_RUN, WHOLE_RUN):
                    layer_boots[v, w, t] = (r["layer"], r["layer_boot"])
                if t == bos_target and v in sink_sel:
                    sink_boots[v, w] = X.pooled_subset(g, sink_sel[v], ps.counts)
                if wi == 0 and v in linear_variants:
                    gl, _ = X.store_grams(ds, window=w, target=t, fit=LINEAR_FIT)
                    rl = X.estimate(gl, counts=ps.counts, level=ps.level, n_flips=0)
                    lin[vi, ti] = _baseline_rows(ps, r, rl)
                if wi == 0:  # the second reading, headline window (200 replicates)
                    g2, _ = X.store_grams(ds, window=w, target=t, landmark=False)
                    r2 = X.estimate(g2, counts=ps.counts[:200], level=ps.level, n_flips=0)
                    model_nl[vi, ti] = [r2["pooled"], r2["pooled_lo"], r2["pooled_hi"]]
    free = np.array([v in position_free_runs for v in ps.variants])
    control = np.full((nv, nw, nt), np.nan)
    for vi in np.flatnonzero(free):
        est, lo, hi = model[vi, ..., 0], model[vi, ..., 1], model[vi, ..., 2]
        control[vi] = ((lo <= 0) & (hi >= 0)) | (np.abs(est) <= CONTROL_TOL)
    plant = np.full((nv, nt, len(PLANTED)), np.nan)
    for vi in np.flatnonzero(free):
        for ti, t in enumerate(TARGETS):
            plant[vi, ti] = planted_control(
                ps.runs[ps.variants[vi]][needed].load(),
                ps.counts,
                window=wins[0],
                target=t,
                size=planted,
                level=ps.level,
            )
    out = xr.Dataset(
        {
            "exp_model": (("variant", "exp_window", "target", "stat"), model),
            "exp_model_sst": (("variant", "exp_window", "target", "stat"), model_sst),
            "exp_model_nolandmark": (("variant", "target", "stat"), model_nl),
            "exp_layer": (("variant", "exp_window", "target", "layer", "stat"), layer),
            "exp_head": (("variant", "exp_window", "target", "layer", "head", "stat"), head),
            "exp_p": (("variant", "exp_window", "target", "layer", "head"), pval),
            "exp_q": (("variant", "exp_window", "target", "layer", "head"), qval),
            "exp_fraction_significant": (("variant", "exp_window", "target", "stat"), frac),
            "exp_fraction_p": (("variant", "exp_window", "target", "stat"), frac_p),
            "exp_position_free": (("variant",), free),
            "exp_control": (("variant", "exp_window", "target"), control),
            "exp_planted": (("variant", "target", "planted"), plant),
            "exp_baseline": (("variant", "target", "exp_fit", "stat"), lin),
        },
        coords={
            "variant": ps.variants,
            "exp_window": wins,
            "target": list(TARGETS),
            "layer": ps.layers,
            "head": ps.heads,
            "stat": list(STAT),
            "planted": list(PLANTED),
            "exp_fit": list(BASELINES),
        },
        attrs={
            "exp_planted_size": planted,
            "exp_control_tol": CONTROL_TOL,
            "exp_counts_digest": counts_digest(ps.counts),
            "exp_linear_fit": LINEAR_FIT,
        },
    )
    if LOCAL_RUN in ps.runs and WHOLE_RUN in ps.runs:
        out = out.merge(_ablation_block(ps, wins, boots, layer_boots))
    if bos_runs:
        bos = _bos_block(ps, bos_runs, wins, boots, sink_boots, sink_sel, sink_tau, bos_target)
        out = out.merge(bos)
        out.attrs.update(bos.attrs)
    conds = {c: pair for c, pair in conditions.items() if all(r in ps.runs for r in pair)}
    if conds:
        nc = len(conds)
        dec = np.full((nc, nw, nt, 5, 3), np.nan)
        diff = np.full((nc, nc, nw, nt, 5, 3), np.nan)
        share_boot = np.full((nc, nw, nt, len(ps.counts)), np.nan, dtype=np.float32)
        for wi, w in enumerate(wins):
            for ti, t in enumerate(TARGETS):
                parts = []
                for ci, (cv, bv) in enumerate(conds.values()):
                    (te, tb), (re, rb) = boots[cv, w, t], boots[bv, w, t]
                    est, bt = decompose(te, re), decompose(tb, rb)
                    parts.append((est, bt))
                    share_boot[ci, wi, ti] = bt["share_causal_mask"]
                    for k, comp in enumerate(est):
                        dec[ci, wi, ti, k] = ps.ci(bt[comp], est[comp])
                # paired: every run's replicates use the same resampled prompts
                for ci, (ec, bc) in enumerate(parts):
                    for cj, (er, br) in enumerate(parts):
                        for k, comp in enumerate(ec):
                            diff[ci, cj, wi, ti, k] = ps.ci(
                                bc[comp] - br[comp], ec[comp] - er[comp]
                            )
        out["exp_decomposition"] = (
            ("exp_condition", "exp_window", "target", "component", "stat"),
            dec,
        )
        out["exp_decomposition_difference"] = (
            ("exp_condition", "exp_condition_ref", "exp_window", "target", "component", "stat"),
            diff,
        )
        out["exp_share_boot"] = (("exp_condition", "exp_window", "target", "replicate"), share_boot)
        out = out.assign_coords(
            exp_condition=list(conds),
            exp_condition_ref=list(conds),
            component=list(decompose(np.ones(1), np.ones(1))),
        )
    return out


def counts_digest(counts: np.ndarray) -> str:
    """A short digest of bootstrap counts: two summaries with the same digest resampled the same
    prompts, so their replicates pair."""
    c = np.ascontiguousarray(np.asarray(counts, dtype=np.int64))
    return hashlib.sha256(c.tobytes() + str(c.shape).encode()).hexdigest()[:16]


def _baseline_rows(ps: PromptSet, sat: Mapping, lin: Mapping) -> np.ndarray:
    """:data:`BASELINES` × (estimate, lo, hi) from the saturated and linear estimates (paired:
    the same counts)."""
    s0, l0 = float(sat["pooled"]), float(lin["pooled"])
    sb, lb = np.asarray(sat["pooled_boot"]), np.asarray(lin["pooled_boot"])
    return np.stack([ps.ci(sb, s0), ps.ci(lb, l0), ps.ci(lb - sb, l0 - s0)])


def _bos_plan(
    ps: PromptSet, bos_pairs: Mapping[str, tuple[str, str, str]], sink_tau: float
) -> tuple[dict[tuple[str, str], tuple[str, str]], dict[str, np.ndarray]]:
    """(replacement, reading) -> (run, baseline run) for every BOS pair of ``ps``; and, for every
    causal run of such a pair, its baseline's sink heads ((layer, head) bool: prompt-mean
    attention to key 0 ≥ ``sink_tau``; none when the baseline stores no ``sink_attention``)."""
    runs: dict[tuple[str, str], tuple[str, str]] = {}
    sinks: dict[str, np.ndarray] = {}
    for iv, bv, _target in bos_pairs.values():
        if iv not in ps.runs or bv not in ps.runs:
            continue
        rep = bos_replacement(iv)
        if not parse_variant(iv).causal and not parse_variant(bv).causal:
            runs[rep, "residual_stream"] = (iv, bv)
        elif parse_variant(iv).causal and parse_variant(bv).causal:
            runs[rep, "causal_total"] = (iv, bv)
            runs[rep, "sink_heads"] = (iv, bv)
            if "sink_attention" in ps.runs[bv]:
                att = ps.runs[bv]["sink_attention"].mean("sequence").transpose("layer", "head")
                sel = np.asarray(att.values) >= sink_tau
                sinks[iv] = sinks[bv] = sel
    return runs, sinks


def _bos_block(
    ps: PromptSet,
    runs: Mapping[tuple[str, str], tuple[str, str]],
    wins: Sequence[str],
    boots: Mapping,
    sink_boots: Mapping,
    sink_sel: Mapping[str, np.ndarray],
    sink_tau: float,
    target: str = "logattn",
) -> xr.Dataset:
    """Table 9 on the headline (:data:`BOS_READINGS`), replicates paired through the counts."""
    reps = sorted({rep for rep, _ in runs})
    shape = (len(reps), len(BOS_READINGS), len(wins), 3)
    eff, c_int, c_base = (np.full(shape, np.nan) for _ in range(3))
    n_sink = np.zeros(len(reps))
    for (rep, reading), (iv, bv) in runs.items():
        a, k = reps.index(rep), BOS_READINGS.index(reading)
        for wi, w in enumerate(wins):
            if reading == "sink_heads":
                if (iv, w) not in sink_boots or (bv, w) not in sink_boots:
                    continue
                (ie, ib), (be, bb) = sink_boots[iv, w], sink_boots[bv, w]
                n_sink[a] = int(sink_sel[bv].sum())
            else:
                (ie, ib), (be, bb) = boots[iv, w, target], boots[bv, w, target]
            with np.errstate(divide="ignore", invalid="ignore"):
                eff[a, k, wi] = ps.ci(1.0 - ib / bb, 1.0 - ie / be)
            c_int[a, k, wi] = ps.ci(ib, ie)
            c_base[a, k, wi] = ps.ci(bb, be)
    dims = ("bos_replacement", "bos_reading", "exp_window", "stat")
    return xr.Dataset(
        {
            "exp_bos_effect": (dims, eff),
            "exp_bos_c": (dims, c_int),
            "exp_bos_c_baseline": (dims, c_base),
            "exp_bos_sink_heads": (("bos_replacement",), n_sink),
        },
        coords={
            "bos_replacement": reps,
            "bos_reading": list(BOS_READINGS),
            "exp_window": list(wins),
            "stat": list(STAT),
        },
        attrs={"exp_bos_sink_tau": sink_tau, "exp_bos_target": target},
    )


def _ablation_block(ps: PromptSet, wins: Sequence[str], boots: Mapping, layer_boots: Mapping):
    """Layer-local vs whole-forward ablation (:data:`ABLATIONS`), pooled and per layer, the two
    runs' replicates paired through the shared counts."""
    nw, nt, nl = len(wins), len(TARGETS), len(ps.layers)
    pooled = np.full((nw, nt, len(ABLATIONS), 3), np.nan)
    per_layer = np.full((nw, nt, nl, len(ABLATIONS), 3), np.nan)
    for wi, w in enumerate(wins):
        for ti, t in enumerate(TARGETS):
            (le, lb), (we, wb) = boots[LOCAL_RUN, w, t], boots[WHOLE_RUN, w, t]
            pooled[wi, ti] = [ps.ci(lb, le), ps.ci(wb, we), ps.ci(lb - wb, le - we)]
            (lle, llb), (wle, wlb) = layer_boots[LOCAL_RUN, w, t], layer_boots[WHOLE_RUN, w, t]
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
