"""Every paper-2 table across (model, dataset) pairs (:func:`paper2_tables`, the names of
:data:`PAPER2_TABLES`): the headline reading's frames (:mod:`causalpos.paper2.tables.headline`, the dose series': :mod:`causalpos.paper2.tables.doses`),
the per-prompt reading's (:mod:`causalpos.paper2.tables.per_prompt`) and position 0's
(:mod:`causalpos.paper2.tables.position0`), each row tagged with its model and dataset; their
Markdown digest: :mod:`causalpos.paper2.tables.markdown`."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.models.layer_kinds import GLOBAL, LAYER_KIND, block_kinds, kinds_by_layer
from causalpos.paper2.tables.doses import plant_doses_frame
from causalpos.paper2.tables.factors import factors_frame
from causalpos.paper2.tables.headline import (
    PER_PROMPT,
    bos_headline_frame,
    components_frames,
    controls_frame,
    decomposition_headline_frame,
    headline_frame,
    scale_contrast_frame,
    wide_stat,
)
from causalpos.paper2.tables.per_prompt import (
    bos_frame,
    decomposition_frame,
    per_layer_columns,
    per_prompt_tables,
    rope_controls_frame,
)
from causalpos.paper2.tables.position0 import position0_frames

#: Tables written by :func:`aggregate_leakage` (file stem -> what it holds).
PAPER2_TABLES: dict[str, str] = {
    "leakage_by_model": "leakage per (model, dataset, variant, target), mean over layers and heads, with CI, "
    "raw dR2, null floor and the fraction of heads significant after BH",
    "decomposition": "total / residual-stream / causal-mask leakage and shares per condition, with CIs",
    "leakage_by_layer": "leakage per layer (variant, target) with CIs; reading per-prompt, each "
    "layer's mask (layer_kind)",
    "decomposition_by_layer": "decomposition per layer with CIs; reading per-prompt, layer_kind",
    "rope_controls": "Table 6 analog: causal vs identity vs scrambled RoPE",
    "bos_effects": "Table 9 analog: BOS-replacement effects at early and late queries",
    "observational_split": "logit vs softmax (log Z) parts of one causal run's log-attention leakage",
    "heads": "per head: leakage with CI, p and BH q (prompt-mean map), sink attention; reading "
    "per-prompt, layer_kind",
    "sink_heads": "number / fraction of sink-reading heads at each tau",
    "position0": "position-0 residual stream: cross-prompt std per layer and condition, probes; "
    "layer_kind of the block each row follows (embedding for row 0)",
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
    "its three routes (direct_mask = normaliser + direct_cross, indirect_mask = indirect_own + "
    "indirect_cross, mask_free: not applicable where token 0 is not fixed) and their shares, "
    "the residual-stream component read on the ablation's logits (no purely relative map can "
    "produce it), causal mask = total - residual stream, the causal softmax's normaliser and the "
    "non-additive remainder, the observational split (logit, cross), the paper's reconstructed "
    "reading (ablation log-attention) with the edge artefact of its softmax measured beside it, "
    "a position-free run's residual-stream reading as the negative control; both landmark "
    "readings (key-0 column modelled, counted)",
    "decomposition_components_by_layer": "the same per layer, with each layer's layer_kind",
    "decomposition_components_by_kind": "the same pooled over the layers of each layer kind, and "
    "each kind's paired contrast to the global layers (claim 3 within one model)",
    "decomposition_mappings": "paper 2's two components (causal mask, residual stream) and the "
    "causal-mask share on each mapping, a row per mapping: ablation (paper 2's own: causal mask = "
    "direct + indirect route, residual stream = mask-free route) and mechanism (causal mask = "
    "direct route, residual stream = indirect + mask-free = the causal run's logits), pooled",
    "controls": "negative controls (every position-free run: headline in the model's units and "
    "per-prompt reading, passed / reads position / underpowered against a declared margin) and "
    "positive controls (a planted query effect of known size, recovered / not recovered)",
    "plant_doses": "the positive control that propagates: a position term planted as a dose "
    "series in a lower layer's residual stream of a position-free run (dose 0 = the unplanted "
    "run), its headline reading on logits in the model's units over the layers from the plant "
    "up, the paired step from the previous dose, dose 0 against the declared margin and the "
    "series' verdict (recovered: dose 0 within the margin and every step above 0)",
    "bos_headline": "Table 9 on the headline reading: every BOS replacement's effect "
    "1 - C(replaced)/C(run) on the residual-stream component (bidirectional), the causal total "
    "and the causal run's sink heads (log-attention), per window, with paired CIs",
    "claim3_factors": "claim 3 by intervention within one model (Gemma 3): each factor's effect "
    "(the window: causal minus no_window; the RoPE base: global_base minus causal) on the total, "
    "the logits, the direct and indirect routes and the mask-free route, in the plain run's one "
    "unit, per layer, per layer kind and over every layer, and its slope over the sliding layers "
    "with the change it implies across them, paired CIs",
    "scale_contrast": "the headline causal-mask share of one model minus another's on the same "
    "prompts (claim 4's scale shift), paired through the shared bootstrap, per condition, window "
    "and target",
}


def _position0_columns(summary: xr.Dataset) -> dict:
    """What position 0 of the prompts was (from the data store, via the summary's attrs), and how
    the prompts were drawn (``data_mode``: chunks at random offsets or document openings)."""
    fixed = summary.attrs.get("fixed_bos")
    return {
        "data_mode": str(summary.attrs.get("data_mode", "")),
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


def _block_kinds(p0: xr.Dataset, summary: xr.Dataset | None) -> list[str]:
    """The kind of each row of position 0's trajectory (embedding, then each block's attention):
    from the position-0 store where it records them, else from the pair's summary, else
    :data:`~causalpos.models.layer_kinds.GLOBAL` for every block."""
    if LAYER_KIND in p0.variables:
        return [str(k) for k in p0[LAYER_KIND].values]
    n_blocks = int(p0.sizes["layer"]) - 1
    if summary is not None and int(summary.sizes.get("layer", -1)) == n_blocks:
        return block_kinds(list(kinds_by_layer(summary).values()))
    return block_kinds([GLOBAL] * n_blocks)


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
        flat = per_prompt_tables(s)
        p0 = _position0_columns(s)
        add("leakage_by_model", flat["leakage_by_model"], model, dataset, p0)
        add("leakage_by_layer", flat["leakage_by_layer"], model, dataset)
        add("heads", flat["heads"], model, dataset)
        dec = decomposition_frame(s)
        if not dec.empty:
            add("decomposition", dec, model, dataset, {**p0, **_model_columns(s)})
        if "decomposition" in s:
            dec_layer = wide_stat(
                s["decomposition_layer"].drop_vars(LAYER_KIND, errors="ignore"),
                ["condition", "layer"],
                "component",
            )
            add(
                "decomposition_by_layer",
                per_layer_columns(dec_layer, kinds_by_layer(s), PER_PROMPT),
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
        add("rope_controls", rope_controls_frame(s), model, dataset, p0)
        bos = bos_frame(s)
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
            doses = plant_doses_frame(s)
            if not doses.empty:
                add("plant_doses", doses, model, dataset, {**_model_columns(s), **p0})
        if "exp_decomposition" in s:
            dec = decomposition_headline_frame(s)
            add("decomposition_headline", dec, model, dataset, {**_model_columns(s), **p0})
        if "exp_components" in s:
            for name, df in components_frames(s).items():
                add(name, df, model, dataset, {**_model_columns(s), **p0})
        fac = factors_frame(s)
        if not fac.empty:
            add("claim3_factors", fac, model, dataset, {**_model_columns(s), **p0})
        bos_h = bos_headline_frame(s)
        if not bos_h.empty:
            add("bos_headline", bos_h, model, dataset, {**_model_columns(s), **p0})
    for (model, dataset), p0 in (position0 or {}).items():
        df, probe = position0_frames(p0, _block_kinds(p0, summaries.get((model, dataset))))
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
