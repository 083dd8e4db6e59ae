"""Paper 2 per-(model, dataset) summary over forward-pass variants: CIs, permutation p / BH q,
decomposition, observational split, BOS effects, sink heads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos import stats
from causalpos.paper2.metric import TARGETS, decompose, null_corrected, parse_fit
from causalpos.paper2.permutation import permutation_test

DEFAULT_CONDITIONS: dict[str, tuple[str, str]] = {
    "rope": ("causal", "bidirectional"),
    "identity_rope": ("identity_rope", "identity_rope_bidirectional"),
    "scrambled_rope": ("scrambled_rope", "scrambled_rope_bidirectional"),
}


STAT = ("estimate", "lo", "hi")


def _default_bos(variants: Iterable[str]) -> dict[str, tuple[str, str, str]]:
    """bos_replace_* variants -> (intervention, baseline, target).

    A bidirectional intervention (name ending in ``_bidirectional``) is compared with the
    ``bidirectional`` run on log-attention (the residual-stream component of §3 itself); a causal
    one with the ``causal`` run on logits (the observational residual-stream component: absolute
    position that reached q, k). Decision: the spec names C_res without saying which runs exist.
    """
    out = {}
    for v in variants:
        if v.startswith("bos_replace_"):
            name = v[len("bos_replace_") :]
            if v.endswith("_bidirectional"):
                out[name] = (v, "bidirectional", "logattn")
            else:
                out[name] = (v, "causal", "logit")
    return out


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
    ``observational_split`` (causal_variant, obs_term, stat); ``bos_effect``, ``bos_c_res``,
    ``bos_c_res_baseline`` (intervention, bos_window, stat); ``sink_attention`` (variant, layer,
    head) and ``sink_head`` (tau, variant, layer, head).

    Args:
        stores: variant name -> merged score store holding :class:`LeakageReducer` outputs
            (``leak_*``) and optionally ``sink_attention`` (sequence, layer, head). All stores must
            cover the same sequence ids (prompts are resampled jointly across variants).
        fit, window: which fit and query window the headline numbers use.
        conditions: condition -> (causal variant, bidirectional variant); default
            :data:`DEFAULT_CONDITIONS`, keeping those whose variants are in ``stores``.
        bos: intervention -> (variant, baseline variant, target); default from ``bos_replace_*``
            names (:func:`_default_bos`).
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

    # Decomposition (§3) per condition, at model and layer level; shares are ratios of means.
    conds = dict(DEFAULT_CONDITIONS if conditions is None else conditions)
    conds = {c: pair for c, pair in conds.items() if pair[0] in leak_vars and pair[1] in leak_vars}
    comps = ("total", "residual", "causal_mask", "share_residual", "share_causal_mask")
    if conds:
        dec_m = np.full((len(conds), len(comps), 3), np.nan)
        dec_l = np.full((len(conds), len(comps), nl, 3), np.nan)
        for ci, (_c, (cv, bv)) in enumerate(conds.items()):
            tot, res = per_seq(cv, "logattn"), per_seq(bv, "logattn")
            for agg, dest in (((1, 2), dec_m), ((2,), dec_l)):
                t_, r_ = tot.mean(agg), res.mean(agg)
                est = decompose(t_.mean(0), r_.mean(0))
                boot = decompose(
                    stats.bootstrap_means(t_, counts), stats.bootstrap_means(r_, counts)
                )
                for k, comp in enumerate(comps):
                    dest[ci, k] = _ci(boot[comp], est[comp], level)
        out["decomposition"] = (("condition", "component", "stat"), dec_m)
        out["decomposition_layer"] = (("condition", "component", "layer", "stat"), dec_l)
        out = out.assign_coords(condition=list(conds), component=list(comps))

    # Observational split (§3) of every causal-mask run (the controls too, which have no
    # bidirectional twin), in units of SST(log-attention). Raw terms satisfy
    # logit + logz + cross = logattn exactly; with floor_correct the logit and logattn terms lose
    # their permutation-null means (logit's rescaled by SST(s)/SST(a)), and softmax = logattn − logit.
    causal_runs = [v for v in variants if "bidirectional" not in v]
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
    bos_pairs = dict(_default_bos(leak_vars) if bos is None else bos)
    bos_pairs = {k: t for k, t in bos_pairs.items() if t[0] in leak_vars and t[1] in leak_vars}
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
            "bos": json.dumps(bos_pairs),
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
    (Table 9 style) and ``sink_heads`` when the summary has them.
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
        out["sink_heads"] = df
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
