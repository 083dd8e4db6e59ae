"""Figures of paper 2 (Ruscio et al. 2026): leakage by layer, component shares, head maps, position 0.

Every function draws from a :func:`causalpos.paper2.summary.assemble.leakage_summary` dataset (or a
:func:`causalpos.paper2.position0.trajectory` dataset), saves to every path in ``paths`` and
returns the numbers it plotted, so tests can check the figure against the summary. Layers are
0-indexed in the stores; the figures say "layer (0-indexed)".

The leakage figures draw the headline reading (:mod:`causalpos.paper2.summary.headline`: the content-free
ΔR² of the expected map, and paper 2 §3 in one unit, :mod:`causalpos.paper2.decomposition`). The
per-prompt reading reads token content as position and fails its negative control; where it is
drawn at all it comes last and says so (:data:`PER_PROMPT`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from causalpos.figures.common import DIVERGING, heatmap, save

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

__all__ = [
    "leakage_by_layer",
    "component_shares",
    "head_maps",
    "position0_std",
    "position0_conditions",
]

#: Curves of the headline's per-layer panels (one unit): component of ``exp_components_layer``
#: -> (colour, line style, line width, CI band opacity (0: no band), label). Widths fall in
#: drawing order so that curves which coincide (a random-init model: total = causal mask =
#: normaliser) stay visible as nested lines.
CURVES = {
    "total": ("#222222", "-", 3.2, 0.18, "total (causal run, log-attention)"),
    "causal_mask": ("#d62728", "-", 2.2, 0.18, "causal mask (total − residual stream)"),
    "normaliser": ("#9467bd", "-", 1.2, 0.18, "normaliser (causal run, −log Z)"),
    "residual_stream": ("#1f77b4", "-", 1.5, 0.18, "residual stream (ablation, logits)"),
    "residual_stream_paper": (
        "#1f77b4",
        "--",
        1.5,
        0.08,
        "paper 2's residual stream (ablation, log-attention)",
    ),
    "artefact": ("#ff7f0e", ":", 1.8, 0.0, "softmax edge artefact (relative logits; no CI)"),
}
#: Curves of the per-prompt reading (``decomposition_layer``, ``leakage_layer``).
PER_PROMPT_CURVES = {
    "total": ("#222222", "-", 1.5, 0.18, "total (causal, log-attn)"),
    "residual": ("#1f77b4", "-", 1.5, 0.18, "residual (bidirectional, log-attn)"),
    "causal_mask": ("#d62728", "-", 1.5, 0.18, "causal mask (total − residual)"),
    "logit": ("#2ca02c", "-", 1.5, 0.18, "logit (causal)"),
}
PER_PROMPT = "per-prompt reading (reads content as position)"
#: Rows of :func:`leakage_by_layer`, top to bottom: the headline always first.
LAYER_ROWS = {
    "headline": "headline: key-0 column modelled",
    "counted": "key-0 column counted (paper 2's fit)",
    "per_prompt": PER_PROMPT,
}
UNIT = "ΔSS / causal run's expected\nlog-attention variance (per layer)"
NO_HEADLINE = "no headline in this summary\n(leakage.reducer.expected_stats is empty)"
NOT_DRAWN = {
    "counted": "not decomposed (no ablation run of the condition)",
    "per_prompt": "per-prompt reading: drawn where no headline is",
}


def _rows(arr: xr.DataArray) -> np.ndarray:
    """``(layer, 3)`` estimate, lo, hi of a per-layer variable."""
    return arr.transpose("layer", "stat").sel(stat=["estimate", "lo", "hi"]).values


def _condition(s: xr.Dataset, condition: str) -> str:
    conds = [str(c) for c in s["exp_condition"].values]
    return condition if condition in conds else conds[0]


def _layer_panels(
    s: xr.Dataset, condition: str, causal_variant: str, per_prompt: bool | None
) -> dict[str, tuple[str, dict[str, np.ndarray]]]:
    """Row key -> (title, curves) of one summary: the headline's components on both landmark
    readings (``exp_components_layer``, the summary's first window); the causal run's headline
    (``exp_layer``) where nothing is decomposed; the per-prompt reading last, when asked (None:
    only where the summary has no headline)."""
    panels: dict[str, tuple[str, dict[str, np.ndarray]]] = {}
    if "exp_components_layer" in s:
        c = _condition(s, condition)
        comp = s["exp_components_layer"].sel(exp_condition=c, exp_window=s["exp_window"].values[0])
        for row, lm in (("headline", "modelled"), ("counted", "counted")):
            x = comp.sel(exp_landmark=lm)
            curves = {k: _rows(x.sel(component_full=k)) for k in CURVES}
            if np.isfinite(curves["total"][:, 0]).any():
                panels[row] = (f"{LAYER_ROWS[row]} · {c}", curves)
    elif "exp_layer" in s and causal_variant in s["variant"].values:
        x = s["exp_layer"].sel(
            variant=causal_variant, exp_window=s["exp_window"].values[0], target="logattn"
        )
        title = f"headline: {causal_variant} run only (not decomposed)"
        panels["headline"] = (title, {"total": _rows(x)})
    if per_prompt or (per_prompt is None and not panels):
        curves = {}
        if "decomposition_layer" in s and condition in s["condition"].values:
            dl = s["decomposition_layer"].sel(condition=condition)
            for k in ("total", "residual", "causal_mask"):
                curves[k] = _rows(dl.sel(component=k))
        if causal_variant in s["variant"].values and "leakage_layer" in s:
            curves["logit"] = _rows(s["leakage_layer"].sel(variant=causal_variant, target="logit"))
        if curves:
            panels["per_prompt"] = (PER_PROMPT, curves)
    return panels


def _draw(ax, x, curves: Mapping[str, np.ndarray], styles: Mapping[str, tuple]) -> None:
    for k, arr in curves.items():
        color, ls, lw, alpha, label = styles[k]
        ax.plot(x, arr[:, 0], color=color, ls=ls, lw=lw, label=label)
        if alpha and np.isfinite(arr[:, 1:]).any():
            ax.fill_between(x, arr[:, 1], arr[:, 2], color=color, alpha=alpha, lw=0)


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8, transform=ax.transAxes)


def leakage_by_layer(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    condition: str = "rope",
    causal_variant: str = "causal",
    per_prompt: bool | None = None,
) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Paper 2 §3 per layer on the headline, in one unit, one column per model.

    Rows (:data:`LAYER_ROWS`): the headline's components (``exp_components_layer``, key-0
    column modelled, the summary's first window, condition ``condition`` or the summary's
    first) — total, residual stream (the ablation's logits), causal mask, normaliser with CI
    bands, and paper 2's residual-stream reading (the ablation's log-attention, dashed) beside
    the softmax edge artefact (dotted) that explains it; then the same on the key-0 column
    counted (paper 2's fit). A summary with no ablation run draws its causal run's headline
    (``exp_layer``, log-attention: the same unit as the total). The per-prompt reading, when
    drawn (``per_prompt``; None: only for a summary without a headline), is the last row.

    Returns:
        model -> row -> curve -> ``(layer, 3)`` (estimate, lo, hi) as plotted, rows in drawing
        order (top first).
    """
    if not summaries:
        raise ValueError("leakage_by_layer: no summaries to plot")
    plotted = {
        m: _layer_panels(s, condition, causal_variant, per_prompt) for m, s in summaries.items()
    }
    rows = [r for r in LAYER_ROWS if any(r in p for p in plotted.values())] or ["headline"]
    if "headline" not in rows:
        rows.insert(0, "headline")
    n = len(summaries)
    fig, axes = plt.subplots(
        len(rows),
        n,
        figsize=(4.2 * n + 3.2, 3.1 * len(rows)),
        squeeze=False,
        sharey="row",
        layout="constrained",
    )
    for j, (model, s) in enumerate(summaries.items()):
        for i, row in enumerate(rows):
            ax = axes[i][j]
            if row not in plotted[model]:
                _note(ax, f"{model}\n{NO_HEADLINE if row == 'headline' else NOT_DRAWN[row]}")
                ax.set_axis_off()
                continue
            title, curves = plotted[model][row]
            styles = PER_PROMPT_CURVES if row == "per_prompt" else CURVES
            _draw(ax, s["layer"].values, curves, styles)
            ax.axhline(0.0, color="0.6", lw=0.8)
            ax.set_title(f"{model}\n{title}", fontsize=8)
            ax.set_xlabel("layer (0-indexed)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    shown: list[list[str]] = []
    for i, row in enumerate(rows):
        drawn = [ax for ax in axes[i] if ax.axison]
        if drawn:
            drawn[0].set_ylabel("ΔR² − null (mean over prompts)" if row == "per_prompt" else UNIT)
        handles = {}
        for ax in axes[i]:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
        if handles and list(handles) not in shown:  # one legend per set of curves
            shown.append(list(handles))
            axes[i][-1].legend(
                handles.values(),
                handles.keys(),
                fontsize=7,
                loc="upper left",
                bbox_to_anchor=(1.02, 1.0),
            )
    save(fig, paths)
    return {m: {r: curves for r, (_, curves) in p.items()} for m, p in plotted.items()}


#: The causal-mask share's readings: (landmark, component of ``exp_components``, label). The
#: last is paper 2's reconstructed reading, the one its 64–82 % is compared with.
SHARE_READINGS = (
    ("modelled", "share_causal_mask", "key 0 modelled · residual on ablation logits (headline)"),
    ("modelled", "share_causal_mask_paper", "key 0 modelled · residual on ablation log-attn"),
    ("counted", "share_causal_mask", "key 0 counted · residual on ablation logits"),
    (
        "counted",
        "share_causal_mask_paper",
        "key 0 counted · residual on ablation log-attn (paper 2's reading)",
    ),
)
#: Paper 2's causal-mask shares (82 % at 1B, 64 % at 3B: Llama-3.2), drawn as a band.
PAPER2_SHARE = (0.64, 0.82)
PAPER2_SHARE_LABEL = "paper 2 (counted landmark, ablation log-attention): 64–82 %"
#: (colour, marker) of the artefact-free residual reading and of paper 2's; key 0 counted: open.
_SHARE_STYLE = (("#1f77b4", "o"), ("#ff7f0e", "s"))
#: y range of the shares (a share of a total near 0 is unbounded): points beyond it are drawn
#: at its edge, with their value.
SHARE_LIMITS = (-1.0, 2.0)


def component_shares(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    conditions: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """The causal-mask share (Eq. 5) per (model, condition) on the headline, four readings
    side by side (:data:`SHARE_READINGS`: both landmark readings × the artefact-free residual
    stream and paper 2's), with CIs; paper 2's 64–82 % as a band. The summary's first window.

    Returns:
        ``"model/condition"`` -> ``(len(SHARE_READINGS), 3)`` (estimate, lo, hi) as plotted.
    """
    groups: dict[str, np.ndarray] = {}
    for model, s in summaries.items():
        if "exp_components" not in s:
            continue
        comp = s["exp_components"].sel(exp_window=s["exp_window"].values[0])
        for c in comp["exp_condition"].values:
            if conditions is not None and c not in conditions:
                continue
            x = comp.sel(exp_condition=c, stat=["estimate", "lo", "hi"])
            groups[f"{model}/{c}"] = np.stack(
                [x.sel(exp_landmark=lm, component_full=k).values for lm, k, _ in SHARE_READINGS]
            )
    fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(groups) + 2.0), 3.8))
    ax.axhspan(*PAPER2_SHARE, color="0.85", lw=0, label=PAPER2_SHARE_LABEL)
    if not groups:
        _note(ax, "no decomposition on the headline in these summaries\n" + NO_HEADLINE)
        save(fig, paths)
        return groups
    lo_lim, hi_lim = SHARE_LIMITS
    offsets = np.linspace(-0.3, 0.3, len(SHARE_READINGS))
    for k, (lm, comp_name, label) in enumerate(SHARE_READINGS):
        color, marker = _SHARE_STYLE[comp_name.endswith("_paper")]
        face = color if lm == "modelled" else "white"
        x = np.arange(len(groups)) + offsets[k]
        v = np.array([g[k] for g in groups.values()])
        ax.vlines(
            x, np.clip(v[:, 1], lo_lim, hi_lim), np.clip(v[:, 2], lo_lim, hi_lim), color=color
        )
        est = np.clip(v[:, 0], lo_lim, hi_lim)
        ax.plot(x, est, ls="none", marker=marker, mfc=face, mec=color, ms=6, label=label)
        for xi, e in zip(x, v[:, 0]):
            if np.isfinite(e) and not lo_lim <= e <= hi_lim:
                ax.annotate(f"{e:.2g}", (xi, np.clip(e, lo_lim, hi_lim)), fontsize=6, ha="center")
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
    ax.set_xticks(np.arange(len(groups)), [g.replace("/", "\n") for g in groups], fontsize=8)
    ax.set_ylabel("causal-mask share of the total")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save(fig, paths)
    return groups


TARGET_LABELS = {"logit": "logits", "logattn": "log-attention"}


def head_maps(
    summary: xr.Dataset,
    paths: Sequence[str | os.PathLike],
    *,
    variants: Sequence[str] = ("causal", "bidirectional"),
    targets: Sequence[str] = ("logit", "logattn"),
    alpha: float | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """(layer × head) maps of the headline per head (``exp_head``: each head's expected-map ΔR²,
    the summary's first window), one row per target and one column per variant; dots mark heads
    with BH q ≤ α (``exp_q``, sign-flip test). Colour limits are shared along a row.

    A summary without the headline draws a note first, then the per-prompt reading
    (``leakage_head``, ``q_value`` of the permutation test), labelled as such.

    Returns:
        ``"variant/target"`` (``"per_prompt/variant/target"`` for the per-prompt reading) ->
        ``{"estimate": (layer, head), "marked": (layer, head) bool}`` as drawn.
    """
    alpha = float(summary.attrs.get("alpha", 0.05)) if alpha is None else alpha
    variants = [v for v in variants if v in summary["variant"].values]
    if not variants:
        raise ValueError(
            f"head_maps: none of the variants are in the summary ({list(summary['variant'].values)})"
        )
    if "exp_head" in summary:
        w = summary["exp_window"].values[0]
        est = summary["exp_head"].sel(exp_window=w, stat="estimate")
        q = summary["exp_q"].sel(exp_window=w)
        prefix, label = "", "ΔR² of the head's\nexpected map"
    else:
        targets = ("logattn",)
        est, q = summary["leakage_head"].sel(stat="estimate"), summary["q_value"]
        prefix, label = "per_prompt/", "ΔR² − null\n(mean over prompts)"
    got = {
        f"{prefix}{v}/{t}": {
            "estimate": est.sel(variant=v, target=t).transpose("layer", "head").values,
            "marked": (q.sel(variant=v, target=t).transpose("layer", "head") <= alpha).values,
        }
        for t in targets
        for v in variants
    }
    nl, nh = next(iter(got.values()))["estimate"].shape
    cols = len(variants) + (prefix != "")
    fig, axes = plt.subplots(
        len(targets),
        cols,
        figsize=(max(0.25 * nh, 2.4) * cols + 1.5, (0.2 * nl + 1.8) * len(targets)),
        squeeze=False,
        layout="constrained",
    )
    if prefix:
        _note(axes[0][0], NO_HEADLINE + f"\n\nnext: {PER_PROMPT}")
        axes[0][0].set_axis_off()
    what = PER_PROMPT if prefix else "headline"
    for i, t in enumerate(targets):
        maps = [got[f"{prefix}{v}/{t}"] for v in variants]
        lim = max(float(np.nanmax(np.abs(m["estimate"]), initial=0.0)) for m in maps) or 1.0
        row = axes[i][cols - len(variants) :]
        for ax, v, m in zip(row, variants, maps):
            im = heatmap(
                ax,
                m["estimate"],
                vmin=-lim,
                vmax=lim,
                cmap=DIVERGING,
                title=f"{v} · {TARGET_LABELS.get(t, t)}",
                labels=("head", "layer (0-indexed)"),
            )
            ax.set_aspect("auto")
            li, hi_ = np.nonzero(m["marked"])
            ax.scatter(hi_, li, s=6, c="k", marker="o")
        for ax in row[1:]:
            ax.set_ylabel("")
        fig.colorbar(im, ax=list(row), shrink=0.9, label=label)
    fig.suptitle(f"{what}; dots: BH q ≤ {alpha:g}", fontsize=9)
    save(fig, paths)
    return got


def position0_std(
    trajectories: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    var: str = "ratio",
) -> dict[str, np.ndarray]:
    """Cross-prompt spread of the position-0 residual stream by layer, one line per condition.

    A symmetric-log y axis keeps the exact zeros of a fixed-BOS causal model visible next to the
    positive spreads of bidirectional or varying-token-0 runs.

    Returns:
        label -> ``(layer,)`` values of ``var`` as plotted.
    """
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    plotted = {}
    for label, tr in trajectories.items():
        y = tr[var].values
        ax.plot(tr["layer"].values, y, marker="o", ms=3, lw=1.2, label=label)
        plotted[label] = y
    finite = np.concatenate(
        [v[np.isfinite(v) & (v > 0)] for v in plotted.values()] + [np.array([1e-6])]
    )
    ax.set_yscale("symlog", linthresh=float(finite.min()))
    ax.set_xlabel("layer (0 = embedding)")
    ax.set_ylabel(
        {"ratio": "cross-prompt std / mean norm", "std": "cross-prompt std"}.get(var, var)
    )
    ax.legend(fontsize=7)
    save(fig, paths)
    return plotted


def position0_conditions(
    stores: Mapping[str, xr.Dataset], paths: Sequence[str | os.PathLike], *, var: str = "ratio"
) -> dict[str, np.ndarray]:
    """:func:`position0_std` of position-0 stores with a ``condition`` dim (one line per store and
    condition, labelled ``"<store label> · <condition>"``)."""
    lines = {}
    for label, ds in stores.items():
        if "condition" in ds.dims:
            for c in ds["condition"].values:
                lines[f"{label} · {c}"] = ds.sel(condition=c)
        else:
            lines[label] = ds
    return position0_std(lines, paths, var=var)
