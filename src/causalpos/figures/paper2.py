"""Figures of paper 2 (Ruscio et al. 2026): leakage by layer, component shares, head maps, position 0.

Every function draws from a :func:`causalpos.paper2.summary.leakage_summary` dataset (or a
:func:`causalpos.paper2.position0.trajectory` dataset), saves to every path in ``paths`` and returns the
numbers it plotted, so tests can check the figure against the summary. Layers are 0-indexed in the
stores; the figures say "layer (0-indexed)".
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from causalpos.figures.common import DIVERGING, heatmap, save

__all__ = [
    "leakage_by_layer",
    "component_shares",
    "head_maps",
    "position0_std",
    "position0_conditions",
]

COLORS = {"total": "#222222", "residual": "#1f77b4", "causal_mask": "#d62728", "logit": "#2ca02c"}
LABELS = {
    "total": "total (causal, log-attn)",
    "residual": "residual stream (bidirectional)",
    "causal_mask": "causal mask (total − residual)",
    "logit": "logit (causal)",
}


def _band(ax, x, est, lo, hi, color, label):
    ax.plot(x, est, color=color, lw=1.5, label=label)
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, lw=0)


def leakage_by_layer(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    condition: str = "rope",
    causal_variant: str = "causal",
) -> dict[str, dict[str, np.ndarray]]:
    """One panel per model: leakage per layer for each component, with bootstrap CI bands.

    Components: total, residual stream, causal mask (from ``decomposition_layer`` of ``condition``)
    and the causal run's logit leakage (``leakage_layer``).

    Returns:
        model -> component -> ``(layer, 3)`` (estimate, lo, hi) as plotted.
    """
    n = len(summaries)
    if n == 0:
        raise ValueError("leakage_by_layer: no summaries to plot")
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False, sharey=True)
    plotted: dict[str, dict[str, np.ndarray]] = {}
    for ax, (model, s) in zip(axes[0], summaries.items()):
        layers = s["layer"].values
        curves = {}
        if "decomposition_layer" in s and condition in s["condition"].values:
            dl = s["decomposition_layer"].sel(condition=condition)
            for comp in ("total", "residual", "causal_mask"):
                curves[comp] = dl.sel(component=comp).values
        if causal_variant in s["variant"].values:
            curves["logit"] = s["leakage_layer"].sel(variant=causal_variant, target="logit").values
        for comp, arr in curves.items():
            _band(ax, layers, arr[:, 0], arr[:, 1], arr[:, 2], COLORS[comp], LABELS[comp])
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("layer (0-indexed)")
        plotted[model] = curves
    axes[0][0].set_ylabel("leakage ΔR² − null")
    axes[0][-1].legend(fontsize=7, loc="best")
    save(fig, paths)
    return plotted


def component_shares(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    conditions: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Stacked bars of the residual-stream and causal-mask shares per model (and condition).

    One bar per (model, condition) — models side by side for the scale/architecture comparison,
    conditions (rope, identity_rope, scrambled_rope) side by side for the Table-6 control. Error
    bars are the bootstrap CIs of each share, drawn at the top of its segment.

    Returns:
        ``"model/condition"`` -> ``(2, 3)``: rows share_residual, share_causal_mask; cols estimate, lo, hi.
    """
    bars: dict[str, np.ndarray] = {}
    for model, s in summaries.items():
        if "decomposition" not in s:
            continue
        for c in s["condition"].values:
            if conditions is not None and c not in conditions:
                continue
            d = s["decomposition"].sel(condition=c)
            bars[f"{model}/{c}"] = np.stack(
                [
                    d.sel(component="share_residual").values,
                    d.sel(component="share_causal_mask").values,
                ]
            )
    if not bars:
        raise ValueError(
            "component_shares: no summary has a decomposition (need causal and bidirectional runs)"
        )
    fig, ax = plt.subplots(figsize=(max(3.5, 0.9 * len(bars) + 1.5), 3.6))
    x = np.arange(len(bars))
    res = np.array([b[0] for b in bars.values()])
    msk = np.array([b[1] for b in bars.values()])
    ax.bar(x, res[:, 0], color=COLORS["residual"], label="residual stream")
    ax.bar(x, msk[:, 0], bottom=res[:, 0], color=COLORS["causal_mask"], label="causal mask")
    ax.errorbar(
        x,
        res[:, 0],
        yerr=[res[:, 0] - res[:, 1], res[:, 2] - res[:, 0]],
        fmt="none",
        ecolor="k",
        capsize=3,
    )
    top = res[:, 0] + msk[:, 0]
    ax.errorbar(
        x,
        top,
        yerr=[msk[:, 0] - msk[:, 1], msk[:, 2] - msk[:, 0]],
        fmt="none",
        ecolor="0.4",
        capsize=3,
    )
    for xi, r in zip(x, res[:, 0]):
        ax.text(xi, r / 2, f"{100 * r:.0f}%", ha="center", va="center", fontsize=7, color="w")
    ax.set_xticks(x, list(bars), rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("share of total leakage")
    ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
    ax.legend(fontsize=7, loc="upper right")
    save(fig, paths)
    return bars


def head_maps(
    summary: xr.Dataset,
    paths: Sequence[str | os.PathLike],
    *,
    variants: Sequence[str] = ("causal", "bidirectional"),
    target: str = "logattn",
    alpha: float | None = None,
) -> dict[str, np.ndarray]:
    """(layer × head) heat maps of per-head leakage, one per variant; dots mark q < α (BH).

    Returns:
        variant -> ``(layer, head)`` leakage estimates as drawn (markers at ``q_value < alpha``).
    """
    alpha = float(summary.attrs.get("alpha", 0.05)) if alpha is None else alpha
    variants = [v for v in variants if v in summary["variant"].values]
    if not variants:
        raise ValueError(
            f"head_maps: none of the variants are in the summary ({list(summary['variant'].values)})"
        )
    maps = {
        v: summary["leakage_head"].sel(variant=v, target=target, stat="estimate").values
        for v in variants
    }
    lim = max(float(np.nanmax(np.abs(m))) for m in maps.values()) or 1.0
    nl, nh = next(iter(maps.values())).shape
    fig, axes = plt.subplots(
        1, len(variants), figsize=(0.25 * nh * len(variants) + 2.5, 0.22 * nl + 1.6), squeeze=False
    )
    for ax, v in zip(axes[0], variants):
        im = heatmap(
            ax,
            maps[v],
            vmin=-lim,
            vmax=lim,
            cmap=DIVERGING,
            title=f"{v} ({target})",
            xlabel="head",
            ylabel="layer",
        )
        ax.set_aspect("auto")
        if ax is not axes[0][0]:
            ax.set_ylabel("")
        q = summary["q_value"].sel(variant=v, target=target).values
        li, hi_ = np.nonzero(q < alpha)
        ax.scatter(hi_, li, s=6, c="k", marker="o", label=f"q < {alpha:g}")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="leakage ΔR² − null")
    save(fig, paths)
    return maps


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
