"""The Markdown digest of paper 2's tables (:func:`causalpos.paper2.tables.assemble.paper2_tables`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos import markdown
from causalpos.paper2.labels import MEASURED


def _ci(df: pd.DataFrame, name: str, pct: bool = False) -> list[str]:
    """Column ``name`` of each row with its interval (``name_lo``, ``name_hi``)."""
    cols = [
        np.broadcast_to(df[k] if k in df else np.nan, len(df))
        for k in (name, f"{name}_lo", f"{name}_hi")
    ]
    return [markdown.interval_cell(*x, percent=pct) for x in zip(*cols)]


def _columns(df: pd.DataFrame, *names: str) -> dict[str, pd.Series]:
    """Columns of ``df`` shown under their own names."""
    return {k: df[k] for k in names}


def _headline_sections(tabs: Mapping[str, pd.DataFrame], section) -> None:
    """The headline reading's sections: decomposition, leakage per run, controls."""
    dec = tabs.get("decomposition_headline", pd.DataFrame())
    if not dec.empty:
        d = dec[dec["target"] == "logattn"]
        # the ring components' run, where the table says: "not run: no 'ring' run" without one
        status = {"status": d["status"]} if "status" in d else {}
        section(
            "Headline (expected-map reading): total leakage and component shares, log-attention",
            {
                **_columns(d, "model", "dataset", "condition", "window"),
                "total": _ci(d, "total"),
                "residual stream": _ci(d, "residual_stream"),
                "causal mask": _ci(d, "causal_mask"),
                "causal-mask share": _ci(d, "share_causal_mask", True),
                **status,
            },
        )
    head = tabs.get("headline", pd.DataFrame())
    if not head.empty:
        h = head[head["window"] == head["window"].iloc[0]]
        section(
            "Headline (expected-map reading) per run, beside the per-prompt reading",
            {
                **_columns(h, "model", "dataset", "variant", "target"),
                "expected-map": _ci(h, "leakage"),
                "per-prompt": _ci(h, "per_prompt"),
                "heads p ≤ α": h["fraction_p"],
                "heads q ≤ α": h["fraction_significant"],
            },
        )
    bos = tabs.get("bos_headline", pd.DataFrame())
    if not bos.empty:
        section(
            "Headline (expected-map reading): BOS replacement (Table 9), 1 − C(replaced)/C(run)",
            {
                **_columns(bos, "model", "dataset", "replacement"),
                "reading": bos["bos_reading"],
                "window": bos["window"],
                "effect": _ci(bos, "effect", True),
                "C(replaced)": _ci(bos, "c"),
                "C(run)": _ci(bos, "c_baseline"),
            },
        )
    sc = tabs.get("scale_contrast", pd.DataFrame())
    if not sc.empty:
        d = sc[(sc["target"] == "logattn") & (sc["window"] == sc["window"].iloc[0])]
        section(
            "Headline (expected-map reading): causal-mask share, model B minus model A (paired)",
            {
                "dataset": d["dataset"],
                "model A": d["model"],
                "model B": d["model_b"],
                **_columns(d, "condition", "window"),
                "share A": d["share_causal_mask"].map(lambda x: f"{x:.0%}"),
                "share B": d["share_causal_mask_b"].map(lambda x: f"{x:.0%}"),
                "B − A": _ci(d, "difference", True),
            },
        )


def _control_sections(tabs: Mapping[str, pd.DataFrame], section) -> None:
    """The controls' sections: the position-free runs and the statistics-level plant (each
    reading with its CI, the negative control's in the model's units beside its declared margin;
    the verdicts are the scorecard's), and the dose series planted in the residual stream."""
    ctl = tabs.get("controls", pd.DataFrame())
    if not ctl.empty:
        section(
            "Controls: position-free runs (negative) and a planted query effect (positive)",
            {
                **_columns(ctl, "model", "dataset"),
                "run": ctl["variant"],
                "target": ctl["target"],
                "expected-map": _ci(ctl, "negative"),
                "model's units": _ci(ctl, "negative_modelled_model_units"),
                "margin": ctl.get("negative_modelled_margin", np.nan),
                "per-prompt": _ci(ctl, "per_prompt"),
                "planted": ctl["planted"].map(lambda x: f"{x:.3g}"),
                "recovered": _ci(ctl, "planted_estimate"),
            },
        )
    doses = tabs.get("plant_doses", pd.DataFrame())
    if not doses.empty:
        section(
            "Positive control that propagates: a dose series planted in the residual stream "
            "(logits, the model's units, the layers from the plant up)",
            {
                **_columns(doses, "model", "dataset"),
                "run": doses["variant"],
                "layer": doses["layer"],
                "dose": doses["dose"].map(lambda x: f"{x:.3g}"),
                "reading": _ci(doses, "leakage"),
                "step": _ci(doses, "step"),
            },
        )


def paper2_markdown(
    tabs: Mapping[str, pd.DataFrame], *, title: str = "Paper 2 (Ruscio et al. 2026): tables"
) -> str:
    """A readable Markdown digest of :func:`paper2_tables` (estimates with [95 % CI])."""
    out = [
        f"# {title}\n",
        "Leakage = ΔR² of the saturated relative baseline plus absolute query effects, minus its exact "
        "within-offset permutation-null mean, averaged over prompts, layers and heads; CIs: percentile "
        "bootstrap over prompts. Full precision in the CSV files beside this one.\n",
    ]

    def section(name, table):  # a DataFrame, or its columns
        out.append(f"\n## {name}\n\n")
        out.append(markdown.frame(pd.DataFrame(table)))

    _headline_sections(tabs, section)
    _control_sections(tabs, section)
    _per_prompt_sections(tabs, section)
    _position0_sections(tabs, section)
    return "".join(out)


def _per_prompt_sections(tabs: Mapping[str, pd.DataFrame], section) -> None:
    """The per-prompt reading's sections: decomposition, Table 6, Table 9, the observational
    split, leakage per run."""
    dec = tabs["per_prompt_decomposition"]
    if not dec.empty:
        section(
            "Per-prompt reading: total leakage and component shares (bidirectional ablation, Eq. 5)",
            {
                **_columns(dec, "model", "dataset", "condition"),
                "status": dec["status"] if "status" in dec else MEASURED,
                "total": _ci(dec, "total"),
                "residual stream": _ci(dec, "residual_stream"),
                "causal mask": _ci(dec, "causal_mask"),
                "residual share": _ci(dec, "share_residual_stream", True),
                "causal-mask share": _ci(dec, "share_causal_mask", True),
            },
        )
    rc = tabs["rope_controls"]
    if not rc.empty:
        cols = {
            **_columns(rc, "model", "dataset", "condition"),
            "total (log-attn)": _ci(rc, "total"),
            "logit": _ci(rc, "logit"),
        }
        if "obs_share_logit" in rc:
            cols["observational logit share"] = _ci(rc, "obs_share_logit", True)
            cols["observational softmax share"] = _ci(rc, "obs_share_softmax", True)
        cols["residual share (ablation)"] = _ci(rc, "share_residual_stream", True)
        cols["causal-mask share (ablation)"] = _ci(rc, "share_causal_mask", True)
        if "share_causal_mask_minus_rope" in rc:
            cols["minus rope (paired)"] = _ci(rc, "share_causal_mask_minus_rope", True)
        if "status" in rc:
            cols["status"] = rc["status"]
        section("Table 6 analog: causal vs identity vs scrambled RoPE", cols)
    bos = tabs["bos_effects"]
    if not bos.empty:
        section(
            "Table 9 analog: BOS-embedding replacement (effect = 1 − C_res(intervention)/C_res(baseline))",
            {
                **_columns(bos, "model", "dataset", "intervention"),
                "queries": bos["bos_window"],
                "measured on": bos["measure"] if "measure" in bos else bos["target"],
                "status": bos["status"] if "status" in bos else MEASURED,
                "effect": _ci(bos, "effect", True),
                "C_res": _ci(bos, "c_res"),
                "C_res baseline": _ci(bos, "c_res_baseline"),
            },
        )
    obs = tabs["observational_split"]
    if not obs.empty:
        section(
            "Observational split of the causal runs (units of SST(log-attention))",
            {
                **_columns(obs, "model", "dataset"),
                "run": obs["causal_variant"],
                "logit": _ci(obs, "logit"),
                "log Z": _ci(obs, "logz"),
                "cross": _ci(obs, "cross"),
                "log-attention": _ci(obs, "logattn"),
                "logit share": _ci(obs, "share_logit", True),
            },
        )
    bm = tabs["leakage_by_model"]
    if not bm.empty:
        section(
            "Leakage per run and fraction of significant heads (BH q < α)",
            {
                **_columns(bm, "model", "dataset", "variant", "target"),
                "leakage": [
                    markdown.with_interval(*(f"{r[k]:.4g}" for k in ("estimate", "lo", "hi")))
                    for _, r in bm.iterrows()
                ],
                "raw ΔR²": bm["raw"],
                "null floor": bm["null_floor"],
                "significant heads": bm["fraction_significant"],
            },
        )


def _position0_sections(tabs: Mapping[str, pd.DataFrame], section) -> None:
    """Sink heads, position 0's trajectory and the content probes."""
    sk = tabs["sink_heads"]
    if not sk.empty:
        piv = sk.pivot_table(
            index=["model", "dataset", "variant"], columns="tau", values="fraction"
        ).reset_index()
        piv.columns = [c if isinstance(c, str) else f"τ = {c:g}" for c in piv.columns]
        section("Sink-reading heads (fraction of heads with mean attention to key 0 ≥ τ)", piv)
    p0 = tabs["position0"]
    if not p0.empty:
        g = p0.groupby(["model", "dataset", "condition"], sort=False)
        section(
            "Position-0 trajectory: cross-prompt std of the residual stream (mean over dims)",
            pd.DataFrame(
                {
                    "std (embedding)": g["std"].first(),
                    "std (last block)": g["std"].last(),
                    "max std over layers": g["std"].max(),
                    "max ratio to norm": g["ratio"].max(),
                    "exactly 0 at every layer": g["std"].apply(lambda s: bool((s == 0).all())),
                }
            ).reset_index(),
        )
    pr = tabs["position0_probes"]
    if not pr.empty:
        section("Content probes (cross-validated; chance = majority class)", pr)
