"""Figures of the controlled comparisons of the models trained here (the tables of
:mod:`causalpos.training.compare`): each variant's index against its init twin's by layer, the
variants side by side, and their diagonal-normalized maps.

Layers count from 0 on the axes (the index table's ``layer`` counts from 1). A panel whose data
the config did not compute is left out, and the title says what was not run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from causalpos.figures.common import (
    DIVERGING,
    GRID_STYLE,
    ci_text,
    heatmap,
    quantile_limits,
    save,
    subplot_grid,
    suptitle,
    tick_words,
)
from causalpos.figures.labels import INDEXING, LAYER_AXIS
from causalpos.figures.training import variant_color, variant_label
from causalpos.stats import ROUNDING, ordered_interval

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

#: What the index is, on every axis that shows it.
INDEX_AXIS = "non-relativeness index (logit units)"
#: What a trained / init ratio of "–" means (the index table's ``over_init`` is empty there).
NO_RATIO = "–: the twin's interval includes 0, no ratio"


def plot_index_vs_init(
    index,
    paths: Sequence[str | os.PathLike],
    *,
    title: str | None = None,
    subject: str | None = None,
    names: Mapping[str, str] | None = None,
    confidence: float = 0.95,
) -> None:
    """Per-layer index of each variant, trained (solid) vs init twin (dashed), CIs and noise floor.

    ``index``: the index table of :func:`causalpos.training.compare.comparison_tables`
    (``variant``, ``weights``, ``layer`` (from 1), ``index``, ``ci_lo``, ``ci_hi``,
    ``noise_floor``, ``over_init``). Each panel writes the trained / init ratio by layer
    (:data:`NO_RATIO`). ``subject``: the prompts (the title's subject).
    """
    variants = list(dict.fromkeys(index["variant"]))
    if not variants:
        raise ValueError("plot_index_vs_init: the index table is empty")
    n = len(variants)
    with plt.rc_context(GRID_STYLE):
        fig, axes = subplot_grid(1, n, (3.1 * n + 0.8, 3.9), sharey=True)
        for i, (ax, v) in enumerate(zip(axes[0], variants)):
            for weights, ls, alpha in (("trained", "-", 0.25), ("init", "--", 0.12)):
                sub = index[(index["variant"] == v) & (index["weights"] == weights)]
                sub = sub.sort_values("layer")
                if sub.empty:
                    continue
                c = variant_color(v, i) if weights == "trained" else "0.45"
                x = sub["layer"] - 1
                label = "trained" if weights == "trained" else "init twin"
                ax.plot(x, sub["index"], ls=ls, marker="o", ms=3, color=c, label=label)
                ax.fill_between(x, sub["ci_lo"], sub["ci_hi"], color=c, alpha=alpha, lw=0)
                ax.plot(x, sub["noise_floor"], ls=":", color=c, lw=0.8)
            tr = index[(index["variant"] == v) & (index["weights"] == "trained")]
            if "over_init" in tr and tr["over_init"].notna().any():
                ratios = ", ".join(
                    "–" if not np.isfinite(x) else f"{x:.0f}"
                    for x in tr.sort_values("layer")["over_init"]
                )
                ax.text(
                    0.03,
                    0.97,
                    f"trained / init twin by layer:\n{ratios}",
                    transform=ax.transAxes,
                    va="top",
                    fontsize=7,
                )
            ax.set_title(variant_label(v, names))
            ax.set_xlabel(LAYER_AXIS)
            ax.set_xticks(sorted(index["layer"].unique() - 1))
            ax.grid(alpha=0.3)
        # The twins' index is orders of magnitude below the trained models' (their logits are
        # near 0): a symmetric-log axis, linear below the smallest noise floor, shows both (and
        # exact zeros).
        floors = index["noise_floor"].to_numpy(float)
        floors = floors[np.isfinite(floors) & (floors > 0)]
        log = bool(floors.size and index["index"].max() > 20 * floors.min())
        if log:
            axes[0, 0].set_yscale("symlog", linthresh=float(floors.min()), linscale=0.5)
        axes[0, 0].set_ylim(bottom=0.0)
        axes[0, 0].set_ylabel(INDEX_AXIS)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        handles.append(Line2D([], [], ls=":", color="0.3", lw=0.8))
        labels.append("noise floor")
        axes[0, 0].legend(handles, labels, fontsize=7.5, loc="lower right")
        suptitle(
            fig,
            title or "Models trained here vs their initial weights: the index by layer",
            subject,
            f"bands: {ci_text(confidence)}; dotted: each run's noise floor; "
            + ("symmetric-log y axis (linear below the smallest floor); " if log else "")
            + f"{NO_RATIO}; {INDEXING}",
        )
        save(fig, paths)


def _with_err(comparison, col: str):
    """(estimate, yerr) of ``col`` and its ``_lo`` / ``_hi`` columns (yerr None without them),
    the interval checked to hold the estimate (:func:`causalpos.stats.ordered_interval`): a
    bound past the estimate by rounding (a zero-width interval) draws a bar of length 0, an
    interval that does not hold its estimate none (NaN; :func:`_no_interval` marks it)."""
    est = comparison[col].to_numpy(float)
    if f"{col}_lo" not in comparison:
        return est, None
    lo, hi = ordered_interval(
        est, comparison[f"{col}_lo"].to_numpy(float), comparison[f"{col}_hi"].to_numpy(float)
    )
    return est, np.vstack([est - lo, hi - est])


def _no_interval(ax, x: np.ndarray, est: np.ndarray, err: np.ndarray | None) -> None:
    """Mark the estimates whose error bar says nothing, so that it is not read as a certain
    value: "no CI" where the interval does not hold the estimate (NaN from :func:`_with_err`),
    "CI width 0" where it has width 0 within rounding (a sample of copies of one prompt)."""
    if err is None:
        return
    width = err.sum(axis=0)
    zero = width <= ROUNDING * np.abs(est)
    for xi, e, none, flat in zip(x, est, np.isnan(width), zero):
        if np.isfinite(e) and (none or flat):
            text = "no CI" if none else "CI width 0"
            ax.annotate(text, (xi, e), ha="center", va="bottom", fontsize=6, color="0.4")


def _has(comparison, col: str) -> bool:
    return col in comparison and comparison[col].notna().any()


#: Panels of :func:`plot_comparison` beyond the index: (column that holds its data, what was
#: not run where the column is empty, the key that runs it).
COMPARISON_PANELS = {
    "decomposition": ("leak_total", "paper 2's decomposition", "leakage.experiments"),
    "lengthgen": ("excess_beyond_context", "length generalization", "train.lengthgen"),
}


def plot_comparison(
    comparison,
    paths: Sequence[str | os.PathLike],
    *,
    title: str | None = None,
    subject: str | None = None,
    names: Mapping[str, str] | None = None,
) -> list[str]:
    """The variants side by side, with CIs: the index trained vs init, paper 2's decomposition of
    the trained model's leakage, the loss excess beyond the training length; a panel whose
    columns are empty (the config did not run it) is left out and named in the title.

    ``comparison``: the comparison table of :func:`causalpos.training.compare.comparison_tables`.
    Returns the panels drawn, in order.
    """
    if comparison.empty:
        raise ValueError("plot_comparison: the comparison table is empty")
    variants = list(comparison["variant"])
    x = np.arange(len(variants))
    colors = [variant_color(v, i) for i, v in enumerate(variants)]
    drawn = ["index"] + [k for k, (col, _, _) in COMPARISON_PANELS.items() if _has(comparison, col)]
    missing = [  # with the key that would run it
        f"{what} ({key})"
        for col, what, key in COMPARISON_PANELS.values()
        if not _has(comparison, col)
    ]
    conf = float(comparison["confidence"].iloc[0]) if "confidence" in comparison else 0.95
    with plt.rc_context(GRID_STYLE):
        fig, axes = subplot_grid(1, len(drawn), (4.1 * len(drawn) + 0.6, 4.0))
        for k, (ax, name) in enumerate(zip(axes[0], drawn)):
            letter = "abc"[k]
            if name == "index":
                _index_panel(ax, comparison, x, colors)
                ax.set_title(f"({letter}) index, mean over layers")
            elif name == "decomposition":
                _decomposition_panel(ax, comparison, x, colors)
                ax.set_title(f"({letter}) leakage ΔR² (log-attention):\nresidual + causal mask")
            else:
                est, err = _with_err(comparison, "excess_beyond_context")
                ax.bar(x, est, 0.6, yerr=err, capsize=2, color=colors)
                _no_interval(ax, x, est, err)
                ax.axhline(0, color="0.3", lw=0.8)
                ax.set_title(f"({letter}) loss excess beyond\nthe training length")
                ax.set_ylabel("excess next-token NLL (nats)")
            ax.set_xlim(-0.6, len(variants) - 0.4)
            ax.set_xticks(x, [tick_words(variant_label(v, names), 12) for v in variants])
            ax.grid(alpha=0.3, axis="y")
        details = f"bars and error bars: estimates with their {ci_text(conf)}s"
        if missing:
            details += "; not run in this config: " + ", ".join(missing)
        suptitle(
            fig,
            title or "Models trained here: the one-factor variants side by side",
            subject,
            details,
        )
        save(fig, paths)
    return drawn


def _index_panel(ax, comparison, x: np.ndarray, colors) -> None:
    """The layer-mean index, trained beside the init twin, each trained bar's ratio to its twin
    written above it; a log axis where the twins' bars would not show on a linear one."""
    has_init = _has(comparison, "init_index_mean")
    w = 0.38 if has_init else 0.6
    est, err = _with_err(comparison, "index_mean")
    xt = x - (w / 2 if has_init else 0.0)
    ax.bar(xt, est, w, yerr=err, capsize=2, color=colors, label="trained")
    _no_interval(ax, xt, est, err)
    if has_init:
        init, ierr = _with_err(comparison, "init_index_mean")
        ax.bar(x + w / 2, init, w, yerr=ierr, capsize=2, color="0.7", label="init twin")
        _no_interval(ax, x + w / 2, init, ierr)
        both = np.concatenate([est, init])
        if np.all(both > 0) and both.max() > 20 * both.min():
            ax.set_yscale("log")
        for xi, r in zip(x, comparison["amplification"]):  # inside the axes, under its top
            if np.isfinite(r):
                ax.text(
                    xi,
                    0.97,
                    f"×{r:.1f}",
                    ha="center",
                    va="top",
                    fontsize=8,
                    transform=ax.get_xaxis_transform(),
                )
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 4 if ax.get_yscale() == "log" else hi + 0.15 * (hi - lo))
        ax.plot([], [], ls="none", label="×r: trained / init twin")
        ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    ax.set_ylabel(INDEX_AXIS + ("\n(log scale)" if ax.get_yscale() == "log" else ""))


def _decomposition_panel(ax, comparison, x: np.ndarray, colors) -> None:
    """Paper 2's decomposition of each variant's leakage, the init twin's total beside it."""
    res = comparison["leak_residual_stream"].to_numpy(float)
    mask = comparison["leak_causal_mask"].to_numpy(float)
    ax.bar(x, res, 0.6, color=colors, alpha=0.55, label="residual stream")
    ax.bar(
        x, mask, 0.6, bottom=res, color=colors, hatch="//", edgecolor="white", label="causal mask"
    )
    tot, err = _with_err(comparison, "leak_total")
    ax.errorbar(x, tot, yerr=err, fmt="_", color="k", ms=14, capsize=3, label="total (CI)")
    _no_interval(ax, x, tot, err)
    if _has(comparison, "init_leak_total"):
        it, ierr = _with_err(comparison, "init_leak_total")
        ax.errorbar(
            x + 0.38,
            it,
            yerr=ierr,
            fmt="o",
            mfc="white",
            color="0.35",
            ms=5,
            capsize=2,
            label="init twin, total",
        )
    ax.axhline(0, color="0.3", lw=0.8)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.3 * (hi - lo))  # room for the legend above the bars and markers
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    ax.set_ylabel("ΔR² of the expected log-attention map")


def plot_variant_maps(
    trained: Mapping[str, xr.Dataset],
    init: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    layer: int = -1,
    title: str | None = None,
    subject: str | None = None,
    names: Mapping[str, str] | None = None,
) -> None:
    """Diagonal-normalized head-mean maps of one layer: trained variants (top row), twins (bottom).

    ``trained`` / ``init``: variant -> score store with ``score_group_mean``. Each row has its own
    symmetric colour scale (1–99 % quantiles of its panels): the twins' maps are orders of
    magnitude weaker (their logits are near 0), so a shared scale would show them blank.
    """
    from causalpos.paper1.compare import mean_normalized_map

    variants = list(trained)
    if not variants:
        raise ValueError("plot_variant_maps needs at least one trained model's store")
    rows = [("trained", trained)] + ([("init twin", init)] if init else [])
    n_layers = next(iter(trained.values())).sizes["layer"]
    shown = layer % n_layers
    with plt.rc_context(GRID_STYLE):
        fig, axes = subplot_grid(
            len(rows), len(variants), (2.9 * len(variants) + 1.4, 2.9 * len(rows) + 1.2)
        )
        for ri, (row, stores) in enumerate(rows):
            maps = {v: mean_normalized_map(stores[v], layer) for v in variants if v in stores}
            vmin, vmax = quantile_limits(list(maps.values()))
            lim = max(abs(vmin), abs(vmax)) or 1.0
            im = None
            for ci, v in enumerate(variants):
                ax = axes[ri, ci]
                if v not in maps:
                    ax.axis("off")
                    continue
                im = heatmap(
                    ax,
                    maps[v],
                    vmin=-lim,
                    vmax=lim,
                    cmap=DIVERGING,
                    title=f"{variant_label(v, names)}\n({row})",
                    labels=(
                        "key position" if ri == len(rows) - 1 else "",
                        "query position" if ci == 0 else "",
                    ),
                    ticks=3,
                )
            if im is not None:
                fig.colorbar(im, ax=axes[ri].tolist(), shrink=0.85, label=f"normalized ({row})")
        suptitle(
            fig,
            title or f"Models trained here: diagonal-normalized mean scores, layer {shown}",
            subject,
            f"mean over prompts and heads; each row on its own colour scale; {INDEXING}",
        )
        save(fig, paths)
