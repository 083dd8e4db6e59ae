"""Claim 1's headline by layer with its intervals (paper 2: RoPE-trained decoders distinguish
absolute position in their attention patterns), one panel per (model, dataset) of an experiment.

Each panel pairs two axes on its own y scale: the runs' headline per layer (``leakage_layer``)
and the same runs pooled over layers (``leakage_model``) beside each position-free control in the
model's units (``control_units``): the comparison of claim 1's verdict (scorecard target
``claim1_logit``). Where a model mixes layer kinds, each kind has its marker.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from causalpos.figures.common import (
    GRID_STYLE,
    ci_text,
    grid_columns,
    kind_handles,
    kind_marker,
    kind_order,
    kinds_text,
    pooled_by_kind,
    save,
    shade_global_layers,
    suptitle,
)
from causalpos.figures.labels import LAYER_AXIS, variant_name
from causalpos.figures.paper2_layers import (
    NO_HEADLINE,
    PANEL,
    STAT3,
    grid_legend,
    note,
    panel_title,
    rows_of,
    subject_of,
)
from causalpos.models.layer_kinds import GLOBAL, layer_kinds

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

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
#: A point whose interval is more than this many times the panel's median interval width is
#: left out of the panel's scale (cut at its edge, its numbers written in the panel).
WIDE = 4.0


def claim1_numbers(
    s: xr.Dataset, target: str, runs: Sequence[str], landmark: str
) -> dict[str, object] | None:
    """What :func:`claim1_by_layer` draws of one summary (None: no headline, or none of
    ``runs``): ``layers`` run -> ``(layer, 3)`` (``leakage_layer``); ``pooled`` ``(run, what it
    pools)`` -> ``(3,)`` (``leakage_model``, per layer kind where the summary splits it);
    ``controls`` ``(position-free run, what it pools)`` -> ``(3,)`` in the model's units
    (``control_units``, landmark ``landmark``; a control without a finite estimate is left
    out); ``kinds``; ``window``."""
    if "leakage_layer" not in s:
        return None
    w = str(s["window"].values[0])
    kinds = np.asarray(layer_kinds(s), dtype=object)
    per_layer = s["leakage_layer"].sel(window=w, target=target)
    variants = [str(v) for v in s["variant"].values]
    layers = {v: rows_of(per_layer.sel(variant=v)) for v in runs if v in variants}
    if not layers:
        return None
    pooled, controls = {}, {}
    if "leakage_model" in s:
        for v in layers:
            arr = s["leakage_model"].sel(variant=v, window=w, target=target)
            for what, x in pooled_by_kind(arr, kinds).items():
                pooled[(v, what)] = x.sel(stat=STAT3).values
    if "control_units" in s and "position_free" in s:
        cu = s["control_units"].sel(window=w, target=target)
        if "landmark" in cu.dims:
            cu = cu.sel(landmark=landmark)
        free = [v for v, f in zip(variants, s["position_free"].values) if bool(f)]
        for v in free:
            for what, x in pooled_by_kind(cu.sel(variant=v), kinds).items():
                vals = x.sel(stat=STAT3).values
                if np.isfinite(vals[0]):
                    controls[(v, what)] = vals
    return {"window": w, "kinds": kinds, "layers": layers, "pooled": pooled, "controls": controls}


def _slot(what: str, prefix: str, kinds) -> tuple[str, str]:
    """A pooled slot's layer kind (its marker: for all layers their one kind, "global" where they
    mix) and tick label (``prefix``, and which layers it pools where the title does not say)."""
    if not what.startswith("all layers"):
        kind = what.split(" ")[1]
        return kind, f"{prefix}\n{kind}"
    if len(set(kinds)) == 1:
        return str(kinds[0]), prefix
    return GLOBAL, f"{prefix}\nall kinds"


def _slots(p: Mapping | None) -> int:
    """Slots of a panel's pooled axes: one per pooled reading, one per control."""
    if p is None:
        return 2
    return len(dict.fromkeys(what for _, what in p["pooled"])) + len(p["controls"])


def wide_points(v: np.ndarray) -> np.ndarray:
    """Rows of ``v`` ((n, 3): estimate, lo, hi) whose interval is more than :data:`WIDE` times
    the median interval width of the rows."""
    width = v[:, 2] - v[:, 1]
    finite = np.isfinite(width)
    if finite.sum() < 3:
        return np.zeros(len(v), bool)
    med = float(np.median(width[finite]))
    return finite & (width > WIDE * med) if med > 0 else np.zeros(len(v), bool)


def ylimits(values: Sequence[np.ndarray]) -> tuple[float, float]:
    """y limits of a panel: every estimate (and 0) inside, each interval too unless it runs more
    than the estimates' span beyond them (an ill-conditioned ratio over a nearly flat map must
    not flatten the rest); those are cut at the edge. A point whose interval is many times wider
    than the others' (:func:`wide_points`) sets neither: it is drawn cut at the edge."""
    v = np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1, 3) for a in values])
    keep = ~wide_points(v)
    v = v[keep]
    est = np.append(v[:, 0][np.isfinite(v[:, 0])], 0.0)
    lo, hi = float(est.min()), float(est.max())
    span = hi - lo or max(abs(hi), 1e-6)
    ci_lo = np.nanmin(np.append(v[:, 1], lo))
    ci_hi = np.nanmax(np.append(v[:, 2], hi))
    lim = (max(ci_lo, lo - span), min(ci_hi, hi + span))
    pad = 0.06 * (lim[1] - lim[0])
    return lim[0] - pad, lim[1] + pad


def _points(ax, xs, arr, kinds, style: tuple[str, str | None], ylim) -> list[str]:
    """Estimates with their intervals at ``xs``: each layer kind's marker, intervals cut at
    ``ylim`` ending in an arrowhead, an estimate beyond it drawn open at the edge. ``style``:
    (colour, legend label or None). Returns, per point, its numbers where it was cut at an edge,
    else ""."""
    color, label = style
    lo_lim, hi_lim = ylim
    ax.vlines(xs, np.clip(arr[:, 1], *ylim), np.clip(arr[:, 2], *ylim), color=color, lw=1.2)
    inside = (arr[:, 0] >= lo_lim) & (arr[:, 0] <= hi_lim)
    for k in kind_order(kinds):
        m = (np.asarray(kinds) == k) & inside
        ax.plot(
            xs[m], arr[m, 0], ls="none", marker=kind_marker(k), color=color, ms=4.5, label=label
        )
    for cut, edge, mk in ((arr[:, 1] < lo_lim, lo_lim, "v"), (arr[:, 2] > hi_lim, hi_lim, "^")):
        if cut.any():
            ax.plot(xs[cut], np.full(cut.sum(), edge), ls="none", marker=mk, color=color, ms=6)
    out = np.isfinite(arr[:, 0]) & ~inside
    if out.any():
        ax.plot(xs[out], np.clip(arr[out, 0], *ylim), ls="none", marker="D", mfc="white", mec=color)
    edge = (arr[:, 1] < lo_lim) | (arr[:, 2] > hi_lim) | out
    return [f"{e:.2g} [{a:.2g}, {b:.2g}]" if c else "" for (e, a, b), c in zip(arr, edge)]


def cut_label(axis: str, cut: Sequence[str], width: int = 40) -> str:
    """``axis`` (an x label), then the numbers of the points cut at the panel's edge, wrapped at
    ``width`` characters (at most three; "…" for more)."""
    if not cut:
        return axis
    text = "cut at the edge: " + "; ".join(cut[:3]) + (" …" if len(cut) > 3 else "")
    return axis + "\n" + "\n".join(textwrap.wrap(text, width))


def _offsets(n: int) -> np.ndarray:
    return np.linspace(-0.16, 0.16, n) if n > 1 else np.zeros(1)


def _per_layer(ax, layer_ids: np.ndarray, p: Mapping, ylim) -> list[str]:
    """The runs' headline per layer; returns the numbers of the points cut at the edge."""
    runs = list(p["layers"])
    shade_global_layers(ax, layer_ids, p["kinds"])
    cut = []
    for k, v in enumerate(runs):
        style = CLAIM1_RUNS.get(v, ("#7f7f7f", f"{v} run"))
        xs, arr = layer_ids + _offsets(len(runs))[k], p["layers"][v]
        ax.plot(xs, np.clip(arr[:, 0], *ylim), color=style[0], lw=0.8, alpha=0.6)
        got = _points(ax, xs, arr, p["kinds"], (style[0], None), ylim)
        cut += [f"{v} layer {ly} {t}" for ly, t in zip(layer_ids, got) if t]
    ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
    ax.set_xlim(layer_ids.min() - 0.7, layer_ids.max() + 0.7)
    ax.axhline(0.0, color="0.6", lw=0.8)
    return cut


def _pooled(ax, p: Mapping, colours: Mapping[str, str], level: float, ylim) -> list[str]:
    """The runs pooled over layers, then each position-free control in the model's units with a
    dotted line at its upper limit (claim 1: the causal run's lower limit must clear it);
    ``colours``: control run -> its colour, in the controls' order (numbered from 1). Returns
    the numbers of the points cut at the edge."""
    runs, kinds = list(p["layers"]), p["kinds"]
    pools = list(dict.fromkeys(what for _, what in p["pooled"]))
    labels, cut = [], []  # a tick per slot, 0, 1, ...
    for i, what in enumerate(pools):
        kind, label = _slot(what, "pooled", kinds)
        for k, v in enumerate(runs):
            if (v, what) in p["pooled"]:
                style = (CLAIM1_RUNS.get(v, ("#7f7f7f",))[0], None)
                xs = np.array([i + _offsets(len(runs))[k]])
                got = _points(ax, xs, p["pooled"][(v, what)][None], [kind], style, ylim)
                cut += [f"{v} pooled {t}" for t in got if t]
        labels.append(label)
    number = {v: i + 1 for i, v in enumerate(colours)}
    for i, ((v, what), vals) in enumerate(p["controls"].items()):
        x = len(pools) + i
        color = colours[v]
        kind, label = _slot(what, f"control {number[v]}", kinds)
        legend = (  # the ticks read "control <n>"
            f"control {number[v]}: {variant_name(v)} (position-free), model's units, pooled "
            f"({ci_text(level)})"
        )
        got = _points(ax, np.array([x]), vals[None], [kind], (color, legend), ylim)
        cut += [f"control {number[v]} {t}" for t in got if t]
        ax.axhline(
            vals[2],
            color=color,
            ls=":",
            lw=1.0,
            label="a control's upper limit (dotted, its colour)",
        )
        labels.append(label)
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
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlim(-0.6, max(len(labels) - 1, 0) + 0.6)
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.tick_params(axis="y", labelleft=False)
    return cut


def _pair_grid(slots: Sequence[int]):
    """A panel of two axes (per layer | pooled, one y scale) per entry of ``slots`` (the pooled
    axes' slots), at most :data:`MAX_COLUMNS` a row; a panel alone
    gets wider per-layer axes. Returns (fig, [(ax, pooled ax)])."""
    n = len(slots)
    ncol = grid_columns(n, MAX_COLUMNS)
    nrow = -(-n // ncol)
    layers = WIDTHS[0] * (1.6 if ncol == 1 else 1.0)
    width = layers + WIDTHS[1] * max(slots)
    height = (PANEL[1] + 0.9) * nrow + 2.4  # the title's lines and the legend below
    fig = plt.figure(figsize=(width * ncol + 0.9, height), layout="constrained")
    outer = fig.add_gridspec(nrow, ncol)
    pairs = []
    for j in range(n):
        ratios = (layers + WIDTHS[1] * (max(slots) - slots[j]), WIDTHS[1] * slots[j])
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
    names: Mapping[str, str] | None = None,
    experiment: str | None = None,
) -> dict[str, dict[str, object] | None]:
    """Claim 1's headline of ``runs`` by layer with its intervals, then pooled beside the
    position-free controls, one panel per model on its own y scale (the caption:
    workflow/report/paper2_claim1.rst). A point whose interval is many times the others' sets no
    scale (:func:`ylimits`); every cut point's numbers are written under its panel. ``names``:
    display names of the ``model/dataset`` keys; ``experiment``: named in the title.

    Returns model -> :func:`claim1_numbers` plus ``ylim`` as drawn; None for a model without the
    headline or any of ``runs``.
    """
    if not summaries:
        raise ValueError("claim1_by_layer: no summaries to plot")
    got = {m: claim1_numbers(s, target, runs, landmark) for m, s in summaries.items()}
    controls = dict.fromkeys(v for p in got.values() if p for v, _ in p["controls"])
    colours = {v: CONTROL_COLOURS[i % len(CONTROL_COLOURS)] for i, v in enumerate(controls)}
    subject, panel_name = subject_of(list(summaries), names, experiment)
    level = float(next(iter(summaries.values())).attrs.get("level", 0.95))
    with plt.rc_context(GRID_STYLE):
        fig, pairs = _pair_grid([max(_slots(p), 1) for p in got.values()])
        all_kinds, ncol = [], grid_columns(len(summaries), MAX_COLUMNS)
        for j, (model, s) in enumerate(summaries.items()):
            (ax, axp), p = pairs[j], got[model]
            if p is None:
                note(ax, f"{panel_name[model]}\n{NO_HEADLINE}\nor none of the runs {list(runs)}")
                ax.set_axis_off()
                axp.set_axis_off()
                continue
            all_kinds += list(p["kinds"])
            every = [*p["layers"].values(), *p["pooled"].values(), *p["controls"].values()]
            p["ylim"] = ylimits(every)
            cut = _per_layer(ax, s["layer"].values, p, p["ylim"])
            cut += _pooled(axp, p, colours, level, p["ylim"])
            ax.set_ylim(*p["ylim"])
            title = panel_title(panel_name[model], f"window {p['window']}", kinds_text(p["kinds"]))
            ax.set_title(title)
            ax.set_xlabel(cut_label(LAYER_AXIS, cut))
            if j % ncol == 0:
                ax.set_ylabel(f"headline ΔR² of the run's\nexpected {target} map")
        mixed = len(set(all_kinds)) > 1
        drawn = dict.fromkeys(v for p in got.values() if p for v in p["layers"])
        first = {
            CLAIM1_RUNS.get(v, ("", f"{v} run"))[1] + f" ({ci_text(level)})": Line2D(
                [], [], color=CLAIM1_RUNS.get(v, ("#7f7f7f",))[0], marker="o", ms=4.5, lw=0.8
            )
            for v in drawn
        }
        grid_legend(
            fig, fig.axes, kind_handles(all_kinds, shaded=mixed, markers=mixed), first=first
        )
        suptitle(
            fig,
            "Paper 2 claim 1 by layer: the headline with its intervals, then pooled",
            subject,
            f"expected-map ΔR² of {target}s, key 0 modelled, bootstrap {ci_text(level)}s; each "
            "panel on its own y scale; an interval cut at the panel's edge ends in an arrowhead, "
            "an estimate beyond it an open diamond there (their numbers under the panel)",
        )
        save(fig, paths)
    return got
