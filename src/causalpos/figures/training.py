"""Figures of the models trained here: loss curves, paper 1 Figs. 3 and 8, loss by position.

Functions take the library's data (``causalpos.training.trainlog.read_loss_curve`` output, the ``gram`` and
``score`` datasets of :mod:`causalpos.paper1.gram`, the dataset of
:func:`causalpos.training.lengthgen.measure_length_generalization`) and write every path given (format from the
suffix). Positions are 0-indexed on the axes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from causalpos.figures.common import heatmap, quantile_limits, save
from causalpos.stats import ROUNDING, ordered_interval

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

_COLORS = {"rope": "C0", "nope": "C3", "ntk": "C2", "swa": "C1"}


def _color(name: str, i: int) -> str:
    return _COLORS.get(name, f"C{(i + 4) % 10}")


def draw_loss_curves(
    curves: Mapping[str, Mapping[str, np.ndarray]],
    paths: Sequence[str | os.PathLike],
    *,
    unigram_entropy: float | Mapping[str, float] | None = None,
    title: str | None = None,
) -> None:
    """Train and held-out loss against step, one panel per variant, a shared y axis.

    ``curves``: variant → columns of ``loss_curve.csv`` (``step``, ``train_loss``,
    ``heldout_loss``; NaN where not measured). ``unigram_entropy``: the held-out unigram-entropy
    baseline (one value, or one per variant), drawn as a dashed line.
    """
    if not curves:
        raise ValueError("draw_loss_curves needs at least one variant's curve")
    n = len(curves)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.0), sharey=True, squeeze=False)
    for i, (ax, (name, c)) in enumerate(zip(axes[0], curves.items())):
        step, train, held = (
            np.asarray(c[k], dtype=float) for k in ("step", "train_loss", "heldout_loss")
        )
        ok = ~np.isnan(train)
        ax.plot(
            step[ok], train[ok], color=_color(name, i), alpha=0.45, lw=0.8, label="train (batch)"
        )
        ok = ~np.isnan(held)
        ax.plot(
            step[ok], held[ok], color=_color(name, i), marker="o", ms=3, lw=1.5, label="held-out"
        )
        base = (
            unigram_entropy.get(name) if isinstance(unigram_entropy, Mapping) else unigram_entropy
        )
        if base is not None:
            ax.axhline(base, color="0.3", ls="--", lw=1, label="unigram entropy (held-out)")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("update step")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("next-token loss (nats)")
    axes[0, 0].legend(fontsize=7, loc="upper right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save(fig, paths)


def plot_gram_panels(
    ds: xr.Dataset, paths: Sequence[str | os.PathLike], *, title: str | None = None
) -> None:
    """Paper 1 Fig. 3: the nine panels (a)–(i) in a 3×3 grid, each with its own colour scale.

    ``ds``: output of :func:`causalpos.paper1.gram.compute_gram_panels` (``gram (panel, query, key)``, ``title``).
    Colour limits per panel at the 1 % / 99 % quantiles of its finite values (the BOS sink column
    and the diagonal would otherwise flatten the rest).
    """
    if ds.sizes.get("panel") != 9:
        raise ValueError(f"plot_gram_panels expects 9 panels (a..i), got {ds.sizes.get('panel')}")
    fig, axes = plt.subplots(3, 3, figsize=(10.5, 10.0))
    for ax, label in zip(axes.ravel(), ds["panel"].values):
        m = ds["gram"].sel(panel=label).values
        lo, hi = quantile_limits([m])
        im = heatmap(
            ax, m, vmin=lo, vmax=hi, title=f"({label}) {ds['title'].sel(panel=label).item()}"
        )
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
    n = ds.attrs.get("n_samples")
    fig.suptitle(title or f"Gram matrices through layer 1 (mean over {n} sequences)", fontsize=11)
    fig.tight_layout()
    save(fig, paths)


def plot_layer_scores(
    ds: xr.Dataset,
    paths: Sequence[str | os.PathLike],
    *,
    title: str | None = None,
    shared_limits: bool = False,
) -> None:
    """Paper 1 Fig. 8: raw mean pre-softmax scores (``score (layer, query, key)``) of every layer in a grid.

    Each layer gets its own colour limits (1 %/99 % quantiles) unless ``shared_limits``; masked
    cells are blank. Layers are titled 1-indexed as in the paper.
    """
    s = ds["score"]
    n_layers = s.sizes["layer"]
    cols = min(6, n_layers)
    rows = math.ceil(n_layers / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.6 * rows), squeeze=False)
    limits = quantile_limits([s.values]) if shared_limits else None
    for i, ax in enumerate(axes.ravel()):
        if i >= n_layers:
            ax.axis("off")
            continue
        m = s.isel(layer=i).values
        lo, hi = limits or quantile_limits([m])
        im = heatmap(ax, m, vmin=lo, vmax=hi, title=f"layer {int(s['layer'][i]) + 1}")
        ax.locator_params(nbins=5)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
        if i % cols:
            ax.set_ylabel("")
        if i < (rows - 1) * cols:
            ax.set_xlabel("")
    n = ds.attrs.get("n_samples")
    fig.suptitle(
        title
        or f"Mean pre-softmax scores QK$^T$/$\\sqrt{{d}}$ (mean over {n} sequences and heads)",
        fontsize=11,
    )
    fig.tight_layout()
    save(fig, paths)


def _moving_average(x: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average whose window shrinks at the ends (no zero padding pulling them down)."""
    if width <= 1:
        return np.asarray(x, dtype=float)
    kernel = np.ones(width)
    return np.convolve(x, kernel, mode="same") / np.convolve(
        np.ones_like(x, dtype=float), kernel, mode="same"
    )


def draw_loss_by_position(
    ds: xr.Dataset, paths: Sequence[str | os.PathLike], *, title: str | None = None, smooth: int = 1
) -> None:
    """Mean next-token NLL by position with its bootstrap CI, one line per variant.

    ``ds``: output of :func:`causalpos.training.lengthgen.measure_length_generalization` (``nll_mean``, ``nll_lo``,
    ``nll_hi`` over ``(variant, position)``, ``train_context (variant)``). A dotted vertical line
    marks each variant's training length (targets beyond it are extrapolation). ``smooth`` > 1
    averages the curves over that many consecutive positions (display only).
    """
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    pos = ds["position"].values
    for i, name in enumerate(ds["variant"].values):
        sub = ds.sel(variant=name)
        mean, lo, hi = (
            _moving_average(sub[k].values, smooth) for k in ("nll_mean", "nll_lo", "nll_hi")
        )
        label = str(name)
        if "excess_mean" in sub:
            label += (
                f"  (excess beyond: {float(sub['excess_mean']):+.3f} "
                f"[{float(sub['excess_lo']):+.3f}, {float(sub['excess_hi']):+.3f}])"
            )
        ax.plot(pos, mean, color=_color(str(name), i), lw=1.2, label=label)
        ax.fill_between(pos, lo, hi, color=_color(str(name), i), alpha=0.2, lw=0)
    for ctx in sorted({int(c) for c in np.atleast_1d(ds["train_context"].values)}):
        ax.axvline(ctx - 0.5, color="0.2", ls=":", lw=1)
        ax.text(ctx, ax.get_ylim()[0], " training length", va="bottom", fontsize=8)
    conf = ds.attrs.get("confidence", 0.95)
    ax.set_xlabel("position of the predicted token (0-indexed)")
    ax.set_ylabel("next-token NLL (nats)")
    ax.set_title(
        title
        or f"Loss by position beyond the training length ({conf:.0%} bootstrap CI over sequences)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=2, frameon=False)
    fig.tight_layout()
    save(fig, paths)


# ---------------------------------------------------------------------------------------------
# Controlled comparisons (causalpos.training.compare tables)


def plot_index_vs_init(
    index, paths: Sequence[str | os.PathLike], *, title: str | None = None
) -> None:
    """Per-layer index of each variant, trained (solid) vs init twin (dashed), CIs and noise floor.

    ``index``: the index table of :func:`causalpos.training.compare.comparison_tables` (``variant``,
    ``weights``, ``layer``, ``index``, ``ci_lo``, ``ci_hi``, ``noise_floor``).
    """
    variants = list(dict.fromkeys(index["variant"]))
    if not variants:
        raise ValueError("plot_index_vs_init: the index table is empty")
    n = len(variants)
    fig, axes = plt.subplots(1, n, figsize=(3.0 * n, 3.0), sharey=True, squeeze=False)
    for i, (ax, v) in enumerate(zip(axes[0], variants)):
        for weights, ls, alpha in (("trained", "-", 0.25), ("init", "--", 0.12)):
            sub = index[(index["variant"] == v) & (index["weights"] == weights)].sort_values(
                "layer"
            )
            if sub.empty:
                continue
            c = _color(v, i) if weights == "trained" else "0.45"
            ax.plot(sub["layer"], sub["index"], ls=ls, marker="o", ms=3, color=c, label=weights)
            ax.fill_between(sub["layer"], sub["ci_lo"], sub["ci_hi"], color=c, alpha=alpha, lw=0)
            ax.plot(sub["layer"], sub["noise_floor"], ls=":", color=c, lw=0.8)
        tr = index[(index["variant"] == v) & (index["weights"] == "trained")]
        if "over_init" in tr and tr["over_init"].notna().any():
            ratios = ", ".join(
                "–" if not np.isfinite(x) else f"{x:.0f}"
                for x in tr.sort_values("layer")["over_init"]
            )
            ax.text(
                0.03,
                0.97,
                f"trained / init by layer:\n{ratios}",
                transform=ax.transAxes,
                va="top",
                fontsize=7,
            )
        ax.set_title(v, fontsize=10)
        ax.set_xlabel("layer")
        ax.set_xticks(sorted(index["layer"].unique()))
        ax.grid(alpha=0.3)
    # The twins' index is orders of magnitude below the trained models' (their logits are near 0):
    # a symmetric-log axis, linear below the smallest noise floor, shows both (and exact zeros).
    floors = index["noise_floor"].to_numpy(float)
    floors = floors[np.isfinite(floors) & (floors > 0)]
    if floors.size and index["index"].max() > 20 * floors.min():
        axes[0, 0].set_yscale("symlog", linthresh=float(floors.min()), linscale=0.5)
    axes[0, 0].set_ylim(bottom=0.0)
    axes[0, 0].set_ylabel("non-relativeness index (logit units)")
    axes[0, 0].legend(fontsize=8, loc="lower right")
    fig.suptitle(
        title
        or "Trained vs initial weights: non-relativeness index per layer, CIs (dotted: noise floor)",
        fontsize=10,
    )
    fig.tight_layout()
    save(fig, paths)


def plot_comparison(
    comparison, paths: Sequence[str | os.PathLike], *, title: str | None = None
) -> None:
    """The variants side by side: (a) index trained vs init, (b) paper 2's decomposition of the
    trained model's leakage, (c) loss excess beyond the training length; all with CIs.

    ``comparison``: the comparison table of :func:`causalpos.training.compare.comparison_tables`; panels
    whose columns are absent or empty say so instead of drawing nothing.
    """
    if comparison.empty:
        raise ValueError("plot_comparison: the comparison table is empty")
    variants = list(comparison["variant"])
    x = np.arange(len(variants))
    colors = [_color(v, i) for i, v in enumerate(variants)]
    fig, axes = plt.subplots(1, 3, figsize=(12.0, 3.4))

    def bars(ax, col, offset, width, **kw):
        est, err = _with_err(comparison, col)
        ax.bar(x + offset, est, width, yerr=err, capsize=2, **kw)
        _no_interval(ax, x + offset, est, err)

    ax = axes[0]
    has_init = "init_index_mean" in comparison and comparison["init_index_mean"].notna().any()
    w = 0.38 if has_init else 0.6
    bars(ax, "index_mean", -w / 2 if has_init else 0.0, w, color=colors, label="trained")
    if has_init:
        bars(ax, "init_index_mean", w / 2, w, color="0.7", label="init twin")
        for xi, r in zip(x, comparison["amplification"]):
            if np.isfinite(r):
                ax.text(xi, ax.get_ylim()[1] * 0.98, f"×{r:.1f}", ha="center", va="top", fontsize=8)
        ax.legend(fontsize=8, loc="center right")
    ax.set_title("(a) index, mean over layers", fontsize=10)

    _decomposition_panel(axes[1], comparison, x, colors)

    ax = axes[2]
    if "excess_beyond_context" in comparison and comparison["excess_beyond_context"].notna().any():
        bars(ax, "excess_beyond_context", 0.0, 0.6, color=colors)
        ax.axhline(0, color="0.3", lw=0.8)
    else:
        _missing(ax, "length generalization")
    ax.set_title("(c) loss excess beyond training length (nats)", fontsize=10)
    for ax in axes:
        ax.set_xlim(-0.6, len(variants) - 0.4)
        ax.set_xticks(x)
        ax.set_xticklabels(variants)
        ax.grid(alpha=0.3, axis="y")
    conf = float(comparison["confidence"].iloc[0]) if "confidence" in comparison else 0.95
    fig.suptitle(
        title or f"One-factor variants trained here, same held-out prompts ({conf:.0%} CIs)",
        fontsize=10,
    )
    fig.tight_layout()
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


def _missing(ax, what: str) -> None:
    """A panel saying that ``what`` was not run."""
    ax.text(
        0.5,
        0.5,
        f"{what}\nnot run in this config",
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=9,
        color="0.4",
    )


def _decomposition_panel(ax, comparison, x: np.ndarray, colors) -> None:
    """Panel (b) of :func:`plot_comparison`: paper 2's decomposition of each variant's leakage,
    the init twin's total beside it."""
    if "leak_total" in comparison and comparison["leak_total"].notna().any():
        res = comparison["leak_residual"].to_numpy(float)
        mask = comparison["leak_causal_mask"].to_numpy(float)
        ax.bar(x, res, 0.6, color=colors, alpha=0.55, label="residual stream")
        ax.bar(
            x,
            mask,
            0.6,
            bottom=res,
            color=colors,
            hatch="//",
            edgecolor="white",
            label="causal mask",
        )
        tot, err = _with_err(comparison, "leak_total")
        ax.errorbar(x, tot, yerr=err, fmt="_", color="k", ms=14, capsize=3, label="total (CI)")
        _no_interval(ax, x, tot, err)
        if "init_leak_total" in comparison and comparison["init_leak_total"].notna().any():
            it, ierr = _with_err(comparison, "init_leak_total")
            _no_interval(ax, x + 0.38, it, ierr)
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
    else:
        _missing(ax, "paper 2 decomposition")
    ax.set_title("(b) leakage ΔR² (log-attention): residual + causal mask", fontsize=10)


def plot_variant_maps(
    trained: Mapping[str, xr.Dataset],
    init: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    layer: int = -1,
    title: str | None = None,
) -> None:
    """Diagonal-normalized head-mean maps of one layer: trained variants (top row), twins (bottom).

    ``trained`` / ``init``: variant -> score store with ``score_group_mean``. Each row has its own
    symmetric colour scale (1–99 % quantiles of its panels): the twins' maps are orders of
    magnitude weaker (their logits are near 0), so a shared scale would show them blank. NaN
    (masked) cells are blank.
    """
    from matplotlib.ticker import MaxNLocator

    from causalpos.paper1.compare import mean_normalized_map

    variants = list(trained)
    if not variants:
        raise ValueError("plot_variant_maps needs at least one trained model's store")
    rows = [("trained", trained)] + ([("init twin", init)] if init else [])
    n_layers = next(iter(trained.values())).sizes["layer"]
    shown = layer % n_layers + 1
    fig, axes = plt.subplots(
        len(rows),
        len(variants),
        figsize=(2.9 * len(variants) + 1.0, 2.8 * len(rows)),
        squeeze=False,
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
                title=f"{v} ({row})",
                labels=("key", "query" if ci == 0 else ""),
            )
            ax.xaxis.set_major_locator(MaxNLocator(4, integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(4, integer=True))
        if im is not None:
            fig.colorbar(im, ax=axes[ri].tolist(), shrink=0.85, label=f"normalized score ({row})")
    fig.suptitle(
        title or f"Diagonal-normalized mean scores, layer {shown} (each row on its own scale)",
        fontsize=10,
    )
    save(fig, paths)
