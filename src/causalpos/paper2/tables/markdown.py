"""The Markdown digest of paper 2's tables (:func:`causalpos.paper2.tables.assemble.paper2_tables`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.paper2.labels import MEASURED


def _fmt(x) -> str:
    if isinstance(x, (float, np.floating)):
        if not np.isfinite(x):
            return "–"
        return f"{x:.4g}"
    return str(x)


def _ci_cell(row, name: str, pct: bool = False) -> str:
    est, lo, hi = (row.get(k, np.nan) for k in (name, f"{name}_lo", f"{name}_hi"))
    if not np.isfinite(est):
        return "–"
    if pct:
        return f"{100 * est:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"
    return f"{est:.4g} [{lo:.4g}, {hi:.4g}]"


def _markdown(df: pd.DataFrame) -> str:
    if df.empty:
        return "_(none)_\n"
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in df.columns) + " |")
    return "\n".join(lines) + "\n"


def _headline_sections(tabs: Mapping[str, pd.DataFrame], section) -> None:
    """The headline reading's sections: decomposition, leakage per run, controls."""
    dec = tabs.get("decomposition_headline", pd.DataFrame())
    if not dec.empty:
        d = dec[dec["target"] == "logattn"]
        # the ring components' run, where the table says: "not run: no 'ring' run" without one
        status = {"status": d["status"]} if "status" in d else {}
        section(
            "Headline (expected-map reading): total leakage and component shares, log-attention",
            pd.DataFrame(
                {
                    "model": d["model"],
                    "dataset": d["dataset"],
                    "condition": d["condition"],
                    "window": d["window"],
                    "total": [_ci_cell(r, "total") for _, r in d.iterrows()],
                    "residual stream": [_ci_cell(r, "residual") for _, r in d.iterrows()],
                    "causal mask": [_ci_cell(r, "causal_mask") for _, r in d.iterrows()],
                    "causal-mask share": [
                        _ci_cell(r, "share_causal_mask", True) for _, r in d.iterrows()
                    ],
                    **status,
                }
            ),
        )
    head = tabs.get("headline", pd.DataFrame())
    if not head.empty:
        h = head[head["window"] == head["window"].iloc[0]]
        section(
            "Headline (expected-map reading) per run, beside the per-prompt reading",
            pd.DataFrame(
                {
                    "model": h["model"],
                    "dataset": h["dataset"],
                    "variant": h["variant"],
                    "target": h["target"],
                    "expected-map": [_ci_cell(r, "leakage") for _, r in h.iterrows()],
                    "per-prompt": [_ci_cell(r, "per_prompt") for _, r in h.iterrows()],
                    "heads p ≤ α": h["fraction_p"],
                    "heads q ≤ α": h["fraction_significant"],
                }
            ),
        )
    bos = tabs.get("bos_headline", pd.DataFrame())
    if not bos.empty:
        section(
            "Headline (expected-map reading): BOS replacement (Table 9), 1 − C(replaced)/C(run)",
            pd.DataFrame(
                {
                    "model": bos["model"],
                    "dataset": bos["dataset"],
                    "replacement": bos["replacement"],
                    "reading": bos["bos_reading"],
                    "window": bos["window"],
                    "effect": [_ci_cell(r, "effect", True) for _, r in bos.iterrows()],
                    "C(replaced)": [_ci_cell(r, "c") for _, r in bos.iterrows()],
                    "C(run)": [_ci_cell(r, "c_baseline") for _, r in bos.iterrows()],
                }
            ),
        )
    sc = tabs.get("scale_contrast", pd.DataFrame())
    if not sc.empty:
        d = sc[(sc["target"] == "logattn") & (sc["window"] == sc["window"].iloc[0])]
        section(
            "Headline (expected-map reading): causal-mask share, model B minus model A (paired)",
            pd.DataFrame(
                {
                    "dataset": d["dataset"],
                    "model A": d["model"],
                    "model B": d["model_b"],
                    "condition": d["condition"],
                    "window": d["window"],
                    "share A": d["share_causal_mask"].map(lambda x: f"{x:.0%}"),
                    "share B": d["share_causal_mask_b"].map(lambda x: f"{x:.0%}"),
                    "B − A": [_ci_cell(r, "difference", True) for _, r in d.iterrows()],
                }
            ),
        )


def _control_sections(tabs: Mapping[str, pd.DataFrame], section) -> None:
    """The controls' sections: the position-free runs and the statistics-level plant, and the
    dose series planted in the residual stream."""
    ctl = tabs.get("controls", pd.DataFrame())
    if not ctl.empty:
        section(
            "Controls: position-free runs (negative) and a planted query effect (positive)",
            _controls_table(ctl),
        )
    doses = tabs.get("plant_doses", pd.DataFrame())
    if not doses.empty:
        section(
            "Positive control that propagates: a dose series planted in the residual stream "
            "(logits, the model's units, the layers from the plant up)",
            pd.DataFrame(
                {
                    "model": doses["model"],
                    "dataset": doses["dataset"],
                    "run": doses["variant"],
                    "layer": doses["layer"],
                    "dose": doses["dose"].map(lambda x: f"{x:.3g}"),
                    "reading": [_ci_cell(r, "leakage") for _, r in doses.iterrows()],
                    "step": [_ci_cell(r, "step") for _, r in doses.iterrows()],
                }
            ),
        )


def _controls_table(ctl: pd.DataFrame) -> pd.DataFrame:
    """The controls' rows: each reading with its CI, the negative control's in the model's units
    beside the margin declared for it (the verdicts are the scorecard's)."""
    return pd.DataFrame(
        {
            "model": ctl["model"],
            "dataset": ctl["dataset"],
            "run": ctl["variant"],
            "target": ctl["target"],
            "expected-map": [_ci_cell(r, "negative") for _, r in ctl.iterrows()],
            "model's units": [
                _ci_cell(r, "negative_modelled_model_units") for _, r in ctl.iterrows()
            ],
            "margin": ctl.get("negative_modelled_margin", np.nan),
            "per-prompt": [_ci_cell(r, "per_prompt") for _, r in ctl.iterrows()],
            "planted": ctl["planted"].map(lambda x: f"{x:.3g}"),
            "recovered": [_ci_cell(r, "planted_estimate") for _, r in ctl.iterrows()],
        }
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

    def section(name, df):
        out.append(f"\n## {name}\n\n")
        out.append(_markdown(df))

    _headline_sections(tabs, section)
    _control_sections(tabs, section)
    _per_prompt_sections(tabs, section)
    _position0_sections(tabs, section)
    return "".join(out)


def _per_prompt_sections(tabs: Mapping[str, pd.DataFrame], section) -> None:
    """The per-prompt reading's sections: decomposition, Table 6, Table 9, the observational
    split, leakage per run."""
    dec = tabs["decomposition"]
    if not dec.empty:
        section(
            "Per-prompt reading: total leakage and component shares (bidirectional ablation, Eq. 5)",
            pd.DataFrame(
                {
                    "model": dec["model"],
                    "dataset": dec["dataset"],
                    "condition": dec["condition"],
                    "status": dec["status"] if "status" in dec else MEASURED,
                    "total": [_ci_cell(r, "total") for _, r in dec.iterrows()],
                    "residual stream": [_ci_cell(r, "residual") for _, r in dec.iterrows()],
                    "causal mask": [_ci_cell(r, "causal_mask") for _, r in dec.iterrows()],
                    "residual share": [
                        _ci_cell(r, "share_residual", True) for _, r in dec.iterrows()
                    ],
                    "causal-mask share": [
                        _ci_cell(r, "share_causal_mask", True) for _, r in dec.iterrows()
                    ],
                }
            ),
        )
    rc = tabs["rope_controls"]
    if not rc.empty:
        cols = {
            "model": rc["model"],
            "dataset": rc["dataset"],
            "condition": rc["condition"],
            "total (log-attn)": [_ci_cell(r, "total") for _, r in rc.iterrows()],
            "logit": [_ci_cell(r, "logit") for _, r in rc.iterrows()],
        }
        if "obs_share_logit" in rc:
            cols["observational logit share"] = [
                _ci_cell(r, "obs_share_logit", True) for _, r in rc.iterrows()
            ]
            cols["observational softmax share"] = [
                _ci_cell(r, "obs_share_softmax", True) for _, r in rc.iterrows()
            ]
        cols["residual share (ablation)"] = [
            _ci_cell(r, "share_residual", True) for _, r in rc.iterrows()
        ]
        cols["causal-mask share (ablation)"] = [
            _ci_cell(r, "share_causal_mask", True) for _, r in rc.iterrows()
        ]
        if "share_causal_mask_minus_rope" in rc:
            cols["minus rope (paired)"] = [
                _ci_cell(r, "share_causal_mask_minus_rope", True) for _, r in rc.iterrows()
            ]
        if "status" in rc:
            cols["status"] = rc["status"]
        section("Table 6 analog: causal vs identity vs scrambled RoPE", pd.DataFrame(cols))
    _bos_and_split_sections(tabs, section)


def _bos_and_split_sections(tabs: Mapping[str, pd.DataFrame], section) -> None:
    """The per-prompt reading's Table 9, observational split and leakage per run."""
    bos = tabs["bos_effects"]
    if not bos.empty:
        section(
            "Table 9 analog: BOS-embedding replacement (effect = 1 − C_res(intervention)/C_res(baseline))",
            pd.DataFrame(
                {
                    "model": bos["model"],
                    "dataset": bos["dataset"],
                    "intervention": bos["intervention"],
                    "queries": bos["bos_window"],
                    "measured on": bos["measure"] if "measure" in bos else bos["target"],
                    "status": bos["status"] if "status" in bos else MEASURED,
                    "effect": [_ci_cell(r, "effect", True) for _, r in bos.iterrows()],
                    "C_res": [_ci_cell(r, "c_res") for _, r in bos.iterrows()],
                    "C_res baseline": [_ci_cell(r, "c_res_baseline") for _, r in bos.iterrows()],
                }
            ),
        )
    obs = tabs["observational_split"]
    if not obs.empty:
        section(
            "Observational split of the causal runs (units of SST(log-attention))",
            pd.DataFrame(
                {
                    "model": obs["model"],
                    "dataset": obs["dataset"],
                    "run": obs["causal_variant"],
                    "logit": [_ci_cell(r, "logit") for _, r in obs.iterrows()],
                    "log Z": [_ci_cell(r, "logz") for _, r in obs.iterrows()],
                    "cross": [_ci_cell(r, "cross") for _, r in obs.iterrows()],
                    "log-attention": [_ci_cell(r, "logattn") for _, r in obs.iterrows()],
                    "logit share": [_ci_cell(r, "share_logit", True) for _, r in obs.iterrows()],
                }
            ),
        )
    bm = tabs["leakage_by_model"]
    if not bm.empty:
        section(
            "Leakage per run and fraction of significant heads (BH q < α)",
            pd.DataFrame(
                {
                    "model": bm["model"],
                    "dataset": bm["dataset"],
                    "variant": bm["variant"],
                    "target": bm["target"],
                    "leakage": [
                        f"{r['estimate']:.4g} [{r['lo']:.4g}, {r['hi']:.4g}]"
                        for _, r in bm.iterrows()
                    ],
                    "raw ΔR²": bm["raw"],
                    "null floor": bm["null_floor"],
                    "significant heads": bm["fraction_significant"],
                }
            ),
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
