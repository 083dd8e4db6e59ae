"""Paper 2's headline-reading tables (``reading`` = expected-map): the headline of every run,
its controls, the decomposition in one unit, Table 9 on the headline and the scale contrast. The
per-prompt reading's tables and the tables across (model, dataset) pairs:
:mod:`causalpos.paper2.tables.assemble`."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.models.layer_kinds import (
    GLOBAL,
    LAYER_KIND,
    kinds_by_layer,
    layer_kinds,
    masks_anything,
    with_layer_kind,
)
from causalpos.models.variants import same_pass, without_plant
from causalpos.paper2 import inference as inf
from causalpos.paper2.labels import (
    BOS_READING_TARGET,
    CONTROL_TOL,
    DEFAULT_CONDITIONS,
    LOCAL_RUN,
    MEASURED,
    STAT,
    ring_twin,
)
from causalpos.paper2.tables.routes import mappings_frame, mark_mask_free

#: ``reading`` column of the headline tables; the per-prompt tables carry ``PER_PROMPT``.
EXPECTED_MAP = "expected-map"
PER_PROMPT = "per-prompt"


def wide_stat(da: xr.DataArray, index: Sequence[str], columns: str) -> pd.DataFrame:
    """(…, ``columns``, stat) -> one row per ``index`` with ``<col>``, ``<col>_lo``, ``<col>_hi``."""
    df = da.to_dataset(dim="stat").to_dataframe().reset_index()
    wide = df.pivot(index=list(index), columns=columns, values=list(STAT))
    order = list(dict.fromkeys(da[columns].values.tolist()))
    cols = {c + s: wide[(st, c)] for c in order for st, s in zip(STAT, ("", "_lo", "_hi"))}
    return pd.DataFrame(cols).reset_index()


def stat_columns(da: xr.DataArray, name: str, keys: Sequence[str] | None = None) -> pd.DataFrame:
    """(…, stat) -> a row per coordinate with ``name``, ``name_lo``, ``name_hi`` (only the
    ``keys`` columns beside them, where given)."""
    d = da.to_dataset(dim="stat").to_dataframe().reset_index()
    d = d.rename(columns={"estimate": name, "lo": f"{name}_lo", "hi": f"{name}_hi"})
    return d if keys is None else d[[*keys, name, f"{name}_lo", f"{name}_hi"]]


def ci_cells(name: str, values) -> dict:
    """``name``, ``name_lo``, ``name_hi`` -> ``values`` (estimate, lo, hi)."""
    return dict(zip((name, f"{name}_lo", f"{name}_hi"), values))


def headline_frame(summary: xr.Dataset) -> pd.DataFrame:
    """The ``headline`` table of one summary (empty without the headline reading)."""
    if "leakage_model" not in summary:
        return pd.DataFrame()
    idx = ["variant", "window", "target"]
    df = stat_columns(summary["leakage_model"], "leakage")
    df.insert(df.columns.get_loc("window") + 2, "reading", EXPECTED_MAP)
    for da, name in (
        (summary["leakage_model_sst"], "rho_sst"),
        (summary["fraction_significant"], "fraction_significant"),
        (summary["fraction_p"], "fraction_p"),
    ):
        df = df.merge(stat_columns(da, name, idx), on=idx)
    nl = stat_columns(summary["leakage_model_nolandmark"], "no_landmark")
    df = df.merge(nl[["variant", "target", "no_landmark"]], on=["variant", "target"], how="left")
    df.loc[df["window"] != str(summary["window"].values[0]), "no_landmark"] = np.nan
    pp = stat_columns(summary["per_prompt_leakage_model"], "per_prompt", ["variant", "target"])
    df = df.merge(pp, on=["variant", "target"], how="left")
    df["per_prompt_window"] = str(summary.attrs.get("window", ""))
    free = summary["position_free"].to_series()
    df["position_free"] = df["variant"].map(free).astype(bool)
    df = df.merge(_control_units(summary), on=idx, how="left")
    if "leakage_ablation" in summary:  # Eq. 5: layer-local minus whole-forward ablation (paired)
        ab = summary["leakage_ablation"].sel(ablation="local_minus_whole")
        ab = stat_columns(ab, "local_minus_whole", idx[1:]).assign(variant=LOCAL_RUN)
        df = df.merge(ab, on=idx, how="left")
    if "baseline_leakage" in summary:  # claim 6 on the headline window: linear minus saturated
        lin = summary["baseline_leakage"].sel(fit="linear_minus_saturated")
        lin = stat_columns(lin.drop_vars("fit"), "linear_minus_saturated")
        df = df.merge(lin, on=["variant", "target"], how="left")
        lin_cols = [c for c in df.columns if c.startswith("linear_minus_saturated")]
        df.loc[df["window"] != str(summary["window"].values[0]), lin_cols] = np.nan
    df["n_sequences"] = int(summary.attrs.get("n_sequences", 0))  # the power calculation's n
    return df


def _control_units(summary: xr.Dataset) -> pd.DataFrame:
    """Rows of the causal run: the :func:`_units_columns` of the summary's first position-free
    run (``control_variant``) with the key-0 column modelled, as ``control_*`` columns."""
    idx = ["variant", "window", "target"]
    names = ["control_variant", "control_model_units", "control_model_units_lo"]
    names += ["control_model_units_hi", "control_tost_lo", "control_tost_hi", "control_margin"]
    free = _first_position_free(summary)
    if "control_units" not in summary or "causal" not in summary["variant"].values or not free:
        return pd.DataFrame(columns=idx + names)
    sel = dict(variant=free, landmark="modelled")
    cu = stat_columns(summary["control_units"].sel(**sel, drop=True), "control_model_units")
    tost = stat_columns(summary["control_tost"].sel(**sel, drop=True), "control_tost")
    cu = cu.merge(tost[idx[1:] + ["control_tost_lo", "control_tost_hi"]], on=idx[1:])
    cu["control_margin"] = cu["target"].map(summary["control_margin"].to_series())
    cu["variant"] = "causal"
    cu["control_variant"] = free
    return cu[idx + names]


def bos_headline_frame(summary: xr.Dataset) -> pd.DataFrame:
    """Table 9 on the headline: a row per (replacement, reading, window) that was run."""
    if "bos_effect" not in summary:
        return pd.DataFrame()
    idx = ["bos_replacement", "bos_reading", "window"]
    out = None
    for var, name in (("bos_effect", "effect"), ("bos_c", "c"), ("bos_c_baseline", "c_baseline")):
        d = stat_columns(summary[var], name, idx)
        out = d if out is None else out.merge(d, on=idx)
    out = out[np.isfinite(out["c_baseline"])].copy()
    out.insert(3, "reading", EXPECTED_MAP)
    out.insert(4, "target", out["bos_reading"].map(BOS_READING_TARGET))
    sinks = summary["bos_sink_heads"].to_series()
    out["n_sink_heads"] = np.where(
        out["bos_reading"] == "sink_heads", out["bos_replacement"].map(sinks), np.nan
    )
    out["sink_tau"] = summary.attrs.get("bos_sink_tau", np.nan)
    return out.rename(columns={"bos_replacement": "replacement"}).reset_index(drop=True)


def scale_contrast_frame(summaries: Mapping[tuple[str, str], xr.Dataset]) -> pd.DataFrame:
    """Claim 4's scale shift as paired contrasts: for every dataset and every two models whose
    summaries resampled the same prompt indices (``counts_digest``), the headline causal-mask
    share of the second minus the first, per condition, window and target, with the percentile
    CI of the replicates' differences. Models sharing a tokenizer read the same token sequences
    (a paired difference); across tokenizers the prompts were drawn per tokenizer, independently,
    and the same draws give the CI of independent samples."""
    by_data: dict[str, list[tuple[str, xr.Dataset]]] = {}
    for (model, dataset), s in summaries.items():
        if "share_boot" in s:
            by_data.setdefault(dataset, []).append((model, s))
    rows = []
    for dataset, runs in by_data.items():
        for (ma, sa), (mb, sb) in itertools.combinations(runs, 2):
            if sa.attrs.get("counts_digest") != sb.attrs.get("counts_digest"):
                continue  # different resampled prompts: the replicates do not pair
            level = float(sa.attrs.get("level", 0.95))
            conds = sorted(set(sa["condition"].values) & set(sb["condition"].values))
            windows = [w for w in sa["window"].values if w in sb["window"].values]
            for cond, w, t in itertools.product(conds, windows, sa["target"].values):
                sel = dict(condition=cond, window=w, target=t)
                dec = dict(sel, component="share_causal_mask", stat="estimate")
                ea = float(sa["decomposition"].sel(**dec))
                eb = float(sb["decomposition"].sel(**dec))
                if not (np.isfinite(ea) and np.isfinite(eb)):
                    continue  # a target the decomposition is not read on
                d = sb["share_boot"].sel(**sel).values.astype(np.float64)
                d = d - sa["share_boot"].sel(**sel).values
                d = d[np.isfinite(d)]
                lo, hi = inf.bounds(d, level) if d.size else (np.nan, np.nan)
                init_a, init_b = (str(run.attrs.get("init_of", "")) for run in (sa, sb))
                rows.append(
                    (ma, dataset, mb, str(cond), str(w), str(t), EXPECTED_MAP, ea, eb, eb - ea)
                    + (lo, hi, True, init_a, init_b)
                )
    cols = ["model", "dataset", "model_b", "condition", "window", "target", "reading"]
    cols += ["share_causal_mask", "share_causal_mask_b", "difference", "difference_lo"]
    cols += ["difference_hi", "paired", "init_of", "init_of_b"]
    return pd.DataFrame(rows, columns=cols)


def controls_frame(summary: xr.Dataset) -> pd.DataFrame:
    """Negative and positive controls of one summary: a row per position-free run and target."""
    head = headline_frame(summary)
    if head.empty or not head["position_free"].any():
        return pd.DataFrame()
    first = str(summary["window"].values[0])
    neg = head[head["position_free"] & (head["window"] == first)]
    rows = []
    for r in neg.itertuples(index=False):
        planted = summary["leakage_planted"].sel(variant=r.variant, target=r.target)
        pv, *est = (float(planted.sel(planted=k)) for k in planted["planted"].values)
        rows.append(
            {
                "variant": r.variant,
                "target": r.target,
                "window": r.window,
                "reading": EXPECTED_MAP,
                **ci_cells("negative", (r.leakage, r.leakage_lo, r.leakage_hi)),
                **_units_columns(summary, r.variant, r.window, r.target),
                **_planted_model_columns(summary, r.variant, r.target),
                **ci_cells("per_prompt", (r.per_prompt, r.per_prompt_lo, r.per_prompt_hi)),
                # the per-prompt reading, in its own units, judged against its tolerance
                "per_prompt_margin": CONTROL_TOL,
                "planted": pv,
                **ci_cells("planted_estimate", est),
            }
        )
    return one_row_per_pass(pd.DataFrame(rows), summary)


def one_row_per_pass(ctl: pd.DataFrame, summary: xr.Dataset) -> pd.DataFrame:
    """``ctl`` (the controls of one summary) with one row per distinct forward pass: a control
    whose variant is the same pass as an earlier one's (:func:`~causalpos.models.variants.
    same_pass`, decided from the variants' meaning and the model's windows at the run's length,
    never from the numbers) is dropped, and the row kept names it (``same_pass``)."""
    if ctl.empty:
        return ctl
    T = int(summary.attrs.get("seq_len", summary.sizes.get("query", 0)))
    windows_mask = any(masks_anything(k, T) for k in set(layer_kinds(summary)))
    kept: dict[str, list[str]] = {}
    for v in dict.fromkeys(ctl["variant"]):
        first = next((k for k in kept if same_pass(k, v, windows_mask)), None)
        kept.setdefault(v, []) if first is None else kept[first].append(v)
    out = ctl[ctl["variant"].isin(list(kept))].reset_index(drop=True)
    same = [", ".join(kept[v]) for v in out["variant"]]
    out.insert(out.columns.get_loc("variant") + 1, "same_pass", same)
    return out


def _planted_model_columns(summary: xr.Dataset, variant: str, target: str) -> dict:
    """The positive control planted in the model whose unplanted twin is ``variant`` (logits:
    a pure query term cancels in the softmax, so log-attention rows carry none)."""
    if "plant_model" not in summary or target != "logit":
        return {}
    for pv in summary["plant_variant"].values:
        if without_plant(str(pv)) != variant:
            continue
        st = summary["plant_model"].sel(plant_variant=pv)
        out = {"planted_model_variant": str(pv)}
        out |= {f"planted_model_{k}": float(st.sel(plant_stat=k)) for k in st["plant_stat"].values}
        out["planted_model_check"] = int(summary["plant_model_check"].sel(plant_variant=pv))
        return out
    return {}


def _units_columns(summary: xr.Dataset, variant: str, window: str, target: str) -> dict:
    """A position-free run's headline in the causal run's units, per landmark reading
    (``negative_<landmark>_*``): the estimate with its CI, its (1 − 2α) interval
    (``_tost_lo``, ``_tost_hi``) and the margin declared for the reading (``_margin``): the
    numbers the scorecard judges it by (:mod:`causalpos.scorecard.controls`)."""
    if "control_units" not in summary:
        return {}
    margin = float(summary["control_margin"].sel(target=target))
    out = {"negative_tost_level": 1.0 - 2.0 * float(summary.attrs["control_alpha"])}
    for lm in summary["landmark"].values:
        sel = dict(variant=variant, landmark=lm, window=window, target=target)
        pre = f"negative_{lm}"
        _, tlo, thi = (float(x) for x in summary["control_tost"].sel(**sel).values)
        out |= ci_cells(
            f"{pre}_model_units", map(float, summary["control_units"].sel(**sel).values)
        )
        out |= {f"{pre}_tost_lo": tlo, f"{pre}_tost_hi": thi, f"{pre}_margin": margin}
    return out


def components_frames(summary: xr.Dataset) -> dict[str, pd.DataFrame]:
    """``decomposition_components`` (condition, landmark, window) and ``..._by_layer`` (+ layer,
    and each layer's ``layer_kind``): every one-unit component with its CI
    (:mod:`causalpos.paper2.decomposition`), the mask-free route marked where it does not apply
    (:func:`~causalpos.paper2.tables.routes.mark_mask_free`); ``decomposition_mappings``: paper
    2's two components on each mapping (:func:`~causalpos.paper2.tables.routes.mappings_frame`)."""
    kinds = kinds_by_layer(summary)
    summary = summary.drop_vars(LAYER_KIND, errors="ignore")
    idx = ["condition", "landmark", "window"]
    out = {}
    for var, name, keys in (
        ("components", "decomposition_components", idx),
        ("components_layer", "decomposition_components_by_layer", idx + ["layer"]),
    ):
        df = wide_stat(summary[var], keys, "component_full")
        df.insert(3, "reading", EXPECTED_MAP)
        df.insert(4, "target", "logattn")
        df.insert(5, "ring_run", ring_runs(summary, df["condition"]))
        df["control_variant"] = _first_position_free(summary)
        df = mark_mask_free(df, summary)
        out[name] = with_layer_kind(df, kinds) if "layer" in keys else df
    if "components_kind" in summary:
        kind = _by_kind_frame(summary, kinds)
        out["decomposition_components_by_kind"] = mark_mask_free(kind, summary)
    out["decomposition_mappings"] = mappings_frame(out["decomposition_components"])
    return out


def _by_kind_frame(summary: xr.Dataset, kinds: Mapping) -> pd.DataFrame:
    """``decomposition_components_by_kind``: every component pooled over the layers of each kind
    (``layer_kind``, ``n_layers``), then each kind's paired contrast to the global layers
    (``layer_kind`` "<kind> minus global"); ``window_masks``: whether the kind's window masks
    anything at the sequence's length (a contrast of kinds whose windows mask nothing compares
    layers the causal pass treats alike)."""
    idx = ["condition", "landmark", "window", "layer_kind_name"]
    counts = pd.Series(list(kinds.values())).value_counts()
    T = int(summary.attrs.get("seq_len", summary.sizes.get("query", 0)))
    frames = []
    for var, suffix in (("components_kind", ""), ("components_kind_contrast", " minus global")):
        df = wide_stat(summary[var], idx, "component_full")
        df = df.rename(columns={"layer_kind_name": "layer_kind"})
        if suffix:
            df = df[df["layer_kind"] != GLOBAL]
        df["n_layers"] = df["layer_kind"].map(counts).astype("Int64")
        df["window_masks"] = [masks_anything(k, T) if T else None for k in df["layer_kind"]]
        df["layer_kind"] = df["layer_kind"] + suffix
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out.insert(4, "reading", EXPECTED_MAP)
    out.insert(5, "target", "logattn")
    out.insert(6, "ring_run", ring_runs(summary, out["condition"]))
    out["n_sequences"] = int(summary.attrs.get("n_sequences", 0))
    return out


def ring_runs(summary: xr.Dataset, conditions: Sequence[str]) -> list[str]:
    """Each condition's ring run (the ablation its residual-stream component is read on:
    :func:`~causalpos.paper2.labels.ring_twin` of its causal run), "" where the
    summary has none: its ring components read NaN."""
    runs = {str(v) for v in summary["variant"].values}
    rings = [ring_twin(DEFAULT_CONDITIONS[str(c)][0]) for c in conditions]
    return [r if r in runs else "" for r in rings]


def _first_position_free(summary: xr.Dataset) -> str:
    free = summary["position_free"]
    return next((str(v) for v in free["variant"].values if bool(free.sel(variant=v))), "")


def decomposition_headline_frame(summary: xr.Dataset) -> pd.DataFrame:
    """Rows (condition, window, target) of the headline decomposition, with the paired
    differences of the causal-mask share to every other condition
    (``share_causal_mask_minus_<condition>``), and whether its residual (the mask-free route)
    applies (``token0_fixed``, ``mask_free_status``: the numbers are kept)."""
    idx = ["condition", "window", "target"]
    dec = wide_stat(summary["decomposition"], idx, "component")
    diff = summary["decomposition_difference"].sel(component="share_causal_mask")
    for ref in diff["condition_ref"].values:
        name = f"share_causal_mask_minus_{ref}"
        dec = dec.merge(stat_columns(diff.sel(condition_ref=ref), name, idx), on=idx)
    dec.insert(3, "reading", EXPECTED_MAP)
    dec.insert(4, "ring_run", ring_runs(summary, dec["condition"]))
    rings = [ring_twin(DEFAULT_CONDITIONS[c][0]) for c in dec["condition"]]
    status = [MEASURED if r else f"not run: no {n!r} run" for r, n in zip(dec["ring_run"], rings)]
    dec.insert(5, "status", status)
    dec["n_sequences"] = int(summary.attrs.get("n_sequences", 0))
    return mark_mask_free(dec, summary)  # its residual is the mask-free route
