"""Paper 2 per-(model, dataset) summary over forward-pass variants: CIs, permutation p / BH q,
decomposition, observational split, BOS effects, sink heads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos import stats
from causalpos.models.variants import (
    DECOMPOSITION_CONDITIONS,
    parse_variant,
    without_bos_replacement,
)
from causalpos.paper2.metric import TARGETS, decompose, null_corrected, parse_fit
from causalpos.paper2.permutation import permutation_test

#: condition -> (causal run, bidirectional run): paper 2 §3's decomposition under standard,
#: identity and scrambled RoPE (their Table 6); see causalpos.models.variants.
DEFAULT_CONDITIONS: dict[str, tuple[str, str]] = dict(DECOMPOSITION_CONDITIONS)


STAT = ("estimate", "lo", "hi")

#: Rows of ``baseline_leakage`` (claim 6): the headline fit, its linear-in-offset counterpart, and
#: the paired difference linear minus saturated.
BASELINE_ROWS = ("saturated", "linear", "linear_minus_saturated")

#: Depth trends of ``leakage_depth_trend`` (claim 3): least-squares slope per layer, last − first.
DEPTH_TRENDS = ("slope", "last_minus_first")


def linear_counterpart(fit: str) -> str | None:
    """``"saturated+query"`` -> ``"linear+query"``: the same absolute effects over the
    linear-in-offset baseline (claim 6); None when ``fit`` is already linear."""
    baseline, absolute = parse_fit(fit)
    return None if baseline == "linear" else f"linear+{absolute}"


#: What a BOS intervention's effect is measured on: the residual-stream component of §3 (the
#: bidirectional run's log-attention leakage, Table 9's C_res) or, for a causal run, its logit
#: leakage (absolute position that reached q, k; observational, not Table 9's quantity).
RESIDUAL_STREAM = "residual_stream"


def _default_bos(variants: Iterable[str]) -> dict[str, tuple[str, str, str]]:
    """Every run with a position-0 replacement -> (intervention, baseline, target).

    The baseline is the same run without the replacement (same mask and rotary embedding;
    :func:`causalpos.models.variants.without_bos_replacement`). A bidirectional intervention
    (e.g. ``bos_replace_mean+bidirectional`` against ``bidirectional``) is measured on
    log-attention: the residual-stream component of §3 itself, Table 9's C_res. A causal one
    (``bos_replace_mean`` against ``causal``) on logits: the observational residual-stream
    component (absolute position that reached q, k). The intervention's name is the run's name
    without ``bos_replace_`` (``mean+bidirectional``, ``all_gaussian``).
    """
    out = {}
    for v in variants:
        var = parse_variant(v)
        if var.bos_replace is None:
            continue
        target = "logit" if var.causal else "logattn"
        out[v.replace("bos_replace_", "", 1)] = (v, without_bos_replacement(v), target)
    return out


def bos_measure(variant: str, baseline: str, target: str) -> str:
    """:data:`RESIDUAL_STREAM` for a bidirectional intervention measured on log-attention
    against a bidirectional baseline; otherwise the target (``logit``, ``logattn``)."""
    bidirectional = not parse_variant(variant).causal and not parse_variant(baseline).causal
    return RESIDUAL_STREAM if bidirectional and target == "logattn" else target


def bos_replacement(variant: str) -> str:
    """The replacement of a BOS-intervention run: ``mean``, ``zeros``, ``token``, ``gaussian``,
    or ``all_token`` / ``all_gaussian`` ("replace all")."""
    v = parse_variant(variant)
    if v.bos_replace is None:
        return ""
    return ("all_" if v.per_prompt else "") + v.bos_replace


def _ci(samples: np.ndarray, estimate: np.ndarray, level: float) -> np.ndarray:
    lo, hi = stats.percentile_ci(samples, level)
    return np.stack([estimate, lo, hi], axis=-1)


def leakage_summary(
    stores: Mapping[str, xr.Dataset],
    *,
    fit: str = "saturated+query",
    window: str = "all",
    conditions: Mapping[str, tuple[str, str]] | None = None,
    bos: Mapping[str, tuple[str, str, str]] | None = None,
    bos_windows: Sequence[str] = ("early16", "early32", "early64", "late"),
    floor_correct: bool = True,
    n_boot: int = 2000,
    n_perm: int = 1000,
    level: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
    strata: np.ndarray | None = None,
    taus: Sequence[float] = (0.3, 0.5, 0.8),
    perm_chunk: int = 16,
    perm_variants: Sequence[str] | None = None,
) -> xr.Dataset:
    """Paper-2 leakage stage for one (model, dataset): per-head/layer/model leakage with CIs,
    permutation p and BH q per head, decomposition per condition, observational split per causal
    run, BOS effects, sink heads.

    Output variables (``stat`` = estimate, lo, hi): ``leakage_head`` (variant, target, layer, head,
    stat), ``leakage_layer``, ``leakage_model``; ``leakage_raw`` / ``null_floor`` (prompt means of
    ΔR² and of its exact permutation-null mean); ``leakage_mean_map``, ``perm_null_mean``,
    ``p_value``, ``q_value`` (prompt-mean maps), ``fraction_significant`` (variant, target);
    ``decomposition`` (condition, component, stat) and ``decomposition_layer``;
    ``decomposition_difference`` (condition, condition_ref, component, stat): condition minus
    condition_ref, prompts resampled jointly (a paired CI; with two or more conditions);
    ``observational_split`` (causal_variant, obs_term, stat); ``bos_effect``, ``bos_c_res``,
    ``bos_c_res_baseline`` (intervention, bos_window, stat); ``sink_attention`` (variant, layer,
    head), ``sink_head`` (tau, variant, layer, head) and ``sink_head_count`` (tau, variant, stat);
    ``baseline_leakage`` (variant, target, baseline, measure, stat): model-level leakage under
    ``fit`` and its linear-in-offset counterpart and their paired difference, raw and
    null-corrected (claim 6; when the stores hold the linear fit); ``leakage_depth_trend``
    (variant, target, trend, stat): slope over layers and last − first layer (claim 3).

    Args:
        stores: variant name -> merged score store holding :class:`LeakageReducer` outputs
            (``leak_*``) and optionally ``sink_attention`` (sequence, layer, head). All stores must
            cover the same sequence ids (prompts are resampled jointly across variants).
        fit, window: which fit and query window the headline numbers use.
        conditions: condition -> (causal variant, bidirectional variant); default
            :data:`DEFAULT_CONDITIONS` that have at least one run in ``stores``. A condition
            whose runs are not all in ``stores`` is not decomposed and is listed, with its
            missing runs, in the ``conditions_not_run`` attribute (never silently dropped).
        bos: intervention -> (variant, baseline variant, target); default every run with a
            position-0 replacement against the same run without it (:func:`_default_bos`).
            Interventions with a missing run go to the ``bos_not_run`` attribute.
        floor_correct: use ΔR² − (exact permutation-null mean) per prompt ("never raw", §2).
        n_boot, level: bootstrap over prompts (percentile CI).
        n_perm: within-offset permutations for the per-head test on prompt-mean maps (0 = skip).
        strata: optional per-sequence source labels (stratified bootstrap), aligned with the
            stores' sorted sequence ids.
        taus: sink-head thresholds on mean attention to key 0.
        perm_variants: variants whose heads get the permutation test (None = every variant);
            the others keep NaN p / q values. The test costs R passes over every head's map, so
            a CPU run may test the decomposition's two runs only.

    Returns:
        xr.Dataset; ``stat`` = (estimate, lo, hi). See :func:`tables` for the flat views.
    """
    parse_fit(fit)
    leak_vars = {v: ds for v, ds in stores.items() if "leak_delta" in ds}
    if not leak_vars:
        raise ValueError(
            "leakage_summary: no store holds leak_delta; run extraction with LeakageReducer"
        )
    seqs = None
    for v, ds in leak_vars.items():
        if fit not in ds["leak_fit"].values or window not in ds["leak_window"].values:
            raise ValueError(
                f"variant {v!r}: fit {fit!r} / window {window!r} not in the store "
                f"(fits {list(ds['leak_fit'].values)}, windows {list(ds['leak_window'].values)})"
            )
        s = np.sort(ds["sequence"].values)
        if seqs is None:
            seqs = s
        elif not np.array_equal(s, seqs):
            raise ValueError(
                f"variant {v!r} covers different sequence ids than the others; the bootstrap "
                "resamples prompts jointly across variants, so run every variant on the same prompts"
            )
    counts = stats.bootstrap_counts(seqs.size, n_boot, seed, strata)
    variants = list(leak_vars)
    first = leak_vars[variants[0]]
    layers, heads = first["layer"].values, first["head"].values

    def per_seq(v: str, target: str, win: str = window) -> np.ndarray:
        ds = leak_vars[v].sortby("sequence").sel(leak_fit=fit, leak_window=win, leak_target=target)
        x = ds["leak_delta"].values
        return (
            null_corrected(x, ds["leak_null"].values) if floor_correct else x
        )  # (seq, layer, head)

    nv, nl, nh = len(variants), len(layers), len(heads)
    head_ci = np.full((nv, 2, nl, nh, 3), np.nan)
    layer_ci = np.full((nv, 2, nl, 3), np.nan)
    model_ci = np.full((nv, 2, 3), np.nan)
    raw = np.full((nv, 2, nl, nh), np.nan)
    floor = np.full((nv, 2, nl, nh), np.nan)
    p_val = np.full((nv, 2, nl, nh), np.nan)
    mc_null = np.full((nv, 2, nl, nh), np.nan)
    mean_map = np.full((nv, 2, nl, nh), np.nan)
    for vi, v in enumerate(variants):
        ds = leak_vars[v].sortby("sequence").sel(leak_fit=fit, leak_window=window)
        for ti, target in enumerate(TARGETS):
            x = per_seq(v, target)
            head_ci[vi, ti] = _ci(stats.bootstrap_means(x, counts), x.mean(0), level)
            xl = x.mean(2)
            layer_ci[vi, ti] = _ci(stats.bootstrap_means(xl, counts), xl.mean(0), level)
            xm = x.mean((1, 2))
            model_ci[vi, ti] = _ci(stats.bootstrap_means(xm, counts), xm.mean(0), level)
            raw[vi, ti] = ds["leak_delta"].sel(leak_target=target).values.mean(0)
            floor[vi, ti] = ds["leak_null"].sel(leak_target=target).values.mean(0)
            if (
                n_perm > 0
                and "leak_map_sum" in ds
                and (perm_variants is None or v in perm_variants)
            ):
                maps = ds["leak_map_sum"].sel(leak_target=target).values / float(
                    ds["leak_map_count"]
                )
                res = permutation_test(
                    maps, fit=fit, window=window, n_perm=n_perm, seed=seed, chunk=perm_chunk
                )
                p_val[vi, ti], mc_null[vi, ti], mean_map[vi, ti] = (
                    res.p,
                    res.null_mean,
                    res.observed,
                )
    q_val = np.full_like(p_val, np.nan)
    frac = np.full((nv, 2), np.nan)
    for vi in range(nv):
        for ti in range(2):
            if np.isfinite(p_val[vi, ti]).any():
                # BH across (layer, head) within one model, per variant and target (§5).
                q_val[vi, ti] = stats.benjamini_hochberg(p_val[vi, ti])
                frac[vi, ti] = stats.fraction_significant(q_val[vi, ti], alpha)

    out = xr.Dataset(
        {
            "leakage_head": (("variant", "target", "layer", "head", "stat"), head_ci),
            "leakage_layer": (("variant", "target", "layer", "stat"), layer_ci),
            "leakage_model": (("variant", "target", "stat"), model_ci),
            "leakage_raw": (("variant", "target", "layer", "head"), raw),
            "null_floor": (("variant", "target", "layer", "head"), floor),
            "p_value": (("variant", "target", "layer", "head"), p_val),
            "q_value": (("variant", "target", "layer", "head"), q_val),
            "perm_null_mean": (("variant", "target", "layer", "head"), mc_null),
            "leakage_mean_map": (("variant", "target", "layer", "head"), mean_map),
            "fraction_significant": (("variant", "target"), frac),
        },
        coords={
            "variant": variants,
            "target": list(TARGETS),
            "layer": layers,
            "head": heads,
            "stat": list(STAT),
        },
    )

    # Claim 6: the same leakage under the linear-in-offset baseline, next to the saturated one,
    # with the paired difference (prompts resampled jointly). Raw ΔR² carries the inflation: the
    # within-offset permutation null of the linear fit contains the offset profile's own
    # projection (for y = f(i − j) the null equals the observation), so the corrected linear
    # leakage cannot show it by construction; both fits have the same pure-noise floor k/(N − 1),
    # k = T − 2 for query effects (metric.null_floor), so raw values compare like for like.
    linear = linear_counterpart(fit)
    if linear is not None and all(linear in ds["leak_fit"].values for ds in leak_vars.values()):
        base = np.full((nv, 2, 3, 2, 3), np.nan)
        for vi, v in enumerate(variants):
            ds = leak_vars[v].sortby("sequence")
            for ti, target in enumerate(TARGETS):
                for mi, corrected in enumerate((False, True)):
                    per_fit = []
                    for f in (fit, linear):
                        d = ds.sel(leak_fit=f, leak_window=window, leak_target=target)
                        x = d["leak_delta"].values
                        if corrected:
                            x = null_corrected(x, d["leak_null"].values)
                        per_fit.append(x.mean((1, 2)))  # (seq,)
                    per_fit.append(per_fit[1] - per_fit[0])
                    for bi, x in enumerate(per_fit):
                        base[vi, ti, bi, mi] = _ci(
                            stats.bootstrap_means(x, counts), x.mean(), level
                        )
        out["baseline_leakage"] = (("variant", "target", "baseline", "measure", "stat"), base)
        out = out.assign_coords(baseline=list(BASELINE_ROWS), measure=["raw", "corrected"])
        out.attrs["linear_fit"] = linear

    # Claim 3: the depth trend of every run's layer leakage, a least-squares slope over the layer
    # index (per layer) and last minus first layer. Both are linear in the per-prompt layer
    # means, so a bootstrap of per-prompt trends is the trend of the bootstrap means.
    if nl >= 2:
        xs = np.arange(nl, dtype=np.float64)
        w = (xs - xs.mean()) / ((xs - xs.mean()) ** 2).sum()
        trend = np.full((nv, 2, 2, 3), np.nan)
        for vi, v in enumerate(variants):
            for ti, target in enumerate(TARGETS):
                xl = per_seq(v, target).mean(2)  # (seq, layer)
                for ki, tr in enumerate((xl @ w, xl[:, -1] - xl[:, 0])):
                    trend[vi, ti, ki] = _ci(stats.bootstrap_means(tr, counts), tr.mean(), level)
        out["leakage_depth_trend"] = (("variant", "target", "trend", "stat"), trend)
        out = out.assign_coords(trend=list(DEPTH_TRENDS))

    # Decomposition (§3) per condition, at model and layer level; shares are ratios of means.
    present = set(leak_vars)
    wanted = dict(DEFAULT_CONDITIONS if conditions is None else conditions)
    if conditions is None:
        # a default condition none of whose runs was made is not part of this experiment
        wanted = {c: pair for c, pair in wanted.items() if set(pair) & present}
    conds = {c: pair for c, pair in wanted.items() if set(pair) <= present}
    conds_not_run = {
        c: [v for v in pair if v not in present] for c, pair in wanted.items() if c not in conds
    }
    comps = ("total", "residual", "causal_mask", "share_residual", "share_causal_mask")
    if conds:
        dec_m = np.full((len(conds), len(comps), 3), np.nan)
        dec_l = np.full((len(conds), len(comps), nl, 3), np.nan)
        model_level = {}
        for ci, (c, (cv, bv)) in enumerate(conds.items()):
            tot, res = per_seq(cv, "logattn"), per_seq(bv, "logattn")
            for agg, dest in (((1, 2), dec_m), ((2,), dec_l)):
                t_, r_ = tot.mean(agg), res.mean(agg)
                est = decompose(t_.mean(0), r_.mean(0))
                boot = decompose(
                    stats.bootstrap_means(t_, counts), stats.bootstrap_means(r_, counts)
                )
                for k, comp in enumerate(comps):
                    dest[ci, k] = _ci(boot[comp], est[comp], level)
                if dest is dec_m:
                    model_level[c] = (est, boot)
        out["decomposition"] = (("condition", "component", "stat"), dec_m)
        out["decomposition_layer"] = (("condition", "component", "layer", "stat"), dec_l)
        out = out.assign_coords(condition=list(conds), component=list(comps))
        if len(conds) >= 2:
            # Paired differences between conditions: every condition's replicates use the same
            # resampled prompts, so the CI of a difference is that of the replicate differences.
            diff = np.full((len(conds), len(conds), len(comps), 3), np.nan)
            for i, c in enumerate(conds):
                for j, r in enumerate(conds):
                    (ec, bc), (er, br) = model_level[c], model_level[r]
                    for k, comp in enumerate(comps):
                        diff[i, j, k] = _ci(bc[comp] - br[comp], ec[comp] - er[comp], level)
            out["decomposition_difference"] = (
                ("condition", "condition_ref", "component", "stat"),
                diff,
            )
            out = out.assign_coords(condition_ref=list(conds))

    # Observational split (§3) of every causal-mask run (the controls too, which have no
    # bidirectional twin), in units of SST(log-attention). Raw terms satisfy
    # logit + logz + cross = logattn exactly; with floor_correct the logit and logattn terms lose
    # their permutation-null means (logit's rescaled by SST(s)/SST(a)), and softmax = logattn − logit.
    causal_runs = [v for v in variants if parse_variant(v).causal]
    obs_terms = ("logit", "logz", "cross", "logattn", "softmax", "share_logit", "share_softmax")
    obs = np.full((len(causal_runs), len(obs_terms), 3), np.nan)
    for ci, cv in enumerate(causal_runs):
        ds = leak_vars[cv].sortby("sequence").sel(leak_fit=fit, leak_window=window)
        split, sst = ds["leak_split"], ds["leak_sst"]
        lg = split.sel(leak_term="logit").values
        la = split.sel(leak_term="logattn").values
        if floor_correct:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = sst.sel(leak_target="logit").values / sst.sel(leak_target="logattn").values
            lg = null_corrected(lg, ds["leak_null"].sel(leak_target="logit").values * ratio)
            la = null_corrected(la, ds["leak_null"].sel(leak_target="logattn").values)
        parts = {
            "logit": lg,
            "logz": split.sel(leak_term="logz").values,
            "cross": split.sel(leak_term="cross").values,
            "logattn": la,
        }
        per = {k: v_.mean((1, 2)) for k, v_ in parts.items()}  # (seq,)
        per["softmax"] = per["logattn"] - per["logit"]
        est = {k: v_.mean(0) for k, v_ in per.items()}
        boot = {k: stats.bootstrap_means(v_, counts) for k, v_ in per.items()}
        with np.errstate(divide="ignore", invalid="ignore"):
            for dct in (est, boot):
                dct["share_logit"] = dct["logit"] / dct["logattn"]
                dct["share_softmax"] = dct["softmax"] / dct["logattn"]
        for k, term in enumerate(obs_terms):
            obs[ci, k] = _ci(boot[term], est[term], level)
    if causal_runs:
        out["observational_split"] = (("causal_variant", "obs_term", "stat"), obs)
        out = out.assign_coords(causal_variant=causal_runs, obs_term=list(obs_terms))

    # BOS replacement (§4): effect = 1 − C_res(intervention)/C_res(baseline), early vs late queries.
    wanted_bos = dict(_default_bos(leak_vars) if bos is None else bos)
    bos_pairs = {k: t for k, t in wanted_bos.items() if t[0] in present and t[1] in present}
    bos_not_run = {
        k: [v for v in t[:2] if v not in present]
        for k, t in wanted_bos.items()
        if k not in bos_pairs
    }
    if bos_pairs:
        wins = [w for w in bos_windows if w in first["leak_window"].values]
        eff = np.full((len(bos_pairs), len(wins), 3), np.nan)
        c_int = np.full((len(bos_pairs), len(wins), 3), np.nan)
        c_base = np.full((len(bos_pairs), len(wins), 3), np.nan)
        for bi, (_name, (iv, bv, target)) in enumerate(bos_pairs.items()):
            for wi, win in enumerate(wins):
                ci_ = per_seq(iv, target, win).mean((1, 2))
                cb_ = per_seq(bv, target, win).mean((1, 2))
                bi_s, bb_s = stats.bootstrap_means(ci_, counts), stats.bootstrap_means(cb_, counts)
                with np.errstate(divide="ignore", invalid="ignore"):
                    eff[bi, wi] = _ci(1.0 - bi_s / bb_s, 1.0 - ci_.mean() / cb_.mean(), level)
                c_int[bi, wi] = _ci(bi_s, ci_.mean(), level)
                c_base[bi, wi] = _ci(bb_s, cb_.mean(), level)
        out["bos_effect"] = (("intervention", "bos_window", "stat"), eff)
        out["bos_c_res"] = (("intervention", "bos_window", "stat"), c_int)
        out["bos_c_res_baseline"] = (("intervention", "bos_window", "stat"), c_base)
        out = out.assign_coords(intervention=list(bos_pairs), bos_window=wins)

    # Sink-reading heads (§4), from the SinkReducer's per-sequence mean attention to key 0.
    sink_vars = [v for v in variants if "sink_attention" in stores[v]]
    if sink_vars:
        sink = np.full((nv, nl, nh), np.nan)
        for v in sink_vars:
            sink[variants.index(v)] = stores[v]["sink_attention"].mean("sequence").values
        out["sink_attention"] = (("variant", "layer", "head"), sink)
        taus_a = np.asarray(taus, dtype=np.float64)
        out["sink_head"] = (
            ("tau", "variant", "layer", "head"),
            sink[None] >= taus_a[:, None, None, None],
        )
        # the number of sink heads with a bootstrap CI over prompts: a head counts in a replicate
        # when its resampled prompt-mean attention to key 0 is >= tau
        n_ci = np.full((len(taus_a), nv, 3), np.nan)
        for v in sink_vars:
            vi = variants.index(v)
            per = stores[v]["sink_attention"].sortby("sequence").sel(sequence=seqs).values
            boot = stats.bootstrap_means(per, counts)  # (B, layer, head)
            for k, tau in enumerate(taus_a):
                n_boot_heads = (boot >= tau).sum((1, 2)).astype(np.float64)
                n_ci[k, vi] = _ci(n_boot_heads, float((sink[vi] >= tau).sum()), level)
        out["sink_head_count"] = (("tau", "variant", "stat"), n_ci)
        out = out.assign_coords(tau=taus_a)

    out.attrs.update(
        {
            "fit": fit,
            "window": window,
            "floor_correct": int(floor_correct),
            "n_boot": n_boot,
            "n_perm": n_perm,
            "level": level,
            "alpha": alpha,
            "seed": seed,
            "n_sequences": int(seqs.size),
            "perm_variants": list(
                variants if perm_variants is None else [v for v in variants if v in perm_variants]
            ),
            "stratified_bootstrap": int(strata is not None),
            "conditions": json.dumps(conds),
            "conditions_not_run": json.dumps(conds_not_run),
            "bos": json.dumps(bos_pairs),
            "bos_not_run": json.dumps(
                {k: {"runs": list(wanted_bos[k]), "missing": m} for k, m in bos_not_run.items()}
            ),
            "note": "leakage = mean over prompts of per-prompt dR2 (minus exact within-offset permutation-null "
            "mean when floor_correct); shares = ratios of prompt means; p/q: within-offset permutation "
            "test on prompt-mean maps, BH over (layer, head) per variant and target",
        }
    )
    return out


def tables(summary: xr.Dataset) -> dict[str, pd.DataFrame]:  # noqa: F821
    """Flat tables of a :func:`leakage_summary` result (one DataFrame per name).

    Names: ``leakage_by_model``, ``leakage_by_layer``, ``heads``, plus ``decomposition``,
    ``decomposition_by_layer``, ``observational_split`` (Table 6 style), ``bos_effects``
    (Table 9 style), ``sink_heads``, ``baseline_comparison`` (claim 6) and ``depth_trend``
    (claim 3) when the summary has them.
    """
    import pandas as pd

    def wide(da: xr.DataArray) -> pd.DataFrame:
        return da.to_dataset(dim="stat").to_dataframe().reset_index()

    out: dict[str, pd.DataFrame] = {}
    m = wide(summary["leakage_model"])
    m["fraction_significant"] = (
        summary["fraction_significant"].to_dataframe().reset_index()["fraction_significant"]
    )
    m["raw"] = (
        summary["leakage_raw"].mean(("layer", "head")).to_dataframe().reset_index()["leakage_raw"]
    )
    m["null_floor"] = (
        summary["null_floor"].mean(("layer", "head")).to_dataframe().reset_index()["null_floor"]
    )
    out["leakage_by_model"] = m
    out["leakage_by_layer"] = wide(summary["leakage_layer"])
    h = wide(summary["leakage_head"])
    for k in (
        "leakage_raw",
        "null_floor",
        "leakage_mean_map",
        "perm_null_mean",
        "p_value",
        "q_value",
    ):
        h[k] = summary[k].to_dataframe().reset_index()[k].values
    if "sink_attention" in summary:
        sink = summary["sink_attention"].to_dataframe().reset_index()
        h = h.merge(sink, on=["variant", "layer", "head"], how="left")
    out["heads"] = h
    if "decomposition" in summary:
        out["decomposition"] = wide(summary["decomposition"])
        out["decomposition_by_layer"] = wide(summary["decomposition_layer"])
    if "observational_split" in summary:
        out["observational_split"] = wide(summary["observational_split"])
    if "bos_effect" in summary:
        out["bos_effects"] = wide(summary["bos_effect"])
    if "sink_head" in summary:
        n = summary["sink_head"].sum(("layer", "head"))
        df = n.rename("n_sink_heads").to_dataframe().reset_index()
        df["fraction"] = df["n_sink_heads"] / (summary.sizes["layer"] * summary.sizes["head"])
        df["n_heads"] = summary.sizes["layer"] * summary.sizes["head"]
        if "sink_head_count" in summary:
            cnt = summary["sink_head_count"]
            for col, st in (("n_sink_heads_lo", "lo"), ("n_sink_heads_hi", "hi")):
                df[col] = cnt.sel(stat=st).to_dataframe(name=col).reset_index()[col].values
        out["sink_heads"] = df
    if "baseline_leakage" in summary:
        b = summary["baseline_leakage"].to_dataset(dim="stat").to_dataframe().reset_index()
        b["linear_fit"] = summary.attrs.get("linear_fit", "")
        out["baseline_comparison"] = b
    if "leakage_depth_trend" in summary:
        out["depth_trend"] = wide(summary["leakage_depth_trend"])
    return out


def pool_small_strata(labels: np.ndarray, min_size: int = 5) -> tuple[np.ndarray, int]:
    """Labels with every stratum of fewer than ``min_size`` prompts merged into one pooled stratum.

    A stratified bootstrap resamples each stratum within itself, so a stratum of one prompt always
    redraws that prompt (no variance) and small ones understate it by (n_s − 1)/n_s; e.g. Wikipedia
    chunks labelled by article title are almost all singletons. Returns (labels, number of
    prompts pooled).
    """
    labels = np.array([str(x) for x in np.asarray(labels).ravel()], dtype=object)
    names, counts = np.unique(labels, return_counts=True)
    small = np.isin(labels, names[counts < min_size])
    labels[small] = "(pooled small strata)"
    return labels, int(small.sum())
