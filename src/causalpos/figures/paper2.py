"""Figures of paper 2 (Ruscio et al. 2026): component shares, head maps, position 0 (the
per-layer figures: :mod:`causalpos.figures.paper2_layers`, :mod:`causalpos.figures.paper2_claim1`).

Each draws from a :func:`causalpos.paper2.summary.assemble.leakage_summary` dataset (or a
:func:`causalpos.paper2.position0.trajectory` one), saves to every path in ``paths`` and returns
what it plotted. Layers count from 0. The headline reading comes first; the per-prompt reading
reads token content as position, so where drawn at all it comes last and says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from causalpos.figures.common import (
    DIVERGING,
    GRID_STYLE,
    ci_text,
    heatmap,
    kind_dim,
    kinds_text,
    pooled_by_kind,
    save,
    subplot_grid,
    suptitle,
    tick_words,
)
from causalpos.figures.labels import DEPTH_AXIS, LAYER_AXIS, pair_name, variant_name
from causalpos.figures.paper2_claim1 import claim1_by_layer  # noqa: F401  (rule plot_paper2)
from causalpos.figures.paper2_layers import (
    NO_HEADLINE,
    PER_PROMPT,
    leakage_by_layer,  # noqa: F401  (rule plot_paper2)
    note,
    subject_of,
)
from causalpos.models.layer_kinds import GLOBAL, layer_kinds
from causalpos.paper2.labels import MEASURED, token0_status

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

#: The causal-mask share's readings: (landmark, component of ``components``, label). The
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
#: Paper 2's causal-mask shares (82 % at 1B, 64 % at 3B: Llama-3.2), drawn as a band, in the
#: axis' units (fractions of the total).
PAPER2_SHARE = (0.64, 0.82)
PAPER2_SHARE_LABEL = (
    "paper 2's shares, 0.64–0.82 (Llama-3.2 3B, 1B; key 0 counted, ablation log-attention)"
)
#: (colour, marker) of the artefact-free residual reading and of paper 2's; key 0 counted: open.
_SHARE_STYLE = (("#1f77b4", "o"), ("#ff7f0e", "s"))
#: y range of the shares (a share of a total near 0 is unbounded): points beyond it are drawn
#: at its edge, with their value.
SHARE_LIMITS = (-1.0, 2.0)


def _share_groups(
    summaries: Mapping[str, xr.Dataset],
    conditions: Sequence[str] | None,
    panel_name: Mapping[str, str],
) -> dict[str, tuple[str, np.ndarray]]:
    """``"model/condition"`` (``"model/condition/kind"`` where the summary splits the pooled
    components by layer kind) -> (tick label, ``(len(SHARE_READINGS), 3)``); ``panel_name``:
    each model's words on its tick."""
    groups: dict[str, tuple[str, np.ndarray]] = {}
    for model, s in summaries.items():
        if "components" not in s:
            continue
        kinds = np.asarray(layer_kinds(s), dtype=object)
        comp = s["components"].sel(window=s["window"].values[0])
        for c in comp["condition"].values:
            if conditions is not None and c not in conditions:
                continue
            x = comp.sel(condition=c, stat=["estimate", "lo", "hi"])
            split = kind_dim(x) is not None
            na = token0_status(s.attrs)[1] != MEASURED  # the ring's logits read 0 by symmetry
            for what, xk in pooled_by_kind(x, kinds).items():
                key = f"{model}/{c}" + (f"/{what.split(' ')[1]}" if split else "")
                pools = "" if len(set(kinds)) == 1 and not split else f"\n{what}"
                tick = (
                    tick_words(panel_name[model])
                    + f"\ncondition {c}"
                    + pools.replace(": ", ":\n").replace(" + ", "\n+ ")
                    + ("\nablation logits: n/a\n(token 0 not fixed)" if na else "")
                )
                v = np.stack(
                    [xk.sel(landmark=lm, component_full=k).values for lm, k, _ in SHARE_READINGS]
                )
                v[[na and k == "share_causal_mask" for _, k, _ in SHARE_READINGS]] = np.nan
                groups[key] = (tick, v)
    return groups


def component_shares(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    conditions: Sequence[str] | None = None,
    names: Mapping[str, str] | None = None,
    experiment: str | None = None,
) -> dict[str, np.ndarray]:
    """The causal-mask share (Eq. 5) per (model, condition) on the headline, the four
    :data:`SHARE_READINGS` side by side with CIs, paper 2's 0.64–0.82 as a band; the summary's
    first window, pooled over layers (per layer kind where the summary splits them). Where token
    0 is not fixed the readings on the ablation's logits are not applicable: NaN, said on the
    tick. ``names``: display names of the ``model/dataset`` keys; ``experiment``: in the title.

    Returns ``"model/condition"`` (``"model/condition/kind"`` per layer kind) -> ``(len(
    SHARE_READINGS), 3)`` (estimate, lo, hi) as plotted.
    """
    subject, panel_name = subject_of(list(summaries), names, experiment)
    groups = _share_groups(summaries, conditions, panel_name)
    level = float(next(iter(summaries.values())).attrs.get("level", 0.95)) if summaries else 0.95
    with plt.rc_context(GRID_STYLE):
        width = min(max(6.0, 1.3 * len(groups) + 1.6), 10.5)
        fig, ax = plt.subplots(figsize=(width, 4.8), layout="constrained")
        ax.axhspan(*PAPER2_SHARE, color="0.85", lw=0, label=PAPER2_SHARE_LABEL)
        title = "Paper 2 Eq. 5: the causal mask's share of the total, pooled over layers"
        if not groups:
            note(ax, "no decomposition on the headline in these summaries\n" + NO_HEADLINE)
            suptitle(fig, title, subject)
            save(fig, paths)
            return {}
        lo_lim, hi_lim = SHARE_LIMITS
        offsets = np.linspace(-0.3, 0.3, len(SHARE_READINGS))
        for k, (lm, comp_name, label) in enumerate(SHARE_READINGS):
            color, marker = _SHARE_STYLE[comp_name.endswith("_paper")]
            face = color if lm == "modelled" else "white"
            x = np.arange(len(groups)) + offsets[k]
            v = np.array([g[k] for _, g in groups.values()])
            ax.vlines(x, *np.clip(v[:, 1:].T, lo_lim, hi_lim), color=color)
            est = np.clip(v[:, 0], lo_lim, hi_lim)
            ax.plot(x, est, ls="none", marker=marker, mfc=face, mec=color, ms=6, label=label)
            for xi, e in zip(x, v[:, 0]):
                if np.isfinite(e) and not lo_lim <= e <= hi_lim:
                    ax.annotate(
                        f"{e:.2g}", (xi, np.clip(e, lo_lim, hi_lim)), fontsize=7, ha="center"
                    )
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
        ax.set_xticks(np.arange(len(groups)), [t for t, _ in groups.values()], fontsize=8)
        ax.set_ylabel("causal-mask share of the total (fraction)")
        fig.legend(loc="outside lower center", ncol=1 if width < 7.5 else 2)
        suptitle(
            fig,
            title,
            subject,
            f"vertical bars: bootstrap {ci_text(level)}; a point beyond the axis "
            f"({lo_lim:g} to {hi_lim:g}) is drawn at its edge with its value",
        )
        save(fig, paths)
    return {key: g for key, (_, g) in groups.items()}


def _head_panel(ax, m: Mapping[str, np.ndarray], run: tuple[str, str], lim: float, ticks):
    """One (variant, target) panel of :func:`head_maps`: the map on the shared scale, its marked
    heads dotted; ``ticks``: each layer's tick with its kind (None: the plain layer ticks)."""
    v, t = run
    target = {"logit": "logits", "logattn": "log-attention"}.get(t, t)
    im = heatmap(
        ax,
        m["estimate"],
        vmin=-lim,
        vmax=lim,
        cmap=DIVERGING,
        title=f"{variant_name(v)}\n{target}",
        labels=("head (0 = first)", LAYER_AXIS),
        ticks=6,
    )
    li, hi_ = np.nonzero(m["marked"])
    ax.scatter(hi_, li, s=6, c="k", marker="o")
    if ticks is not None:
        ax.set_yticks(np.arange(len(ticks)), ticks, fontsize=7)
    return im


def head_maps(
    summary: xr.Dataset,
    paths: Sequence[str | os.PathLike],
    *,
    variants: Sequence[str] = ("causal", "bidirectional"),
    targets: Sequence[str] = ("logit", "logattn"),
    alpha: float | None = None,
    pair: str | None = None,
    names: Mapping[str, str] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """(layer × head) maps of the headline per head (``leakage_head``, expected-map ΔR², the
    summary's first window), one panel per (target, variant), two rows of targets beyond four
    panels, one colour scale; dots mark heads with BH q ≤ α (``q_value``, sign-flip test). The
    title names ``pair`` (``model/dataset``, display names ``names``) and the layers' kinds.
    Without the headline: a note, then the per-prompt reading (``per_prompt_leakage_head``,
    ``per_prompt_q_value`` of the permutation test).

    Returns ``"variant/target"`` (``"per_prompt/variant/target"``) -> ``{"estimate": (layer,
    head), "marked": (layer, head) bool}`` as drawn.
    """
    alpha = float(summary.attrs.get("alpha", 0.05)) if alpha is None else alpha
    variants = [v for v in variants if v in summary["variant"].values]
    if not variants:
        raise ValueError(
            f"head_maps: none of the variants are in the summary ({list(summary['variant'].values)})"
        )
    if "leakage_head" in summary:
        w = summary["window"].values[0]
        est = summary["leakage_head"].sel(window=w, stat="estimate")
        q = summary["q_value"].sel(window=w)
        prefix, label = "", "ΔR² of the head's expected map"
    else:
        targets = ("logattn",)
        est = summary["per_prompt_leakage_head"].sel(stat="estimate")
        q = summary["per_prompt_q_value"]
        prefix, label = "per_prompt/", "ΔR² − null (mean over prompts)"
    got = {
        f"{prefix}{v}/{t}": {
            "estimate": est.sel(variant=v, target=t).transpose("layer", "head").values,
            "marked": (q.sel(variant=v, target=t).transpose("layer", "head") <= alpha).values,
        }
        for t in targets
        for v in variants
    }
    nl, nh = next(iter(got.values()))["estimate"].shape
    kinds = np.asarray(layer_kinds(summary), dtype=object)
    ticks = None
    if len(set(kinds)) > 1:  # each layer's kind on its tick: "3 G" (global), "4 S512" (window)
        abbr = ["G" if k == GLOBAL else "S" + k[len("sliding") :] for k in kinds]
        ticks = [f"{layer} {a}" for layer, a in zip(summary["layer"].values, abbr)]
    panels = [(t, v) for t in targets for v in variants]
    nrow = 1 if len(panels) + bool(prefix) <= 4 else len(targets)
    ncol = -(-(len(panels) + bool(prefix)) // nrow)
    lim = max(float(np.nanmax(np.abs(m["estimate"]), initial=0.0)) for m in got.values()) or 1.0
    with plt.rc_context(GRID_STYLE):
        fig, axes = subplot_grid(
            nrow, ncol, (max(0.3 * nh + 0.9, 2.6) * ncol + 1.4, (0.17 * nl + 1.3) * nrow + 1.4)
        )
        cells = list(axes.ravel())
        if prefix:
            note(cells[0], NO_HEADLINE + f"\n\nnext: {PER_PROMPT}")
            cells[0].set_axis_off()
            cells = cells[1:]
        for ax in cells[len(panels) :]:
            ax.remove()
        for ax, (t, v) in zip(cells, panels):
            im = _head_panel(ax, got[f"{prefix}{v}/{t}"], (v, t), lim, ticks)
            if list(axes.ravel()).index(ax) % ncol:  # the layer axis named in the first column
                ax.set_ylabel("")
        fig.colorbar(im, ax=cells[: len(panels)], shrink=0.9, label=label)
        layers = kinds_text(kinds)
        if len(set(kinds)) > 1:
            layers = f"layers: {layers} (G: global, S<W>: sliding window of W)"
        suptitle(
            fig,
            f"Paper 2 per head: the {'headline' if not prefix else PER_PROMPT}",
            " · ".join(pair_name(pair, names)) if pair else None,
            f"dots: heads with BH q ≤ {alpha:g}; one colour scale for every panel\n{layers}",
        )
        save(fig, paths)
    return got


#: Line styles of position 0's conditions, in turn (colours and markers: the stores).
CONDITION_STYLES = ("-", "--", ":", "-.")
#: Markers of position 0's stores, in turn, each smaller than the last so that lines that
#: coincide all show.
STORE_MARKERS = (("o", 7.0), ("s", 5.0), ("^", 3.5), ("D", 2.5))


def coinciding(lines: Mapping[str, np.ndarray]) -> list[list[str]]:
    """Groups of two or more labels whose lines are identical (NaN where NaN)."""
    groups: list[list[str]] = []
    for label, y in lines.items():
        for g in groups:
            if np.array_equal(lines[g[0]], y, equal_nan=True):
                g.append(label)
                break
        else:
            groups.append([label])
    return [g for g in groups if len(g) > 1]


def position0_std(
    trajectories: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    var: str = "ratio",
    styles: Mapping[str, Mapping] | None = None,
    legend: Mapping | None = None,
    title: tuple[str, str | None] = ("Paper 2 claim 7: position 0 across prompts", None),
    display: Mapping[str, str] | None = None,
) -> dict[str, np.ndarray]:
    """Cross-prompt spread of the position-0 residual stream by depth (0: the embedding), one
    line per condition, on a symmetric-log y axis (a fixed-BOS causal model's exact zeros show
    beside positive spreads). ``styles``: label -> the line's keyword arguments; ``legend``:
    label -> handle (instead of one entry per line); ``title``: (what, subject); ``display``:
    label -> its words where identical lines are named in the title.

    Returns label -> ``(layer,)`` values of ``var`` as plotted.
    """
    with plt.rc_context(GRID_STYLE):
        fig, ax = plt.subplots(figsize=(8.0, 4.2), layout="constrained")
        plotted = {}
        for label, tr in trajectories.items():
            y = tr[var].values
            kw = {"marker": "o", "ms": 3, **(styles.get(label, {}) if styles else {})}
            ax.plot(tr["layer"].values, y, lw=1.2, label=label, **kw)
            plotted[label] = y
        positive = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in plotted.values()])
        # linear below a tenth of the smallest positive spread: exact zeros show, and no decade
        # below the data is drawn
        ax.set_yscale("symlog", linthresh=float(positive.min()) / 10 if positive.size else 1e-6)
        ax.set_xlabel(DEPTH_AXIS)
        ax.xaxis.set_major_locator(MaxNLocator(8, integer=True))
        ax.set_ylabel(
            {"ratio": "cross-prompt std / mean norm", "std": "cross-prompt std"}.get(var, var)
        )
        handles = (
            legend if legend is not None else dict(zip(*reversed(ax.get_legend_handles_labels())))
        )
        ax.legend(handles.values(), handles.keys(), loc="upper left", bbox_to_anchor=(1.02, 1.0))
        same = [" = ".join((display or {}).get(x, x) for x in g) for g in coinciding(plotted)]
        details = "symmetric-log y axis (linear near 0); no interval (one number per depth)"
        if same:
            details += "; identical lines, drawn on top of each other: " + "; ".join(same)
        suptitle(fig, title[0], title[1], details)
        save(fig, paths)
    return plotted


def position0_conditions(
    stores: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    var: str = "ratio",
    names: Mapping[str, str] | None = None,
    experiment: str | None = None,
) -> dict[str, np.ndarray]:
    """:func:`position0_std` of position-0 stores with a ``condition`` dim, a line per store and
    condition (``"<store label> · <condition>"``): a colour and marker per store, a line style per
    condition, one legend entry each; ``names``: display names of the ``model/dataset`` labels."""
    from matplotlib.lines import Line2D

    lines, styles, legend, display = {}, {}, {}, {}
    subject, panel_name = subject_of(list(stores), names, experiment)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    conds = list(
        dict.fromkeys(
            str(c)
            for ds in stores.values()
            if "condition" in ds.dims
            for c in ds["condition"].values
        )
    )
    for i, (label, ds) in enumerate(stores.items()):
        colour = colours[i % len(colours)]
        marker, ms = STORE_MARKERS[i % len(STORE_MARKERS)]
        legend[panel_name[label]] = Line2D([], [], color=colour, marker=marker, ms=ms)
        parts = [(label, ds, 0)]
        if "condition" in ds.dims:
            parts = [
                (f"{label} · {c}", ds.sel(condition=c), conds.index(str(c)))
                for c in ds["condition"].values
            ]
        for name, tr, k in parts:
            lines[name] = tr
            display[name] = name.replace(label, panel_name[label], 1)
            styles[name] = {
                "color": colour,
                "ls": CONDITION_STYLES[k % len(CONDITION_STYLES)],
                "marker": marker,
                "ms": ms,
                "mfc": "none" if i == 0 else colour,
            }
    for k, c in enumerate(conds):
        legend[f"condition: {c}"] = Line2D(
            [], [], color="0.3", ls=CONDITION_STYLES[k % len(CONDITION_STYLES)]
        )
    title = ("Paper 2 claim 7: position 0's residual stream across prompts", subject)
    return position0_std(
        lines, paths, var=var, styles=styles, legend=legend, title=title, display=display
    )
