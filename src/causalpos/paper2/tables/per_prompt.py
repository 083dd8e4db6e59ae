"""Paper 2's per-prompt reading as flat tables of one summary (:func:`per_prompt_tables`), with
Table 6's RoPE controls (:func:`rope_controls_frame`), the decomposition with its not-run rows
(:func:`decomposition_frame`) and Table 9's BOS replacement (:func:`bos_frame`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.models.layer_kinds import LAYER_KIND, kinds_by_layer, with_layer_kind
from causalpos.paper2.labels import DEFAULT_CONDITIONS, MEASURED, bos_measure, bos_replacement
from causalpos.paper2.tables.headline import PER_PROMPT, ci_cells, wide_stat

#: Paper 2 Table 6 analog: the RoPE conditions and the causal run each is measured on.
ROPE_CONDITIONS: dict[str, str] = {c: runs[0] for c, runs in DEFAULT_CONDITIONS.items()}
#: The decomposition's columns of that table.
ROPE_COMPONENTS = ("residual_stream", "causal_mask", "share_residual_stream", "share_causal_mask")
#: The per-head columns of the ``heads`` table beside its leakage.
PER_HEAD = ("leakage_raw", "null_floor", "leakage_mean_map", "perm_null_mean", "p_value", "q_value")


def _not_run(missing: Sequence[str]) -> str:
    return "not run: no " + ", ".join(f"{v!r}" for v in missing) + " run"


def _cells(name: str, da: xr.DataArray | None, ok: bool, **sel) -> dict:
    """``name`` with its interval (``_lo``, ``_hi``): ``da`` at ``sel`` where ``ok``, else NaN."""
    return ci_cells(name, da.sel(**sel).values if ok else (np.nan, np.nan, np.nan))


def rope_controls_frame(summary: xr.Dataset) -> pd.DataFrame:
    """Table 6 analog of one summary: one row per RoPE condition that was measured or has a
    missing run (``status`` says which), with the total leakage (causal run, log-attention), its
    logit leakage, the observational split's shares, the decomposition (causal run and its
    bidirectional twin) and the paired differences of the causal-mask share from every other
    condition (``share_causal_mask_minus_<condition>``, prompts resampled jointly)."""
    rows = []
    variants = list(summary["variant"].values)
    measured = []
    if "per_prompt_decomposition" in summary:
        measured = list(summary["per_prompt_condition"].values)
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
        row = dict(condition=cond, causal_variant=cv, bidirectional_variant=bv, status=status)
        model = summary.get("per_prompt_leakage_model")
        for tgt, name in (("logattn", "total"), ("logit", "logit")):
            row |= _cells(name, model, cv in variants, variant=cv, target=tgt)
        if "per_prompt_observational_split" in summary and cv in summary["causal_variant"].values:
            split = summary["per_prompt_observational_split"]
            for term in ("share_logit", "share_softmax"):
                row |= _cells(f"obs_{term}", split, True, causal_variant=cv, obs_term=term)
        dec = summary.get("per_prompt_decomposition")
        for comp in ROPE_COMPONENTS:
            row |= _cells(comp, dec, cond in measured, per_prompt_condition=cond, component=comp)
        diff = summary.get("per_prompt_decomposition_difference")
        for ref in ROPE_CONDITIONS:
            sel = dict(per_prompt_condition_ref=ref, component="share_causal_mask")
            ok = diff is not None and cond in measured and ref in measured
            name = f"share_causal_mask_minus_{ref}"
            row |= _cells(name, diff, ok, per_prompt_condition=cond, **sel)
        rows.append(row)
    return pd.DataFrame(rows)


def decomposition_frame(summary: xr.Dataset) -> pd.DataFrame:
    """Decomposition per condition (wide), with a ``status`` column; conditions with a missing
    run get a row of NaN saying which run is missing."""
    parts = []
    if "per_prompt_decomposition" in summary:
        df = wide_stat(summary["per_prompt_decomposition"], ["per_prompt_condition"], "component")
        df = df.rename(columns={"per_prompt_condition": "condition"})
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


def _bos_row(name: str, runs, status: str, window: str) -> dict:
    """A ``bos_effects`` row's labels: the intervention, its runs (intervention, baseline,
    target), what it replaces and what its effect is measured on."""
    iv, bv, target = runs
    return {
        "intervention": name,
        "variant": iv,
        "baseline": bv,
        "target": target,
        "replacement": bos_replacement(iv) if iv else "",
        "measure": bos_measure(iv, bv, target) if iv else target,
        "status": status,
        "bos_window": window,
    }


def bos_frame(summary: xr.Dataset) -> pd.DataFrame:
    """Table 9 analog: every BOS intervention at every window, ``measure`` saying what its
    effect is on (``residual_stream``: the bidirectional runs' log-attention leakage, Table 9's
    C_res; ``logit``: a causal run's logit leakage), ``replacement`` its kind; interventions with
    a missing run get one row saying which."""
    pairs = json.loads(summary.attrs.get("bos", "{}"))
    rows = []
    names = summary["intervention"].values if "per_prompt_bos_effect" in summary else []
    for name in names:
        runs = pairs.get(str(name), ("", "", ""))
        for win in summary["bos_window"].values:
            row = _bos_row(str(name), runs, MEASURED, str(win))
            for var, pre in (
                ("per_prompt_bos_effect", "effect"),
                ("per_prompt_bos_c_res", "c_res"),
                ("per_prompt_bos_c_res_baseline", "c_res_baseline"),
            ):
                row |= _cells(pre, summary[var], True, intervention=name, bos_window=win)
            rows.append(row)
    for name, info in json.loads(summary.attrs.get("bos_not_run", "{}")).items():
        rows.append(_bos_row(name, info["runs"], _not_run(info["missing"]), ""))
    return pd.DataFrame(rows)


def per_layer_columns(df: pd.DataFrame, kinds, reading: str) -> pd.DataFrame:
    """A per-layer table with its ``reading`` (before ``layer``, unless it has one) and each
    layer's ``layer_kind`` (after it)."""
    out = with_layer_kind(df, kinds)
    if "reading" not in out.columns:
        out.insert(out.columns.get_loc("layer"), "reading", reading)
    return out


def per_prompt_tables(summary: xr.Dataset) -> dict[str, pd.DataFrame]:
    """Flat tables of one summary (:func:`causalpos.paper2.summary.assemble.leakage_summary`):
    ``leakage_by_model``, ``leakage_by_layer``, ``heads``, and those of the blocks the summary has
    (``sink_heads``, ``baseline_comparison``, ``depth_trend``); the per-layer ones name their
    reading and each layer's mask (:func:`per_layer_columns`). The per-prompt decomposition, the
    observational split and the BOS effects: :mod:`causalpos.paper2.tables.assemble`."""
    kinds = kinds_by_layer(summary)
    summary = summary.drop_vars(LAYER_KIND, errors="ignore")  # added back per layer below

    def wide(da: xr.DataArray) -> pd.DataFrame:
        return da.to_dataset(dim="stat").to_dataframe().reset_index()

    out: dict[str, pd.DataFrame] = {}
    m = wide(summary["per_prompt_leakage_model"])

    def pooled(name: str, mean: bool = True) -> np.ndarray:
        da = summary[name].mean(("layer", "head")) if mean else summary[name]
        return da.to_dataframe().reset_index()[name].values

    m["fraction_significant"] = pooled("per_prompt_fraction_significant", mean=False)
    m["raw"] = pooled("per_prompt_leakage_raw")
    m["null_floor"] = pooled("per_prompt_null_floor")
    out["leakage_by_model"] = m
    layer = wide(summary["per_prompt_leakage_layer"])
    out["leakage_by_layer"] = per_layer_columns(layer, kinds, PER_PROMPT)
    h = wide(summary["per_prompt_leakage_head"])
    for k in PER_HEAD:
        h[k] = pooled(f"per_prompt_{k}", mean=False)
    if "sink_attention" in summary:
        sink = summary["sink_attention"].to_dataframe().reset_index()
        h = h.merge(sink, on=["variant", "layer", "head"], how="left")
    out["heads"] = per_layer_columns(h, kinds, PER_PROMPT)
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
    if "per_prompt_baseline_leakage" in summary:
        b = wide(summary["per_prompt_baseline_leakage"])
        b["linear_fit"] = summary.attrs.get("per_prompt_linear_fit", "")
        out["baseline_comparison"] = b
    if "per_prompt_leakage_depth_trend" in summary:
        out["depth_trend"] = wide(summary["per_prompt_leakage_depth_trend"])
    return out
