"""Paper 2's per-prompt reading in the summary, one function per output block of a
:class:`~causalpos.paper2.prompts.PromptSet`: the mean over prompts of each prompt's ΔR² minus its
permutation-null mean (:meth:`causalpos.paper2.prompts.PromptSet.per_prompt_leakage`). It reads
token content as position (its negative control fails), so the scorecard judges nothing on it;
the headline reading is :mod:`causalpos.paper2.summary.headline`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos.models.layer_kinds import pattern
from causalpos.models.variants import parse_variant
from causalpos.paper2 import inference as inf
from causalpos.paper2.estimator.storeview import layer_kind_of, map_sums
from causalpos.paper2.extraction.design import parse_fit
from causalpos.paper2.extraction.metric import TARGETS, null_corrected
from causalpos.paper2.labels import DEFAULT_CONDITIONS, LANDMARKS, STAT
from causalpos.paper2.prompts import PromptSet
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary.permutation import permutation_test

#: Components of the per-prompt reading's decomposition (§3, Eq. 5): leakages, then shares of
#: the total. The headline's one-unit components: :data:`causalpos.paper2.decomposition.COMPONENTS`.
PER_PROMPT_COMPONENTS = (
    "total",
    "residual_stream",
    "causal_mask",
    "share_residual_stream",
    "share_causal_mask",
)
#: Terms of the observational split (§3), in units of SST(log-attention), then shares.
OBS_TERMS = ("logit", "logz", "cross", "logattn", "softmax", "share_logit", "share_softmax")


def block_coords(ps: PromptSet, dims: str, **given) -> dict:
    """A summary block's coordinates ``dims`` (space-separated, in order): each from ``given``,
    else the prompt set's variants, layers and heads, or the target, stat and landmark labels."""
    known = {
        "variant": ps.variants,
        "target": list(TARGETS),
        "layer": ps.layers,
        "head": ps.heads,
        "stat": list(STAT),
        "landmark": list(LANDMARKS),
    }
    return {d: given[d] if d in given else known[d] for d in dims.split()}


def per_prompt_leakage(ps: PromptSet) -> xr.Dataset:
    """The per-prompt reading of every run and target with CIs, per head, layer and model
    (``per_prompt_leakage_{head,layer,model}``), and the prompt means of raw ΔR²
    (``per_prompt_leakage_raw``) and of its permutation-null mean (``per_prompt_null_floor``)."""
    nv, nl, nh = len(ps.variants), len(ps.layers), len(ps.heads)
    head_ci = np.full((nv, 2, nl, nh, 3), np.nan)
    layer_ci = np.full((nv, 2, nl, 3), np.nan)
    model_ci = np.full((nv, 2, 3), np.nan)
    raw, floor = (np.full((nv, 2, nl, nh), np.nan) for _ in range(2))
    for vi, v in enumerate(ps.variants):
        ds = ps.at(v)
        for ti, target in enumerate(TARGETS):
            x = ps.per_prompt_leakage(v, target)
            head_ci[vi, ti] = ps.mean_ci(x)
            layer_ci[vi, ti] = ps.mean_ci(x.mean(2))
            model_ci[vi, ti] = ps.mean_ci(x.mean((1, 2)))
            raw[vi, ti] = ds["leak_delta"].sel(leak_target=target).values.mean(0)
            floor[vi, ti] = ds["leak_null"].sel(leak_target=target).values.mean(0)
    return xr.Dataset(
        {
            "per_prompt_leakage_head": (("variant", "target", "layer", "head", "stat"), head_ci),
            "per_prompt_leakage_layer": (("variant", "target", "layer", "stat"), layer_ci),
            "per_prompt_leakage_model": (("variant", "target", "stat"), model_ci),
            "per_prompt_leakage_raw": (("variant", "target", "layer", "head"), raw),
            "per_prompt_null_floor": (("variant", "target", "layer", "head"), floor),
        },
        coords=block_coords(ps, "variant target layer head stat"),
    )


def head_tests(ps: PromptSet, settings: LeakageSettings) -> xr.Dataset:
    """Within-offset permutation test of every head's prompt-mean map (§5): ``per_prompt_p_value``,
    ``per_prompt_q_value`` (BH over (layer, head) per run and target), ``per_prompt_perm_null_mean``,
    ``per_prompt_leakage_mean_map`` and ``per_prompt_fraction_significant`` (q < ``alpha``); NaN
    for the runs not in ``perm_variants``, for every run when ``n_perm`` is 0 or the stores hold
    no maps."""
    n_perm, perm_variants = settings.n_perm, settings.perm_variants
    nv, nl, nh = len(ps.variants), len(ps.layers), len(ps.heads)
    p_val, mc_null, mean_map = (np.full((nv, 2, nl, nh), np.nan) for _ in range(3))
    for vi, v in enumerate(ps.variants):
        ds = ps.at(v)
        not_asked = perm_variants is not None and v not in perm_variants
        if n_perm <= 0 or "leak_map_sum" not in ds or not_asked:
            continue
        for ti, target in enumerate(TARGETS):
            maps = map_sums(ds, target)  # (layer, head, T, T) float64
            maps /= float(ds["leak_map_count"])  # the prompt-mean maps
            # one test per mask pattern: layers of one kind share their pairs (a sliding and a
            # global layer at T > W do not), each measured on its pairs as trained
            for idx, mask in pattern_groups(ds, maps):
                res = permutation_test(
                    maps[idx],
                    fit=ps.fit,
                    mask=mask,
                    window=ps.window,
                    n_perm=n_perm,
                    seed=settings.seed,
                    chunk=settings.perm_chunk,
                )
                p_val[vi, ti, idx] = res.p
                mc_null[vi, ti, idx] = res.null_mean
                mean_map[vi, ti, idx] = res.observed
    q_val = np.full_like(p_val, np.nan)
    frac = np.full((nv, 2), np.nan)
    for vi in range(nv):
        for ti in range(2):
            if np.isfinite(p_val[vi, ti]).any():
                # BH across (layer, head) within one model, per variant and target (§5).
                q_val[vi, ti] = inf.q_values(p_val[vi, ti])
                frac[vi, ti] = inf.fraction_below(q_val[vi, ti], settings.alpha)
    per_head = ("variant", "target", "layer", "head")
    return xr.Dataset(
        {
            "per_prompt_p_value": (per_head, p_val),
            "per_prompt_q_value": (per_head, q_val),
            "per_prompt_perm_null_mean": (per_head, mc_null),
            "per_prompt_leakage_mean_map": (per_head, mean_map),
            "per_prompt_fraction_significant": (("variant", "target"), frac),
        },
        coords=block_coords(ps, "variant target layer head"),
    )


def baseline_comparison(ps: PromptSet) -> xr.Dataset:
    """Claim 6: every run's model-level leakage under the headline fit and its linear-in-offset
    counterpart (the same absolute effects), and their paired difference linear minus saturated
    (prompts resampled jointly), raw and null-corrected (``per_prompt_baseline_leakage``; attr
    ``per_prompt_linear_fit``). Empty when the headline fit is already linear or a store lacks
    the linear fit.

    Raw ΔR² carries the inflation: the within-offset permutation null of the linear fit contains
    the offset profile's own projection (for y = f(i − j) the null equals the observation), so the
    corrected linear leakage cannot show it by construction; both fits have the same pure-noise
    floor k/(N − 1), k = T − 2 for query effects (design.Design.floor), so raw values compare like
    for like.
    """
    baseline, absolute = parse_fit(ps.fit)
    linear = f"linear+{absolute}"
    if baseline == "linear" or not all(linear in ds["leak_fit"].values for ds in ps.runs.values()):
        return xr.Dataset()
    base = np.full((len(ps.variants), 2, 3, 2, 3), np.nan)
    for vi, v in enumerate(ps.variants):
        for ti, target in enumerate(TARGETS):
            for mi, corrected in enumerate((False, True)):
                per_fit = []
                for f in (ps.fit, linear):
                    d = ps.at(v, fit=f).sel(leak_target=target)
                    x = d["leak_delta"].values
                    if corrected:
                        x = null_corrected(x, d["leak_null"].values)
                    per_fit.append(x.mean((1, 2)))  # (seq,)
                per_fit.append(per_fit[1] - per_fit[0])
                for bi, x in enumerate(per_fit):
                    base[vi, ti, bi, mi] = ps.ci(ps.boot(x), x.mean())
    return xr.Dataset(
        {
            "per_prompt_baseline_leakage": (
                ("variant", "target", "baseline", "measure", "stat"),
                base,
            )
        },
        coords=block_coords(
            ps,
            "variant target stat baseline measure",
            baseline=["saturated", "linear", "linear_minus_saturated"],
            measure=["raw", "corrected"],
        ),
        attrs={"per_prompt_linear_fit": linear},
    )


def depth_trend(ps: PromptSet) -> xr.Dataset:
    """Claim 3 (``per_prompt_leakage_depth_trend``; empty with one layer): every run's layer
    leakage's least-squares slope over the layer index (per layer) and last minus first layer.
    Both are linear in the per-prompt layer means: the trend of the bootstrap means."""
    nl = len(ps.layers)
    if nl < 2:
        return xr.Dataset()
    xs = np.arange(nl, dtype=np.float64)
    w = (xs - xs.mean()) / ((xs - xs.mean()) ** 2).sum()
    trend = np.full((len(ps.variants), 2, 2, 3), np.nan)
    for vi, v in enumerate(ps.variants):
        for ti, target in enumerate(TARGETS):
            xl = ps.per_prompt_leakage(v, target).mean(2)  # (seq, layer)
            for ki, tr in enumerate((xl @ w, xl[:, -1] - xl[:, 0])):
                trend[vi, ti, ki] = ps.ci(ps.boot(tr), tr.mean())
    return xr.Dataset(
        {"per_prompt_leakage_depth_trend": (("variant", "target", "trend", "stat"), trend)},
        coords=block_coords(ps, "variant target stat trend", trend=["slope", "last_minus_first"]),
    )


def pattern_groups(ds: xr.Dataset, maps: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(layer indices, their measured pairs (T, T) bool or None) per group of layers sharing one
    pair set: by the store's layer kinds (each kind's pattern as trained), else by the maps'
    finite patterns (None: the test reads them)."""
    kinds = layer_kind_of(ds)
    T = maps.shape[-1]
    tri = np.tril(np.ones((T, T), dtype=bool))
    groups: dict[bytes, tuple[list[int], np.ndarray | None]] = {}
    for li, layer in enumerate(ds["layer"].values.tolist()):
        mask = (pattern(kinds[layer], T) if kinds else np.isfinite(maps[li]).all(0)) & tri
        key = np.packbits(mask).tobytes()
        groups.setdefault(key, ([], mask if kinds is not None else None))[0].append(li)
    return [(np.asarray(idx), mask) for idx, mask in groups.values()]


def wanted_conditions(
    ps: PromptSet, conditions: Mapping[str, tuple[str, str]] | None = None
) -> tuple[dict[str, tuple[str, str]], dict[str, list[str]]]:
    """(conditions whose two runs are both in ``ps``, condition -> its runs that are missing).

    ``conditions`` None: :data:`DEFAULT_CONDITIONS` with at least one run made (a default
    condition none of whose runs was made is not part of this experiment)."""
    present = set(ps.runs)
    wanted = dict(DEFAULT_CONDITIONS if conditions is None else conditions)
    if conditions is None:
        wanted = {c: pair for c, pair in wanted.items() if set(pair) & present}
    conds = {c: pair for c, pair in wanted.items() if set(pair) <= present}
    not_run = {
        c: [v for v in pair if v not in present] for c, pair in wanted.items() if c not in conds
    }
    return conds, not_run


def per_prompt_components(total: np.ndarray, residual: np.ndarray) -> dict[str, np.ndarray]:
    """Paper 2 Eq. 5 on the per-prompt reading (:data:`PER_PROMPT_COMPONENTS`): causal-mask =
    total − residual-stream; shares = component / total.

    Args:
        total: leakage of the causal run (log-attention), any shape (already aggregated: shares of
            means, not means of per-prompt shares, which are unstable when a prompt's total is ~0).
        residual: leakage of the bidirectional run, same shape.
    """
    total = np.asarray(total, dtype=np.float64)
    residual = np.asarray(residual, dtype=np.float64)
    mask_part = total - residual
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "total": total,
            "residual_stream": residual,
            "causal_mask": mask_part,
            "share_residual_stream": residual / total,
            "share_causal_mask": mask_part / total,
        }


def per_prompt_decomposition(
    ps: PromptSet, conditions: Mapping[str, tuple[str, str]]
) -> xr.Dataset:
    """Paper 2 §3 on the per-prompt reading per condition (causal run, bidirectional run), model
    level (``per_prompt_decomposition``) and per layer (``per_prompt_decomposition_layer``),
    shares as ratios of prompt means; with two or more conditions their paired differences
    (``per_prompt_decomposition_difference``, condition minus condition_ref). Empty without a
    condition."""
    conds = dict(conditions)
    if not conds:
        return xr.Dataset()
    nl = len(ps.layers)
    dec_m = np.full((len(conds), len(PER_PROMPT_COMPONENTS), 3), np.nan)
    dec_l = np.full((len(conds), len(PER_PROMPT_COMPONENTS), nl, 3), np.nan)
    model_level = {}
    for ci, (c, (cv, bv)) in enumerate(conds.items()):
        tot, res = ps.per_prompt_leakage(cv, "logattn"), ps.per_prompt_leakage(bv, "logattn")
        for agg, dest in (((1, 2), dec_m), ((2,), dec_l)):
            t_, r_ = tot.mean(agg), res.mean(agg)
            est = per_prompt_components(t_.mean(0), r_.mean(0))
            boot = per_prompt_components(ps.boot(t_), ps.boot(r_))
            for k, comp in enumerate(PER_PROMPT_COMPONENTS):
                dest[ci, k] = ps.ci(boot[comp], est[comp])
            if dest is dec_m:
                model_level[c] = (est, boot)
    out = xr.Dataset(
        {
            "per_prompt_decomposition": (("per_prompt_condition", "component", "stat"), dec_m),
            "per_prompt_decomposition_layer": (
                ("per_prompt_condition", "component", "layer", "stat"),
                dec_l,
            ),
        },
        coords=block_coords(
            ps,
            "layer stat per_prompt_condition component",
            per_prompt_condition=list(conds),
            component=list(PER_PROMPT_COMPONENTS),
        ),
    )
    if len(conds) >= 2:
        # Every condition's replicates use the same resampled prompts, so the CI of a difference
        # is that of the replicate differences.
        diff = np.full((len(conds), len(conds), len(PER_PROMPT_COMPONENTS), 3), np.nan)
        for i, c in enumerate(conds):
            for j, r in enumerate(conds):
                (ec, bc), (er, br) = model_level[c], model_level[r]
                for k, comp in enumerate(PER_PROMPT_COMPONENTS):
                    diff[i, j, k] = ps.ci(bc[comp] - br[comp], ec[comp] - er[comp])
        out["per_prompt_decomposition_difference"] = (
            ("per_prompt_condition", "per_prompt_condition_ref", "component", "stat"),
            diff,
        )
        out = out.assign_coords(per_prompt_condition_ref=list(conds))
    return out


def causal_run_split(ps: PromptSet) -> xr.Dataset:
    """Observational split (§3) of every causal-mask run (the controls too), in units of
    SST(log-attention) (``per_prompt_observational_split``; empty without a causal run). Raw
    terms satisfy logit + logz + cross = logattn exactly; with floor_correct the logit and
    logattn terms lose their permutation-null means (logit's rescaled by SST(s)/SST(a)), and
    softmax = logattn − logit."""
    # a layer_bidirectional run's maps are read without the mask: not a causal-mask map
    causal_runs = [
        v for v in ps.variants if parse_variant(v).causal and not parse_variant(v).unmasked_scores
    ]
    if not causal_runs:
        return xr.Dataset()
    obs = np.full((len(causal_runs), len(OBS_TERMS), 3), np.nan)
    for ci, cv in enumerate(causal_runs):
        ds = ps.at(cv)
        split, sst = ds["leak_split"], ds["leak_sst"]
        parts = {k: split.sel(leak_term=k).values for k in ("logit", "logz", "cross", "logattn")}
        if ps.floor_correct:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = sst.sel(leak_target="logit").values / sst.sel(leak_target="logattn").values
            for k, scale in (("logit", ratio), ("logattn", 1.0)):
                null = ds["leak_null"].sel(leak_target=k).values
                parts[k] = null_corrected(parts[k], null * scale)
        per = {k: v_.mean((1, 2)) for k, v_ in parts.items()}  # (seq,)
        per["softmax"] = per["logattn"] - per["logit"]
        est = {k: v_.mean(0) for k, v_ in per.items()}
        boot = {k: ps.boot(v_) for k, v_ in per.items()}
        with np.errstate(divide="ignore", invalid="ignore"):
            for dct in (est, boot):
                dct["share_logit"] = dct["logit"] / dct["logattn"]
                dct["share_softmax"] = dct["softmax"] / dct["logattn"]
        for k, term in enumerate(OBS_TERMS):
            obs[ci, k] = ps.ci(boot[term], est[term])
    return xr.Dataset(
        {"per_prompt_observational_split": (("causal_variant", "obs_term", "stat"), obs)},
        coords={"stat": list(STAT), "causal_variant": causal_runs, "obs_term": list(OBS_TERMS)},
    )


def sink_head_counts(ps: PromptSet, taus: Sequence[float] = (0.3, 0.5, 0.8)) -> xr.Dataset:
    """Sink-reading heads (§4) from the SinkReducer's per-prompt mean attention to key 0:
    ``sink_attention`` (variant, layer, head; prompt mean), ``sink_head`` (attention ≥ tau) and
    ``sink_head_count`` with a bootstrap CI over prompts (a head counts in a replicate when its
    resampled prompt-mean attention is ≥ tau). Empty when no store holds ``sink_attention``."""
    sink_vars = [v for v in ps.variants if "sink_attention" in ps.runs[v]]
    if not sink_vars:
        return xr.Dataset()
    nv, nl, nh = len(ps.variants), len(ps.layers), len(ps.heads)
    sink = np.full((nv, nl, nh), np.nan)
    taus_a = np.asarray(taus, dtype=np.float64)
    n_ci = np.full((len(taus_a), nv, 3), np.nan)
    for v in sink_vars:
        vi = ps.variants.index(v)
        sink[vi] = ps.runs[v]["sink_attention"].mean("sequence").values
        boot = ps.boot(ps.runs[v]["sink_attention"].values)  # (B, layer, head)
        for k, tau in enumerate(taus_a):
            n_boot_heads = (boot >= tau).sum((1, 2)).astype(np.float64)
            n_ci[k, vi] = ps.ci(n_boot_heads, float((sink[vi] >= tau).sum()))
    return xr.Dataset(
        {
            "sink_attention": (("variant", "layer", "head"), sink),
            "sink_head": (
                ("tau", "variant", "layer", "head"),
                sink[None] >= taus_a[:, None, None, None],
            ),
            "sink_head_count": (("tau", "variant", "stat"), n_ci),
        },
        coords=block_coords(ps, "variant layer head stat tau", tau=taus_a),
    )
