"""Paper 2 tables: the per-prompt reading's flat views of one summary, position 0, and every
table across (model, dataset) pairs (:func:`paper2_tables`); the headline reading's views are in
:mod:`causalpos.paper2.tables_headline`, their Markdown digest in :mod:`causalpos.paper2.markdown`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import xarray as xr

from causalpos import stats
from causalpos.paper2.labels import DEFAULT_CONDITIONS, bos_measure, bos_replacement
from causalpos.paper2.tables_headline import (
    bos_headline_frame,
    components_frames,
    controls_frame,
    decomposition_headline_frame,
    headline_frame,
    scale_contrast_frame,
    wide_stat,
)

#: Paper 2 Table 6 analog: the RoPE conditions and the causal run each is measured on.
ROPE_CONDITIONS: dict[str, str] = {c: runs[0] for c, runs in DEFAULT_CONDITIONS.items()}

#: ``status`` of a table row whose runs were all made.
MEASURED = "measured"


def _not_run(missing: Sequence[str]) -> str:
    return "not run: no " + ", ".join(f"{v!r}" for v in missing) + " run"


#: Tables written by :func:`aggregate_leakage` (file stem -> what it holds).
PAPER2_TABLES: dict[str, str] = {
    "leakage_by_model": "leakage per (model, dataset, variant, target), mean over layers and heads, with CI, "
    "raw dR2, null floor and the fraction of heads significant after BH",
    "decomposition": "total / residual-stream / causal-mask leakage and shares per condition, with CIs",
    "leakage_by_layer": "leakage per layer (variant, target) with CIs",
    "decomposition_by_layer": "decomposition per layer with CIs",
    "rope_controls": "Table 6 analog: causal vs identity vs scrambled RoPE",
    "bos_effects": "Table 9 analog: BOS-replacement effects at early and late queries",
    "observational_split": "logit vs softmax (log Z) parts of one causal run's log-attention leakage",
    "heads": "per head: leakage with CI, p and BH q (prompt-mean map), sink attention",
    "sink_heads": "number / fraction of sink-reading heads at each tau",
    "position0": "position-0 residual stream: cross-prompt std per layer and condition, probes",
    "position0_probes": "content probes: best layer of the position-0 probe, sink-head value probe, "
    "accuracy CIs (Wilson) and the reason when a probe was refused",
    "baseline_comparison": "claim 6: leakage under the saturated and the linear-in-offset baseline "
    "and their paired difference, raw and null-corrected, with CIs",
    "depth_trend": "claim 3: slope over layers and last minus first layer of every run's leakage, "
    "with CIs",
    "headline": "the headline (expected-map) leakage per (model, dataset, variant, window, target) "
    "with CI, its companion rho_SST, the no-landmark reading, the per-prompt reading beside it, "
    "the sign-flip test's fractions of significant heads, and each position-free run's negative "
    "control",
    "decomposition_headline": "paper 2 section 3 on the headline reading: total / residual / "
    "causal-mask leakage and shares per condition, window and target, with paired CIs",
    "decomposition_components": "paper 2 section 3 in one unit (delta SS of the expected map "
    "over the causal run's expected log-attention variance), pooled over layers and heads: total, "
    "the residual-stream component read on the ablation's logits (no purely relative map can "
    "produce it), causal mask = total - residual stream, the causal softmax's normaliser and the "
    "non-additive remainder, the observational split (logit, cross), the paper's reconstructed "
    "reading (ablation log-attention) with the edge artefact of its softmax measured beside it, "
    "a position-free run's residual-stream reading as the negative control; both landmark "
    "readings (key-0 column modelled, counted)",
    "decomposition_components_by_layer": "the same per layer",
    "controls": "negative controls (every position-free run: headline and per-prompt reading, "
    "passed or failed) and positive controls (a planted query effect of known share, recovered "
    "or not)",
    "bos_headline": "Table 9 on the headline reading: every BOS replacement's effect "
    "1 - C(replaced)/C(run) on the residual-stream component (bidirectional), the causal total "
    "and the causal run's sink heads (log-attention), per window, with paired CIs",
    "scale_contrast": "the headline causal-mask share of one model minus another's on the same "
    "prompts (claim 4's scale shift), paired through the shared bootstrap, per condition, window "
    "and target",
}


def _rope_controls(summary: xr.Dataset) -> pd.DataFrame:
    """Table 6 analog of one summary: one row per RoPE condition that was measured or has a
    missing run (``status`` says which), with the total leakage (causal run, log-attention), its
    logit leakage, the observational split's shares, the decomposition (causal run and its
    bidirectional twin) and the paired differences of the causal-mask share from every other
    condition (``share_causal_mask_minus_<condition>``, prompts resampled jointly)."""
    rows = []
    variants = list(summary["variant"].values)
    measured = list(summary["condition"].values) if "decomposition" in summary else []
    not_run = json.loads(summary.attrs.get("conditions_not_run", "{}"))
    pairs = json.loads(summary.attrs.get("conditions", "{}"))
    for cond, cv in ROPE_CONDITIONS.items():
        if cond not in measured and cond not in not_run and cv not in variants:
            continue  # neither run configured: not part of this experiment
        bv = pairs.get(cond, DEFAULT_CONDITIONS[cond])[1]
        missing = not_run.get(cond, [v for v in (cv, bv) if v not in variants])
        if cond in measured:
            status = MEASURED
        elif missing:
            status = _not_run(missing)
        else:
            status = "not decomposed: the summary was not asked for this condition"
        row = {
            "condition": cond,
            "causal_variant": cv,
            "bidirectional_variant": bv,
            "status": status,
        }
        for tgt, name in (("logattn", "total"), ("logit", "logit")):
            est, lo, hi = (
                summary["leakage_model"].sel(variant=cv, target=tgt).values
                if cv in variants
                else (np.nan, np.nan, np.nan)
            )
            row.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
        if "observational_split" in summary and cv in summary["causal_variant"].values:
            for term in ("share_logit", "share_softmax"):
                est, lo, hi = (
                    summary["observational_split"].sel(causal_variant=cv, obs_term=term).values
                )
                row.update({f"obs_{term}": est, f"obs_{term}_lo": lo, f"obs_{term}_hi": hi})
        for comp in ("residual", "causal_mask", "share_residual", "share_causal_mask"):
            est, lo, hi = (
                summary["decomposition"].sel(condition=cond, component=comp).values
                if cond in measured
                else (np.nan, np.nan, np.nan)
            )
            row.update({comp: est, f"{comp}_lo": lo, f"{comp}_hi": hi})
        has_diff = "decomposition_difference" in summary
        for ref in ROPE_CONDITIONS:
            est, lo, hi = (
                summary["decomposition_difference"]
                .sel(condition=cond, condition_ref=ref, component="share_causal_mask")
                .values
                if has_diff and cond in measured and ref in measured
                else (np.nan, np.nan, np.nan)
            )
            name = f"share_causal_mask_minus_{ref}"
            row.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def _decomposition(summary: xr.Dataset) -> pd.DataFrame:
    """Decomposition per condition (wide), with a ``status`` column; conditions with a missing
    run get a row of NaN saying which run is missing."""
    parts = []
    if "decomposition" in summary:
        df = wide_stat(summary["decomposition"], ["condition"], "component")
        df.insert(1, "status", MEASURED)
        parts.append(df)
    not_run = json.loads(summary.attrs.get("conditions_not_run", "{}"))
    if not_run:
        parts.append(
            pd.DataFrame(
                {"condition": list(not_run), "status": [_not_run(m) for m in not_run.values()]}
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _bos_table(summary: xr.Dataset) -> pd.DataFrame:
    """Table 9 analog: every BOS intervention at every window, ``measure`` saying what its
    effect is on (``residual_stream``: the bidirectional runs' log-attention leakage, Table 9's
    C_res; ``logit``: a causal run's logit leakage), ``replacement`` its kind; interventions with
    a missing run get one row saying which."""
    pairs = json.loads(summary.attrs.get("bos", "{}"))
    rows = []
    names = summary["intervention"].values if "bos_effect" in summary else []
    for name in names:
        iv, bv, target = pairs.get(str(name), ("", "", ""))
        for win in summary["bos_window"].values:
            row = {
                "intervention": str(name),
                "variant": iv,
                "baseline": bv,
                "target": target,
                "replacement": bos_replacement(iv) if iv else "",
                "measure": bos_measure(iv, bv, target) if iv else target,
                "status": MEASURED,
                "bos_window": str(win),
            }
            for var, pre in (
                ("bos_effect", "effect"),
                ("bos_c_res", "c_res"),
                ("bos_c_res_baseline", "c_res_baseline"),
            ):
                est, lo, hi = summary[var].sel(intervention=name, bos_window=win).values
                row.update({pre: est, f"{pre}_lo": lo, f"{pre}_hi": hi})
            rows.append(row)
    for name, info in json.loads(summary.attrs.get("bos_not_run", "{}")).items():
        iv, bv, target = info["runs"]
        rows.append(
            {
                "intervention": name,
                "variant": iv,
                "baseline": bv,
                "target": target,
                "replacement": bos_replacement(iv),
                "measure": bos_measure(iv, bv, target),
                "status": _not_run(info["missing"]),
                "bos_window": "",
            }
        )
    return pd.DataFrame(rows)


def _position0_columns(summary: xr.Dataset) -> dict:
    """What position 0 of the prompts was (from the data store, via the summary's attrs)."""
    fixed = summary.attrs.get("fixed_bos")
    return {
        "fixed_bos": np.nan if fixed is None else int(fixed),
        "prefix_ids": json.dumps([int(x) for x in summary.attrs.get("prefix_ids", [])])
        if "prefix_ids" in summary.attrs
        else "",
        "prepend_bos": str(summary.attrs.get("prepend_bos", "")),
    }


def _model_columns(summary: xr.Dataset) -> dict:
    """What the model is (from the config, via the summary's attrs): ``positional`` (rope, ntk,
    swa, nope for the models trained here; empty otherwise) and ``init_of`` (the model whose
    random-init / init twin this is; empty for a trained model)."""
    return {k: str(summary.attrs.get(k, "")) for k in ("positional", "init_of")}


def _position0_frames(p0: xr.Dataset) -> tuple[pd.DataFrame, dict]:
    """(per condition and layer frame, probe summary row) of a position-0 store."""
    # Sorted: a store's variables come back in the order zarr lists its directory, which the
    # filesystem decides (two runs of the same code gave the columns in different orders).
    per_layer = sorted(v for v in p0.data_vars if set(p0[v].dims) <= {"condition", "layer"})
    df = p0[per_layer].to_dataframe().reset_index()
    # whether token 0 is the same in every prompt: claim 7 (std exactly 0) presupposes it
    df["token0_fixed"] = int(p0.attrs["token0_fixed"]) if "token0_fixed" in p0.attrs else np.nan
    n_prompts = int(p0.attrs.get("probe_n_prompts", 0))
    probe = {
        "probe_labels": p0.attrs.get("probe_labels", ""),
        "probe_n_prompts": n_prompts,
        "probe_n_classes": p0.attrs.get("probe_n_classes", 0),
        "probe_n_folds": p0.attrs.get("n_folds", np.nan),
        "probe_n_permutations": p0.attrs.get("n_perm", np.nan),
        # why a probe was refused or which classes were dropped (fewer prompts than folds)
        "probe_note": str(p0.attrs.get("probe_note", "")),
        "token0_fixed": int(p0.attrs["token0_fixed"]) if "token0_fixed" in p0.attrs else np.nan,
    }
    if "probe_accuracy" in p0:
        acc = p0["probe_accuracy"].sel(condition=p0.attrs.get("probe_condition", "causal"))
        if np.isfinite(acc.values).any():
            best = int(np.nanargmax(acc.values))
            for k in ("accuracy", "chance", "null_mean", "p_value"):
                v = p0[f"probe_{k}"].sel(condition=p0.attrs.get("probe_condition", "causal")).values
                probe[f"best_layer_{k}"] = float(v[best])
                # layer 0 = the embedding of token 0: what token 0 alone tells about the label
                probe[f"embedding_{k}"] = float(v[0])
            probe["best_layer"] = int(acc["layer"].values[best])
            for pre in ("best_layer", "embedding"):
                lo, hi = stats.wilson_ci(probe[f"{pre}_accuracy"], n_prompts)
                probe[f"{pre}_accuracy_lo"], probe[f"{pre}_accuracy_hi"] = lo, hi
            probe["min_p_value"] = float(
                np.nanmin(
                    p0["probe_p_value"]
                    .sel(condition=p0.attrs.get("probe_condition", "causal"))
                    .values
                )
            )
    probe["n_sink_heads"] = p0.attrs.get("n_sink_heads", 0)
    for k in ("accuracy", "chance", "null_mean", "p_value"):
        probe[f"sink_probe_{k}"] = p0.attrs.get(f"sink_probe_{k}", np.nan)
    # Wilson interval over the cross-validated predictions (each prompt predicted once)
    probe["sink_probe_accuracy_lo"], probe["sink_probe_accuracy_hi"] = stats.wilson_ci(
        probe["sink_probe_accuracy"], n_prompts
    )
    probe["sink_probe_note"] = str(p0.attrs.get("sink_probe_note", ""))
    return df, probe


def summary_tables(summary: xr.Dataset) -> dict[str, pd.DataFrame]:
    """Flat tables of one :func:`causalpos.paper2.summary.leakage_summary` result (one DataFrame
    per name).

    Names: ``leakage_by_model``, ``leakage_by_layer``, ``heads``, plus ``decomposition``,
    ``decomposition_by_layer``, ``observational_split`` (Table 6 style), ``bos_effects``
    (Table 9 style), ``sink_heads``, ``baseline_comparison`` (claim 6) and ``depth_trend``
    (claim 3) when the summary has them.
    """

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


def paper2_tables(
    summaries: Mapping[tuple[str, str], xr.Dataset],
    position0: Mapping[tuple[str, str], xr.Dataset] | None = None,
) -> dict[str, pd.DataFrame]:
    """Every paper-2 table over (model, dataset) pairs: :data:`PAPER2_TABLES` names -> DataFrame.

    Each frame starts with ``model`` and ``dataset`` columns; values are copied from the summaries
    (no recomputation), so a table cell equals the store's number.
    """
    parts: dict[str, list] = {name: [] for name in PAPER2_TABLES}
    probes = []

    def add(name, df, model, dataset, extra=None):
        df = df.copy()
        for k, v in (extra or {}).items():
            df[k] = v
        df.insert(0, "dataset", dataset)
        df.insert(0, "model", model)
        parts[name].append(df)

    for (model, dataset), s in summaries.items():
        flat = summary_tables(s)
        p0 = _position0_columns(s)
        add("leakage_by_model", flat["leakage_by_model"], model, dataset, p0)
        add("leakage_by_layer", flat["leakage_by_layer"], model, dataset)
        add("heads", flat["heads"], model, dataset)
        dec = _decomposition(s)
        if not dec.empty:
            add("decomposition", dec, model, dataset, {**p0, **_model_columns(s)})
        if "decomposition" in s:
            add(
                "decomposition_by_layer",
                wide_stat(s["decomposition_layer"], ["condition", "layer"], "component"),
                model,
                dataset,
            )
        if "observational_split" in s:
            add(
                "observational_split",
                wide_stat(s["observational_split"], ["causal_variant"], "obs_term"),
                model,
                dataset,
            )
        add("rope_controls", _rope_controls(s), model, dataset, p0)
        bos = _bos_table(s)
        if not bos.empty:
            add("bos_effects", bos, model, dataset, p0)
        if "sink_heads" in flat:
            add("sink_heads", flat["sink_heads"], model, dataset, _model_columns(s))
        if "baseline_comparison" in flat:
            add(
                "baseline_comparison",
                flat["baseline_comparison"],
                model,
                dataset,
                _model_columns(s),
            )
        if "depth_trend" in flat:
            add("depth_trend", flat["depth_trend"], model, dataset, {**_model_columns(s), **p0})
        head = headline_frame(s)
        if not head.empty:
            add("headline", head, model, dataset, {**_model_columns(s), **p0})
            ctl = controls_frame(s)
            if not ctl.empty:
                add("controls", ctl, model, dataset, {**_model_columns(s), **p0})
        if "exp_decomposition" in s:
            dec = decomposition_headline_frame(s)
            add("decomposition_headline", dec, model, dataset, {**_model_columns(s), **p0})
        if "exp_components" in s:
            for name, df in components_frames(s).items():
                add(name, df, model, dataset, {**_model_columns(s), **p0})
        bos_h = bos_headline_frame(s)
        if not bos_h.empty:
            add("bos_headline", bos_h, model, dataset, {**_model_columns(s), **p0})
    for (model, dataset), p0 in (position0 or {}).items():
        df, probe = _position0_frames(p0)
        add("position0", df, model, dataset)
        probes.append({"model": model, "dataset": dataset, **probe})
    out = {
        name: (
            pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame(columns=["model", "dataset"])
        )
        for name, dfs in parts.items()
    }
    out["scale_contrast"] = scale_contrast_frame(summaries)
    out["position0_probes"] = (
        pd.DataFrame(probes) if probes else pd.DataFrame(columns=["model", "dataset"])
    )
    return out
