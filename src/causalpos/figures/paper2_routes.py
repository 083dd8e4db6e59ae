"""Paper 2 §3's three routes by layer (:func:`routes_by_layer`): the direct causal mask (the causal
run's normaliser with its cross term), the indirect causal mask (causal minus ring logits) and the
mask-free position (the ring's logits), which add up to the total
(:mod:`causalpos.paper2.decomposition`).

It draws the cells the tables print (``decomposition_components_by_layer``, ``..._by_kind``,
``decomposition_components``) of condition ``rope`` (else the first) and the first window; a
route the tables mark "not applicable" (:func:`causalpos.paper2.labels.token0_status`) is said,
not drawn as 0. The panels: the caption, workflow/report/paper2_routes.rst.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from causalpos.figures.common import (
    GRID_STYLE,
    ci_text,
    grid_columns,
    integer_ticks,
    kind_handles,
    kind_order,
    kinds_text,
    save,
    shade_global_layers,
    suptitle,
)
from causalpos.figures.labels import LAYER_AXIS
from causalpos.figures.paper2 import PAPER2_SHARE, SHARE_LIMITS
from causalpos.figures.paper2_layers import (
    draw_curves,
    grid_blocks,
    grid_legend,
    note,
    panel_title,
    rows_of,
    subject_of,
)
from causalpos.models.layer_kinds import layer_kinds
from causalpos.paper2.labels import MEASURED, token0_status

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

#: The curves of the per-layer rows: column of the components tables -> (colour, line style,
#: line width, CI band opacity, label).
ROUTES = {
    "total": ("#222222", "-", 2.6, 0.15, "total (causal run, log-attention)"),
    "direct_mask": ("#d62728", "-", 1.8, 0.18, "direct causal mask (causal log-attn − logits)"),
    "indirect_mask": ("#9467bd", "--", 1.8, 0.18, "indirect causal mask (causal − ring logits)"),
    "mask_free": ("#1f77b4", "-.", 1.8, 0.18, "mask-free position (ring logits)"),
}
#: The pooled row: share column -> (colour, marker, label).
SHARES = {
    "share_direct_mask": ("#d62728", "o", "share: direct"),
    "share_indirect_mask": ("#9467bd", "s", "share: indirect"),
    "share_mask_free": ("#1f77b4", "D", "share: mask-free"),
    "share_causal_mask_ablation": (
        "#222222",
        "*",
        "share: causal mask, ablation mapping (direct + indirect; claim 4)",
    ),
}
#: The columns the tables set NaN where the mask-free route does not apply.
MASK_FREE = ("mask_free", "share_mask_free", "share_causal_mask_ablation")
#: Rows of a block, top to bottom: the per-layer landmark readings, then the pooled shares.
LANDMARK_ROWS = {
    "modelled": "key 0 modelled (claim 2)",
    "counted": "key 0 counted (claim 4, paper 2's fit)",
}
ROW_LABELS = {
    "modelled": "ΔSS, key 0 modelled",
    "counted": "ΔSS, key 0 counted",
    "pooled": "share of the total",
}
#: The band of paper 2's causal-mask shares (:data:`causalpos.figures.paper2.PAPER2_SHARE`).
PAPER2_BAND = "#fdd9a0"
NOT_DECOMPOSED = "no ring run in this summary:\nthe routes are not decomposed"


def route_rows(summary: xr.Dataset) -> dict | None:
    """What :func:`routes_by_layer` draws of one summary: ``{"condition", "status" (the mask-free
    route's, as the tables say it), "layers", "kinds", "modelled" / "counted": route -> (layer,
    3), "pooled": pool label -> share column -> (3,)}`` (estimate, lo, hi), a route or share not
    applicable left out; None without a decomposition (no ring run)."""
    if "components_layer" not in summary:
        return None
    conds = [str(c) for c in summary["condition"].values]
    cond = "rope" if "rope" in conds else conds[0]
    at = {"condition": cond, "window": str(summary["window"].values[0])}
    _, status = token0_status(summary.attrs)
    skip = () if status == MEASURED else MASK_FREE
    kinds = np.asarray(layer_kinds(summary), dtype=object)
    out: dict = {"condition": cond, "status": status, "kinds": kinds}
    out["layers"] = summary["layer"].values.astype(int)
    layer = summary["components_layer"].sel(at)
    for lm in LANDMARK_ROWS:
        out[lm] = {
            k: rows_of(layer.sel(landmark=lm, component_full=k)) for k in ROUTES if k not in skip
        }
    pools = {"all layers": summary["components"].sel(at)}
    order = kind_order(kinds)
    if len(order) > 1 and "components_kind" in summary:
        by_kind = summary["components_kind"].sel(at)
        for k in order:
            pools[f"{int((kinds == k).sum())} {k}"] = by_kind.sel(layer_kind_name=k)
    out["pooled"] = {
        f"{pool}\nkey 0 {lm}": {
            k: rows_of(x.sel(landmark=lm, component_full=k)) for k in SHARES if k not in skip
        }
        for lm in LANDMARK_ROWS
        for pool, x in pools.items()
    }
    return out


def _draw_pooled(ax, pooled: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    lo_lim, hi_lim = SHARE_LIMITS
    ax.axhspan(*PAPER2_SHARE, color=PAPER2_BAND, lw=0, zorder=0)
    offsets = np.linspace(-0.27, 0.27, len(SHARES))
    for i, vals in enumerate(pooled.values()):
        for k, off in zip(SHARES, offsets):
            color, marker, label = SHARES[k]
            if k not in vals:
                ax.text(i + off, 0.5, "n/a", fontsize=7, ha="center", va="center", rotation=90,
                        color=color)  # fmt: skip
                continue
            est, lo, hi = vals[k]
            ax.vlines(i + off, *np.clip([lo, hi], lo_lim, hi_lim), color=color, lw=1.2)
            ax.plot(i + off, np.clip(est, lo_lim, hi_lim), marker=marker, color=color, ms=5,
                    ls="none", label=label)  # fmt: skip
            if np.isfinite(est) and not lo_lim <= est <= hi_lim:
                ax.annotate(f"{est:.2g}", (i + off, np.clip(est, lo_lim, hi_lim)), fontsize=6.5)
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
    ax.set_xticks(np.arange(len(pooled)), list(pooled), fontsize=7)
    ax.set_xlim(-0.5, len(pooled) - 0.5)
    ax.set_ylim(lo_lim - 0.1, hi_lim + 0.1)


def _block(cells, got: dict | None, name: str, first_column: bool) -> bool:
    """One block's panels; True where it shaded global layers."""
    if got is None:
        for ax in cells:
            note(ax, f"{name}\n{NOT_DECOMPOSED}")
            ax.set_axis_off()
        return False
    shaded = False
    na = "" if got["status"] == MEASURED else "mask-free route: n/a (token 0 not fixed)"
    for ax, lm in zip(cells, LANDMARK_ROWS):
        shaded |= shade_global_layers(ax, got["layers"], got["kinds"])
        draw_curves(ax, got["layers"], got[lm], ROUTES)
        ax.axhline(0.0, color="0.6", lw=0.8)
        if ax is not cells[0]:
            ax.sharey(cells[0])
        parts = (LANDMARK_ROWS[lm], kinds_text(got["kinds"])) + ((na,) if na else ())
        ax.set_title(panel_title(name, *parts))
        integer_ticks(ax, 6, axis="x")
        ax.set_xlabel(LAYER_AXIS)
    _draw_pooled(cells[2], got["pooled"])
    cells[2].set_title(panel_title(name, f"pooled, condition {got['condition']}"))
    if first_column:
        for ax, label in zip(cells, ROW_LABELS.values()):
            ax.set_ylabel(label)
    return shaded


def routes_by_layer(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    names: Mapping[str, str] | None = None,
    experiment: str | None = None,
) -> dict[str, dict | None]:
    """The three routes of §3 per layer and their pooled shares, a block of three panels per
    summary (``"model/dataset"`` keys; ``names``: their display names; ``experiment``: in the
    title); a summary without a ring run is said, not drawn. Returns key -> :func:`route_rows`."""
    if not summaries:
        raise ValueError("routes_by_layer: no summaries to plot")
    subject, panel_name = subject_of(list(summaries), names, experiment)
    got = {m: route_rows(s) for m, s in summaries.items()}
    level = float(next(iter(summaries.values())).attrs.get("level", 0.95))
    with plt.rc_context(GRID_STYLE):
        fig, cells = grid_blocks(len(got), 3)
        ncol = grid_columns(len(got))
        shaded, all_kinds = False, []
        for j, (m, g) in enumerate(got.items()):
            shaded |= _block(cells[j], g, panel_name[m].replace(" · ", "\n"), j % ncol == 0)
            if g is not None:
                all_kinds += list(g["kinds"])
        extra = kind_handles(all_kinds, shaded=shaded)
        extra[f"shaded band: its curve's {ci_text(level)}; vertical bar: a share's"] = Patch(
            facecolor="0.5", alpha=0.3, lw=0
        )
        extra["paper 2's causal-mask shares, 0.64–0.82 (ablation mapping)"] = Patch(
            facecolor=PAPER2_BAND, lw=0
        )
        grid_legend(fig, fig.axes, extra)
        suptitle(
            fig,
            "Paper 2 §3 by layer: the three routes of the causal run's position",
            subject,
            "ΔSS of each route's expected map over the causal run's expected log-attention "
            "variance in that layer; the routes add up to the total. Ablation mapping (paper "
            "2's, claims 2 and 4): causal mask = direct + indirect, residual stream = "
            "mask-free; mechanism mapping: causal mask = direct, residual stream = indirect + "
            f"mask-free. Shares beyond {SHARE_LIMITS[0]:g} to {SHARE_LIMITS[1]:g} are drawn at "
            "the edge with their value; n/a: not applicable",
        )
        save(fig, paths)
    return got
