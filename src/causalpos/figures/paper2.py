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

from causalpos.figures.common import (
    DIVERGING,
    GRID_STYLE,
    heatmap,
    kind_dim,
    kinds_text,
    pooled_by_kind,
    save,
)
from causalpos.figures.paper2_claim1 import CLAIM1_RUNS, claim1_by_layer  # noqa: F401
from causalpos.figures.paper2_layers import (  # noqa: F401  (re-exported)
    CURVES,
    LAYER_ROWS,
    NO_HEADLINE,
    PER_PROMPT,
    PER_PROMPT_CURVES,
    leakage_by_layer,
)
from causalpos.figures.paper2_layers import note as _note
from causalpos.models.layer_kinds import layer_kinds

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

__all__ = [
    "leakage_by_layer",
    "claim1_by_layer",
    "component_shares",
    "head_maps",
    "position0_std",
    "position0_conditions",
]

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


def _share_groups(
    summaries: Mapping[str, xr.Dataset], conditions: Sequence[str] | None
) -> dict[str, tuple[str, np.ndarray]]:
    """``"model/condition"`` (``"model/condition/kind"`` where the summary splits the pooled
    components by layer kind) -> (tick label, ``(len(SHARE_READINGS), 3)``)."""
    groups: dict[str, tuple[str, np.ndarray]] = {}
    for model, s in summaries.items():
        if "exp_components" not in s:
            continue
        kinds = np.asarray(layer_kinds(s), dtype=object)
        comp = s["exp_components"].sel(exp_window=s["exp_window"].values[0])
        for c in comp["exp_condition"].values:
            if conditions is not None and c not in conditions:
                continue
            x = comp.sel(exp_condition=c, stat=["estimate", "lo", "hi"])
            split = kind_dim(x) is not None
            for what, xk in pooled_by_kind(x, kinds).items():
                key = f"{model}/{c}" + (f"/{what.split(' ')[1]}" if split else "")
                pools = "" if len(set(kinds)) == 1 and not split else f"\n{what}"
                tick = (
                    model.replace("/", "\n")
                    + f"\n{c}"
                    + pools.replace(": ", ":\n").replace(" + ", "\n+ ")
                )
                groups[key] = (
                    tick,
                    np.stack(
                        [
                            xk.sel(exp_landmark=lm, component_full=k).values
                            for lm, k, _ in SHARE_READINGS
                        ]
                    ),
                )
    return groups


def component_shares(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    conditions: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """The causal-mask share (Eq. 5) per (model, condition) on the headline, four readings
    side by side (:data:`SHARE_READINGS`: both landmark readings × the artefact-free residual
    stream and paper 2's), with CIs; paper 2's 64–82 % as a band. The summary's first window.
    The shares pool over layers: per layer kind where the summary splits them (a dim of layer
    kinds), else, for a model that mixes kinds, the tick says what they pool.

    Returns:
        ``"model/condition"`` (``"model/condition/kind"`` per layer kind) -> ``(len(
        SHARE_READINGS), 3)`` (estimate, lo, hi) as plotted.
    """
    groups = _share_groups(summaries, conditions)
    with plt.rc_context(GRID_STYLE):
        width = min(max(4.5, 1.15 * len(groups) + 1.2), 10.5)
        fig, ax = plt.subplots(figsize=(width, 4.6), layout="constrained")
        ax.axhspan(*PAPER2_SHARE, color="0.85", lw=0, label=PAPER2_SHARE_LABEL)
        if not groups:
            _note(ax, "no decomposition on the headline in these summaries\n" + NO_HEADLINE)
            save(fig, paths)
            return {}
        lo_lim, hi_lim = SHARE_LIMITS
        offsets = np.linspace(-0.3, 0.3, len(SHARE_READINGS))
        for k, (lm, comp_name, label) in enumerate(SHARE_READINGS):
            color, marker = _SHARE_STYLE[comp_name.endswith("_paper")]
            face = color if lm == "modelled" else "white"
            x = np.arange(len(groups)) + offsets[k]
            v = np.array([g[k] for _, g in groups.values()])
            ax.vlines(
                x, np.clip(v[:, 1], lo_lim, hi_lim), np.clip(v[:, 2], lo_lim, hi_lim), color=color
            )
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
        ax.set_ylabel("causal-mask share of the total")
        fig.legend(loc="outside lower center", ncol=2)
        save(fig, paths)
    return {key: g for key, (_, g) in groups.items()}


TARGET_LABELS = {"logit": "logits", "logattn": "log-attention"}


def _kind_abbr(kind: str) -> str:
    """A layer kind on a tick: "G" (global), "S512" (sliding window of 512)."""
    return "G" if kind == "global" else "S" + kind[len("sliding") :]


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
    with BH q ≤ α (``exp_q``, sign-flip test). Colour limits are shared along a row. The title
    names the layers' kinds; where they mix, each layer's tick carries its kind.

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
    kinds = np.asarray(layer_kinds(summary), dtype=object)
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
            if len(set(kinds)) > 1:  # each layer's kind on its tick
                ticks = [
                    f"{layer} {_kind_abbr(k)}" for layer, k in zip(summary["layer"].values, kinds)
                ]
                ax.set_yticks(np.arange(nl), ticks, fontsize=7)
        for ax in row[1:]:
            ax.set_ylabel("")
        fig.colorbar(im, ax=list(row), shrink=0.9, label=label)
    layers = kinds_text(kinds)
    if len(set(kinds)) > 1:
        layers = f"layers: {layers} (G: global, S<W>: sliding window of W)"
    fig.suptitle(f"{what}; dots: BH q ≤ {alpha:g}\n{layers}", fontsize=9)
    save(fig, paths)
    return got


#: Line styles of position 0's conditions, in turn (colours: the stores).
CONDITION_STYLES = ("-", "--", ":", "-.")


def position0_std(
    trajectories: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    var: str = "ratio",
    styles: Mapping[str, Mapping] | None = None,
    legend: Mapping | None = None,
) -> dict[str, np.ndarray]:
    """Cross-prompt spread of the position-0 residual stream by layer, one line per condition.

    A symmetric-log y axis keeps the exact zeros of a fixed-BOS causal model visible next to the
    positive spreads of bidirectional or varying-token-0 runs. ``styles``: label -> the line's
    keyword arguments; ``legend``: label -> handle, drawn right of the axes instead of one entry
    per line.

    Returns:
        label -> ``(layer,)`` values of ``var`` as plotted.
    """
    with plt.rc_context(GRID_STYLE):
        fig, ax = plt.subplots(figsize=(6.8, 3.6), layout="constrained")
        plotted = {}
        for label, tr in trajectories.items():
            y = tr[var].values
            kw = dict(styles.get(label, {})) if styles else {}
            ax.plot(tr["layer"].values, y, marker="o", ms=3, lw=1.2, label=label, **kw)
            plotted[label] = y
        finite = np.concatenate(
            [v[np.isfinite(v) & (v > 0)] for v in plotted.values()] + [np.array([1e-6])]
        )
        ax.set_yscale("symlog", linthresh=float(finite.min()))
        ax.set_xlabel("layer (0 = embedding)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(
            {"ratio": "cross-prompt std / mean norm", "std": "cross-prompt std"}.get(var, var)
        )
        handles = (
            legend if legend is not None else dict(zip(*reversed(ax.get_legend_handles_labels())))
        )
        ax.legend(handles.values(), handles.keys(), loc="upper left", bbox_to_anchor=(1.02, 1.0))
        save(fig, paths)
    return plotted


def position0_conditions(
    stores: Mapping[str, xr.Dataset], paths: Sequence[str | os.PathLike], *, var: str = "ratio"
) -> dict[str, np.ndarray]:
    """:func:`position0_std` of position-0 stores with a ``condition`` dim (one line per store and
    condition, labelled ``"<store label> · <condition>"``): a colour per store, a line style per
    condition (:data:`CONDITION_STYLES`), one legend entry for each."""
    from matplotlib.lines import Line2D

    lines, styles, legend = {}, {}, {}
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
        legend[label] = Line2D([], [], color=colour, marker="o", ms=3)
        parts = (
            [
                (f"{label} · {c}", ds.sel(condition=c), conds.index(str(c)))
                for c in ds["condition"].values
            ]
            if "condition" in ds.dims
            else [(label, ds, 0)]
        )
        for name, tr, k in parts:
            lines[name] = tr
            styles[name] = {"color": colour, "ls": CONDITION_STYLES[k % len(CONDITION_STYLES)]}
    for k, c in enumerate(conds):
        legend[f"condition: {c}"] = Line2D(
            [], [], color="0.3", ls=CONDITION_STYLES[k % len(CONDITION_STYLES)]
        )
    return position0_std(lines, paths, var=var, styles=styles, legend=legend)
