"""Claim 1's headline by layer with its intervals (paper 2: RoPE-trained decoders distinguish
absolute position in their attention patterns), one panel per (model, dataset) of an experiment.

Each panel pairs two axes on one y scale, its own: the runs' headline per layer (``exp_layer``)
and, right of it, the same runs pooled over layers (``exp_model``) beside each position-free
control in the model's units (``exp_control_units``), the comparison claim 1's verdict makes
(:func:`causalpos.scorecard.paper2_headline.claim1_rows`). Layer kinds (coordinate
``layer_kind``) as in :mod:`causalpos.figures.paper2_layers`: titles name them; where a model
mixes kinds, global layers are shaded, each kind has its marker, and a pooled reading is drawn
per kind where the summary splits it, else labelled with the kinds it pools.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from causalpos.figures.common import (
    GRID_STYLE,
    grid_columns,
    kind_handles,
    kind_marker,
    kind_order,
    kinds_text,
    pooled_by_kind,
    save,
    shade_global_layers,
)
from causalpos.figures.paper2_layers import (
    NO_HEADLINE,
    PANEL,
    STAT3,
    grid_legend,
    note,
    panel_title,
    rows_of,
)
from causalpos.models.layer_kinds import GLOBAL, layer_kinds

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

__all__ = ["claim1_by_layer"]

#: Runs of :func:`claim1_by_layer` -> (colour, legend label); claim 1 is the causal run's.
CLAIM1_RUNS = {
    "causal": ("#222222", "causal run (claim 1's reading)"),
    "bidirectional": ("#1f77b4", "bidirectional run (no causal mask)"),
}
#: Colours of the position-free controls, in turn.
CONTROL_COLOURS = ("#2ca02c", "#8c564b", "#e377c2")
#: Widths (inches) of a panel's per-layer axes and of each slot of its pooled axes.
WIDTHS = (3.0, 0.7)
#: Most panels a row: a panel is wider than :mod:`~causalpos.figures.paper2_layers`' by its pooled
#: axes, so two a row keep the figure near 9.5 inches wide.
MAX_COLUMNS = 2


def claim1_numbers(
    s: xr.Dataset, target: str, runs: Sequence[str], landmark: str
) -> dict[str, object] | None:
    """What :func:`claim1_by_layer` draws of one summary (None: no headline, or none of
    ``runs``): ``layers`` run -> ``(layer, 3)`` (``exp_layer``); ``pooled`` ``(run, what it
    pools)`` -> ``(3,)`` (``exp_model``, per layer kind where the summary splits it);
    ``controls`` ``(position-free run, what it pools)`` -> ``(3,)`` in the model's units
    (``exp_control_units``, landmark ``landmark``; a control without a finite estimate is left
    out); ``kinds``; ``window``."""
    if "exp_layer" not in s:
        return None
    w = str(s["exp_window"].values[0])
    kinds = np.asarray(layer_kinds(s), dtype=object)
    per_layer = s["exp_layer"].sel(exp_window=w, target=target)
    variants = [str(v) for v in s["variant"].values]
    layers = {v: rows_of(per_layer.sel(variant=v)) for v in runs if v in variants}
    if not layers:
        return None
    pooled, controls = {}, {}
    if "exp_model" in s:
        for v in layers:
            arr = s["exp_model"].sel(variant=v, exp_window=w, target=target)
            for what, x in pooled_by_kind(arr, kinds).items():
                pooled[(v, what)] = x.sel(stat=STAT3).values
    if "exp_control_units" in s and "exp_position_free" in s:
        cu = s["exp_control_units"].sel(exp_window=w, target=target)
        if "exp_landmark" in cu.dims:
            cu = cu.sel(exp_landmark=landmark)
        free = [v for v, f in zip(variants, s["exp_position_free"].values) if bool(f)]
        for v in free:
            for what, x in pooled_by_kind(cu.sel(variant=v), kinds).items():
                vals = x.sel(stat=STAT3).values
                if np.isfinite(vals[0]):
                    controls[(v, what)] = vals
    return {"window": w, "kinds": kinds, "layers": layers, "pooled": pooled, "controls": controls}


def _slot_kind(what: str, kinds) -> str:
    """The layer kind a pooled slot holds (its marker): its kind, or for all layers their one
    kind ("global" where they mix)."""
    if what.startswith("all layers"):
        return str(kinds[0]) if len(set(kinds)) == 1 else GLOBAL
    return what.split(" ")[1]


def _slot_label(what: str, prefix: str, kinds) -> str:
    """A pooled slot's tick label: ``prefix``, and which layers it pools where the title does not
    say (per kind; all layers of mixed kinds)."""
    if not what.startswith("all layers"):
        return f"{prefix}\n{what.split(' ')[1]}"
    return prefix if len(set(kinds)) == 1 else f"{prefix}\nall kinds"


def _slots(p: Mapping | None) -> int:
    """Slots of a panel's pooled axes: one per pooled reading, one per control."""
    if p is None:
        return 2
    return len(dict.fromkeys(what for _, what in p["pooled"])) + len(p["controls"])


def ylimits(values: Sequence[np.ndarray]) -> tuple[float, float]:
    """y limits of a panel: every estimate (and 0) inside, each interval too unless it runs more
    than the estimates' span beyond them (an ill-conditioned ratio over a nearly flat map must
    not flatten the rest); those are cut at the edge."""
    v = np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1, 3) for a in values])
    est = np.append(v[:, 0][np.isfinite(v[:, 0])], 0.0)
    lo, hi = float(est.min()), float(est.max())
    span = hi - lo or max(abs(hi), 1e-6)
    ci_lo = np.nanmin(np.append(v[:, 1], lo))
    ci_hi = np.nanmax(np.append(v[:, 2], hi))
    lim = (max(ci_lo, lo - span), min(ci_hi, hi + span))
    pad = 0.06 * (lim[1] - lim[0])
    return lim[0] - pad, lim[1] + pad


def _points(ax, xs, arr, kinds, style: tuple[str, str | None], ylim) -> None:
    """Estimates with their intervals at ``xs``: each layer kind's marker, intervals cut at
    ``ylim`` ending in an arrowhead. ``style``: (colour, legend label or None)."""
    color, label = style
    lo_lim, hi_lim = ylim
    ax.vlines(xs, np.clip(arr[:, 1], *ylim), np.clip(arr[:, 2], *ylim), color=color, lw=1.2)
    for k in kind_order(kinds):
        m = np.asarray(kinds) == k
        ax.plot(
            xs[m], arr[m, 0], ls="none", marker=kind_marker(k), color=color, ms=4.5, label=label
        )
    for cut, edge, mk in ((arr[:, 1] < lo_lim, lo_lim, "v"), (arr[:, 2] > hi_lim, hi_lim, "^")):
        if cut.any():
            ax.plot(xs[cut], np.full(cut.sum(), edge), ls="none", marker=mk, color=color, ms=6)


def _offsets(n: int) -> np.ndarray:
    return np.linspace(-0.16, 0.16, n) if n > 1 else np.zeros(1)


def _per_layer(ax, layer_ids: np.ndarray, p: Mapping, ylim) -> None:
    """The runs' headline per layer."""
    runs = list(p["layers"])
    shade_global_layers(ax, layer_ids, p["kinds"])
    for k, v in enumerate(runs):
        style = CLAIM1_RUNS.get(v, ("#7f7f7f", f"{v} run"))
        xs, arr = layer_ids + _offsets(len(runs))[k], p["layers"][v]
        ax.plot(xs, np.clip(arr[:, 0], *ylim), color=style[0], lw=0.8, alpha=0.6)
        _points(ax, xs, arr, p["kinds"], (style[0], None), ylim)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(layer_ids.min() - 0.7, layer_ids.max() + 0.7)
    ax.axhline(0.0, color="0.6", lw=0.8)


def _pooled(ax, p: Mapping, colours: Mapping[str, str], level: float, ylim) -> None:
    """The runs pooled over layers, then each position-free control in the model's units with a
    dotted line at its upper limit (claim 1: the causal run's lower limit must clear it);
    ``colours``: control run -> its colour."""
    runs, kinds = list(p["layers"]), p["kinds"]
    pools = list(dict.fromkeys(what for _, what in p["pooled"]))
    ticks, labels = [], []
    for i, what in enumerate(pools):
        for k, v in enumerate(runs):
            if (v, what) in p["pooled"]:
                style = (CLAIM1_RUNS.get(v, ("#7f7f7f",))[0], None)
                xs = np.array([i + _offsets(len(runs))[k]])
                _points(
                    ax, xs, p["pooled"][(v, what)][None], [_slot_kind(what, kinds)], style, ylim
                )
        ticks.append(i)
        labels.append(_slot_label(what, "pooled", kinds))
    for i, ((v, what), vals) in enumerate(p["controls"].items()):
        x = len(pools) + i
        color = colours[v]
        style = (color, f"position-free control {v}: model's units, pooled ({level:.0%} CI)")
        _points(ax, np.array([x]), vals[None], [_slot_kind(what, kinds)], style, ylim)
        ax.axhline(
            vals[2],
            color=color,
            ls=":",
            lw=1.0,
            label="a control's upper limit (dotted, its colour)",
        )
        ticks.append(x)
        labels.append(_slot_label(what, "control", kinds))
    if not p["controls"]:
        ax.text(
            0.93,
            0.5,
            "no position-free control",
            rotation=90,
            ha="right",
            va="center",
            fontsize=7.5,
            color="0.35",
            transform=ax.transAxes,
        )
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_xlim(-0.6, max(len(ticks) - 1, 0) + 0.6)
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.tick_params(axis="y", labelleft=False)


def _pair_grid(slots: Sequence[int]):
    """A panel of two axes (per layer | pooled, one y scale) per entry of ``slots`` (the pooled
    axes' slots), at most :data:`~causalpos.figures.common.MAX_COLUMNS` a row. Returns (fig,
    [(ax, pooled ax)])."""
    n = len(slots)
    ncol = grid_columns(n, MAX_COLUMNS)
    nrow = -(-n // ncol)
    width = WIDTHS[0] + WIDTHS[1] * max(slots)
    fig = plt.figure(figsize=(width * ncol + 0.9, PANEL[1] * nrow + 1.3), layout="constrained")
    outer = fig.add_gridspec(nrow, ncol)
    pairs = []
    for j in range(n):
        ratios = (WIDTHS[0] + WIDTHS[1] * (max(slots) - slots[j]), WIDTHS[1] * slots[j])
        inner = outer[divmod(j, ncol)].subgridspec(1, 2, width_ratios=ratios, wspace=0.02)
        ax = fig.add_subplot(inner[0])
        pairs.append((ax, fig.add_subplot(inner[1], sharey=ax)))
    return fig, pairs


def claim1_by_layer(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    target: str = "logit",
    runs: Sequence[str] = tuple(CLAIM1_RUNS),
    landmark: str = "modelled",
) -> dict[str, dict[str, object] | None]:
    """Claim 1's headline by layer with its intervals, one panel per model on its own y scale.

    Per layer: each run's headline (``exp_layer``: ΔR² of its expected ``target`` map, key-0
    column modelled, the summary's first window) with its bootstrap interval, for ``runs`` (the
    causal run is claim 1's reading; the bidirectional run shows what is left without the causal
    mask). Beside it, on the same scale: the same runs pooled over layers (``exp_model``), and
    each position-free control in the model's units (``exp_control_units``: its numerator over
    the causal run's denominator), a dotted line at its upper limit. A position-free run's own
    per-layer ratio (over its own, nearly flat map) is ill-conditioned and not drawn. Intervals
    running more than the estimates' span past them are cut at the edge (arrowheads).

    Returns:
        model -> :func:`claim1_numbers` plus ``ylim`` (the panel's y limits), as drawn; None for
        a model without the headline or any of ``runs``.
    """
    if not summaries:
        raise ValueError("claim1_by_layer: no summaries to plot")
    got = {m: claim1_numbers(s, target, runs, landmark) for m, s in summaries.items()}
    controls = dict.fromkeys(v for p in got.values() if p for v, _ in p["controls"])
    colours = {v: CONTROL_COLOURS[i % len(CONTROL_COLOURS)] for i, v in enumerate(controls)}
    with plt.rc_context(GRID_STYLE):
        fig, pairs = _pair_grid([max(_slots(p), 1) for p in got.values()])
        all_kinds, ncol = [], grid_columns(len(summaries), MAX_COLUMNS)
        for j, (model, s) in enumerate(summaries.items()):
            (ax, axp), p = pairs[j], got[model]
            if p is None:
                note(ax, f"{model}\n{NO_HEADLINE}\nor none of the runs {list(runs)}")
                ax.set_axis_off()
                axp.set_axis_off()
                continue
            all_kinds += list(p["kinds"])
            every = [*p["layers"].values(), *p["pooled"].values(), *p["controls"].values()]
            p["ylim"] = ylimits(every)
            _per_layer(ax, s["layer"].values, p, p["ylim"])
            _pooled(axp, p, colours, float(s.attrs.get("level", 0.95)), p["ylim"])
            ax.set_ylim(*p["ylim"])
            ax.set_title(panel_title(model, f"window {p['window']}", kinds_text(p["kinds"])))
            ax.set_xlabel("layer (0-indexed)")
            if j % ncol == 0:
                ax.set_ylabel(f"headline ΔR² of the run's\nexpected {target} map")
        mixed = len(set(all_kinds)) > 1 or any(
            len(set(p["kinds"])) > 1 for p in got.values() if p is not None
        )
        drawn = dict.fromkeys(v for p in got.values() if p for v in p["layers"])
        first = {
            CLAIM1_RUNS.get(v, ("", f"{v} run"))[1]: Line2D(
                [], [], color=CLAIM1_RUNS.get(v, ("#7f7f7f",))[0], marker="o", ms=4.5, lw=0.8
            )
            for v in drawn
        }
        grid_legend(
            fig, fig.axes, kind_handles(all_kinds, shaded=mixed, markers=mixed), first=first
        )
        fig.suptitle(
            f"Claim 1 by layer: the headline (expected-map ΔR², {target}s, key 0 modelled) with "
            "its bootstrap intervals, then pooled;\neach panel on its own y scale; an interval "
            "cut at the panel's edge ends in an arrowhead"
        )
        save(fig, paths)
    return got
