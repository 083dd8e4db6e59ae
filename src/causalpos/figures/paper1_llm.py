"""Figures of paper 1 (Kim et al. 2025) for pretrained (or any extracted) models: Fig. 5 and
App. E (paper 1 §6), one row per ``model/dataset/variant`` run; conventions as
:mod:`causalpos.figures.paper1`'s.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from causalpos.figures.common import (
    DIVERGING,
    GRID_STYLE,
    heatmap,
    quantile_limits,
    save,
    subplot_grid,
    suptitle,
)
from causalpos.figures.labels import INDEXING, common_part, named, variant_name
from causalpos.figures.paper1 import INDEX_NOTE
from causalpos.paper1.diagonal import non_relativeness_index

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr


def run_names(labels: Sequence[str], names: Mapping[str, str] | None) -> dict[str, list[str]]:
    """The display names of ``model/dataset/variant`` labels, by part: ``{"model": [...],
    "dataset": [...], "variant": [...]}`` in the labels' order."""
    parts = [label.split("/") for label in labels]
    if any(len(p) != 3 for p in parts):
        raise ValueError(f"run labels must read model/dataset/variant; got {list(labels)}")
    return {
        "model": [named(p[0], names) for p in parts],
        "dataset": [named(p[1], names) for p in parts],
        "variant": [variant_name(p[2]) for p in parts],
    }


def _row_names(labels: Sequence[str], names: Mapping[str, str] | None) -> tuple[list[str], str]:
    """Each row's words (the parts in which the rows differ) and the figure's subject (every
    model, dataset and variant once), for a figure of one row per ``model/dataset/variant``."""
    parts = run_names(labels, names)
    shared = {k: common_part(v) for k, v in parts.items()}
    rows = [
        "\n".join(parts[k][i] for k in parts if shared[k] is None) or parts["model"][i]
        for i in range(len(labels))
    ]
    subject = " · ".join("; ".join(dict.fromkeys(v)) for v in parts.values())
    return rows, subject


def draw_llm_fig5(
    stores: Sequence[xr.Dataset],
    labels: Sequence[str],
    out_paths: Sequence[str | os.PathLike],
    *,
    n_layers: int = 4,
    quantiles: tuple[float, float] = (0.01, 0.99),
    names: Mapping[str, str] | None = None,
) -> dict[str, list[float]]:
    """Fig. 5 layout: one row per ``model/dataset/variant`` (``labels``), its first ``n_layers``
    layers' diagonal-normalized head-averaged maps (``score_normalized_mean``), colour limits at
    each row's 1 %/99 % quantiles (the attention sink would otherwise flatten the map). Rows are
    labelled by the display names (``names``) of what differs between them.

    Returns per label each drawn layer's index with key 0 out (paper 1 §7: the map of queries
    and keys >= 1 of the raw ``score_mean_head_avg``), as in ``llm_index.csv``; the maps drawn
    keep key 0, as the paper's.
    """
    if not stores:
        raise ValueError("draw_llm_fig5: no stores")
    if any("score_mean_head_avg" not in ds for ds in stores):
        raise ValueError(
            "draw_llm_fig5: the normalized store has no 'score_mean_head_avg' (the raw map the "
            "index without key 0 reads); rerun rule diagonal_normalize"
        )
    n_cols = min(n_layers, min(ds.sizes["layer"] for ds in stores))
    rows, subject = _row_names(labels, names)
    drawn: dict[str, list[float]] = {}
    with plt.rc_context(GRID_STYLE):
        fig, axes = subplot_grid(len(stores), n_cols, (3.0 * n_cols + 1.6, 3.0 * len(stores) + 1.2))
        for r, (ds, label) in enumerate(zip(stores, labels)):
            maps = np.asarray(ds["score_normalized_mean"].values[:n_cols], dtype=np.float64)
            lo, hi = quantile_limits(list(maps), *quantiles)
            lim = max(abs(lo), abs(hi))
            raw = np.asarray(ds["score_mean_head_avg"].values[:n_cols], dtype=np.float64)
            idx = non_relativeness_index(raw[..., 1:, 1:])
            drawn[label] = [float(x) for x in idx]
            for c in range(n_cols):
                ax = axes[r, c]
                im = heatmap(
                    ax,
                    maps[c],
                    vmin=-lim,
                    vmax=lim,
                    cmap=DIVERGING,
                    title=f"layer {c}   I = {idx[c]:.3g}",
                )
                if c:
                    ax.set_ylabel("")
                if r < len(stores) - 1:
                    ax.set_xlabel("")
            axes[r, 0].set_ylabel(f"{rows[r]}\nquery position")
            fig.colorbar(im, ax=axes[r, :].tolist(), shrink=0.85, label="diagonal-normalized logit")
        n_seq = stores[0].attrs.get("n_sequences", "?")
        suptitle(
            fig,
            "Paper 1 Fig. 5: diagonal-normalized pre-softmax scores, mean over sequences and heads",
            subject,
            f"{n_seq} sequences × {stores[0].sizes['query']} tokens; colour limits at the "
            f"{quantiles[0]:.0%}/{quantiles[1]:.0%} quantiles per row; float32 scores; "
            f"{INDEX_NOTE}, key 0 out; {INDEXING}",
        )
        save(fig, out_paths)
    return drawn


def draw_llm_appendix(
    normalized: xr.Dataset,
    label: str,
    out_paths: Sequence[str | os.PathLike],
    *,
    quantiles: tuple[float, float] = (0.01, 0.99),
    max_cols: int = 8,
    names: Mapping[str, str] | None = None,
) -> None:
    """App. E: every layer of one ``model/dataset/variant`` (``label``; ``names``: its display
    names), raw head-averaged mean scores and diagonal-normalized ones (alternating rows: raw,
    normalized), quantile colour limits over all layers."""
    raw = np.asarray(normalized["score_mean_head_avg"].values, dtype=np.float64)
    nrm = np.asarray(normalized["score_normalized_mean"].values, dtype=np.float64)
    n_layers = raw.shape[0]
    n_cols = min(max_cols, n_layers)
    n_blocks = math.ceil(n_layers / n_cols)
    parts = run_names([label], names)
    with plt.rc_context(GRID_STYLE):
        fig, axes = subplot_grid(
            2 * n_blocks, n_cols, (2.4 * n_cols + 1.6, 2.45 * 2 * n_blocks + 1.2)
        )
        rlo, rhi = quantile_limits(list(raw), *quantiles)
        nlo, nhi = quantile_limits(list(nrm), *quantiles)
        nlim = max(abs(nlo), abs(nhi))
        for layer in range(n_blocks * n_cols):
            b, c = divmod(layer, n_cols)
            ax_r, ax_n = axes[2 * b, c], axes[2 * b + 1, c]
            if layer >= n_layers:
                ax_r.axis("off")
                ax_n.axis("off")
                continue
            im_r = heatmap(
                ax_r, raw[layer], vmin=rlo, vmax=rhi, title=f"layer {layer} raw", ticks=2
            )
            im_n = heatmap(
                ax_n,
                nrm[layer],
                vmin=-nlim,
                vmax=nlim,
                cmap=DIVERGING,
                title=f"layer {layer} normalized",
                ticks=2,
            )
            for ax, last in ((ax_r, False), (ax_n, layer + n_cols >= n_layers)):
                ax.set_xlabel("key position" if last else "")  # under each column's last map
                ax.set_ylabel("query position" if c == 0 else "")
        # The raw and normalized rows interleave, so their two colour bars take two sides (on one
        # side both would span the same height and be drawn over each other).
        fig.colorbar(
            im_r, ax=axes[0::2, :].ravel().tolist(), shrink=0.6, label="mean logit (raw rows)"
        )
        fig.colorbar(
            im_n,
            ax=axes[1::2, :].ravel().tolist(),
            shrink=0.6,
            location="left",
            label="diagonal-normalized logit (normalized rows)",
        )
        suptitle(
            fig,
            "Paper 1 App. E: every layer, raw and diagonal-normalized scores",
            f"{parts['model'][0]} · {parts['dataset'][0]} · {parts['variant'][0]}",
            "query position on rows, key position on columns; "
            f"{normalized.attrs.get('n_sequences', '?')} sequences, mean over heads, float32; "
            f"colour limits at the {quantiles[0]:.0%}/{quantiles[1]:.0%} quantiles; {INDEXING}",
        )
        save(fig, out_paths)
