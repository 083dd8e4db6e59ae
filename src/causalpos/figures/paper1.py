"""Figures of paper 1 (Kim et al. 2025): the theory (Fig. 1) and the simulations (Figs. 2, 4, 6,
7, 9, 10).

Every function saves to every path in ``out_paths`` and returns the numbers it drew (colour
limits, annotated values). Layers and positions count from 0, as in the stores (layer 0 = the
paper's layer 1; position 0 = its position 1); each figure says so.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from causalpos.figures.common import DIVERGING, GRID_STYLE, heatmap, quantile_limits, save, suptitle
from causalpos.figures.labels import INDEXING, POSITION_AXIS, setting_name
from causalpos.paper1 import theory as T
from causalpos.paper1.diagonal import index_ci, non_relativeness_index, normalize

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

#: What the panels' "I" is (paper 1 §4): said in every figure that prints it.
INDEX_NOTE = (
    "I: non-relativeness index of the diagonal-normalized map (0: the map depends on the offset "
    "query − key alone)"
)


def _annotate(ax, m: np.ndarray, fmt: str = "{:.3f}", *, vmin: float, vmax: float) -> list[str]:
    """Write each finite value of a small map into its cell; returns the texts."""
    texts = []
    mid = (vmin + vmax) / 2
    for (i, j), v in np.ndenumerate(m):
        if np.isfinite(v):
            txt = fmt.format(v)
            ink = "black" if v > mid else "white"  # legible on the colour map's light / dark end
            ax.text(j, i, txt, ha="center", va="center", fontsize=8, color=ink)
            texts.append(txt)
    return texts


def _fig1_profiles(ax, n: int, alphas: Sequence[float]) -> None:
    """Fig. 1's profiles: the second layer's logit S(i, j) over keys j of the last query (and of
    the query halfway), per α."""
    pos = np.arange(1, n + 1)
    for alpha in alphas:
        (line,) = ax.plot(
            pos[:-1] - 1,
            T.layer2_score(n, pos[:-1], alpha),
            label=f"α = {alpha:g}, query {n - 1}",
        )
        half = n // 2
        ax.plot(
            pos[: half - 1] - 1,
            T.layer2_score(half, pos[: half - 1], alpha),
            ls="--",
            lw=1.0,
            marker="o",
            ms=3,
            mfc="white",
            markevery=3,  # where it runs on the solid line, its markers show it
            color=line.get_color(),
            label=f"α = {alpha:g}, query {half - 1}",
        )
    ax.set_xlabel("key position j < query (0 = first token)")
    ax.set_ylabel("second layer's logit S(i, j)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.set_title("increasing in j: nearby keys score higher")


def draw_fig1(
    out_paths: Sequence[str | os.PathLike],
    *,
    alphas: Sequence[float] = (0.0, 0.2, 0.6),
    n: int = 50,
) -> dict:
    """Paper 1 Fig. 1: the parameter-free layer at α = 0, n = 3, and the closed-form maps of the
    second layer.

    Top row (n = 3, α = 0): the first layer's logits (cosines of the inputs) and attention
    weights, the second layer's logits from the closed form g(i)/(h(i)h(j)) (the paper prints
    0.154, 0.132, 0.150; the closed form gives 0.1535, 0.1321, 0.1508), and the norms h(i) =
    ‖x_i⁽¹⁾‖ whose decrease makes the second layer's score increase toward the diagonal. Bottom
    row: the second layer's map for each α in ``alphas`` at ``n`` positions (the diagonal,
    identically 1, blank), and the profiles S(i, j) over keys j for the last query.

    Returns ``{"layer2_n3": (3, 3) closed-form map, "annotations": [texts of the second layer's
    panel], "clims": {panel title: (vmin, vmax)}}``.
    """
    alpha0 = 0.0
    x = T.equicorrelated_vectors(3, alpha0)
    lower = np.tril(np.ones((3, 3), bool))
    cos = np.where(lower, x @ x.T, np.nan)
    w_diag, w_off = T.layer1_weights(np.arange(1, 4), alpha0)
    attn = np.where(np.eye(3, dtype=bool), w_diag[:, None], np.where(lower, w_off[:, None], np.nan))
    s2 = T.layer2_matrix(3, alpha0)

    with plt.rc_context(GRID_STYLE):
        fig, axes = plt.subplots(2, 4, figsize=(15, 7.8), layout="constrained")
        clims: dict[str, tuple[float, float]] = {}
        top = [
            ("first layer's logits ⟨y_i, y_j⟩ (α = 0)", cos, "{:.0f}"),
            ("first layer's attention weights", attn, "{:.3f}"),
            ("second layer's logits, closed form\n(paper prints .154 .132 .150)", s2, "{:.3f}"),
        ]
        annotations: list[str] = []
        for ax, (title, m, fmt) in zip(axes[0], top):
            im = heatmap(ax, m, vmin=0.0, vmax=1.0, title=title)
            texts = _annotate(ax, m, fmt, vmin=0.0, vmax=1.0)
            if title.startswith("second"):
                annotations = texts
            ax.set_xticks([0, 1, 2])
            ax.set_yticks([0, 1, 2])
            clims[title] = (0.0, 1.0)
        fig.colorbar(im, ax=axes[0, :3].tolist(), shrink=0.8, label="logit or weight")
        i3 = np.arange(1, 4)
        ax = axes[0, 3]
        hv = T.h(i3, alpha0)
        ax.bar(i3 - 1, hv, color="0.35")
        for i, v in zip(i3 - 1, hv):
            ax.text(i, v + 0.03, f"{v:.3f}", ha="center", fontsize=8)
        ax.set_xticks(i3 - 1)
        ax.set_xlabel(POSITION_AXIS)
        ax.set_ylabel(r"$h = \|x^{(1)}\|$, first layer's output norm")
        ax.set_ylim(0, 2.3)
        ax.set_title("first layer's output norms (decreasing)")

        for ax, alpha in zip(axes[1, :3], alphas):
            m = T.layer2_matrix(n, alpha)
            off = np.where(np.eye(n, dtype=bool), np.nan, m)
            lim = quantile_limits([off], 0.0, 1.0)
            title = f"second layer, closed form, α = {alpha:g}\n(diagonal = 1, blank)"
            im = heatmap(ax, off, vmin=lim[0], vmax=lim[1], title=title)
            fig.colorbar(im, ax=ax, shrink=0.8, label="logit")
            clims[title] = lim
        _fig1_profiles(axes[1, 3], n, alphas)
        suptitle(
            fig,
            "Paper 1 Fig. 1: positional information from the causal mask alone",
            "the parameter-free causal layer (Eq. 1), closed forms of §3",
            "inputs: n unit vectors with pairwise cosine α; " + INDEXING,
        )
        save(fig, out_paths)
    return {"layer2_n3": s2, "annotations": annotations, "clims": clims}


def raw_limits(attrs: dict) -> tuple[float, float]:
    """Colour limits of raw logit maps: [0, diagonal logit].

    The diagonal logit is ‖y‖²·scale: 1 for L2 (the paper's [0, 1]); for LayerNorm ‖y‖² ≈ d, so
    d (no scaling), √d (÷√d: the softmax is near-identity and the pattern nearly vanishes, Fig. 7)
    or 1 (÷d: L2-like).
    """
    if attrs.get("norm", "l2") == "l2":
        return 0.0, 1.0
    d = float(attrs["dim"])
    return 0.0, {"none": d, "sqrt_d": math.sqrt(d), "d": 1.0}[attrs.get("scaling", "none")]


def _simulation_rows(
    stores: list[xr.Dataset], labels: list[str], normalized_row: bool
) -> list[tuple[xr.Dataset, str, str, np.ndarray]]:
    """(store, label, "raw" | "normalized", maps (layer, query, key)) of every row of
    :func:`draw_simulation`, in drawing order."""
    if not stores:
        raise ValueError("draw_simulation: no stores to plot")
    if len(labels) != len(stores):
        raise ValueError(
            f"draw_simulation: {len(labels)} labels for {len(stores)} stores; give one label per store"
        )
    rows = []
    for ds, label in zip(stores, labels):
        raw = ds["score"].transpose("layer", "query", "key").values
        rows.append((ds, label, "raw", raw))
        if normalized_row:
            nm = (
                ds["score_normalized"].transpose("layer", "query", "key").values
                if "score_normalized" in ds
                else normalize(raw)
            )
            rows.append((ds, label, "normalized", nm))
    return rows


def draw_simulation(
    stores: Sequence[xr.Dataset],
    labels: Sequence[str],
    out_paths: Sequence[str | os.PathLike],
    *,
    normalized_row: bool,
    title: str,
) -> dict:
    """Mean pre-softmax logit maps of simulation stores: one row per setting, one column per layer.

    With ``normalized_row`` each setting gets a raw row and a diagonal-normalized row (Figs. 4, 9,
    10). Rows are labelled by their setting's words (:func:`setting_name`; ``labels`` are
    returned, not drawn). Raw rows leave the diagonal blank (its constant logit,
    :func:`raw_limits`, would take the colour range) and take their limits from the row's other
    cells; normalized rows symmetric limits at the larger magnitude of the 1 % / 99 % quantiles
    over the row's layers (one scale per row, so layers compare). Normalized panels are titled
    with the index I and, when the store has ``score_group``, its Monte-Carlo noise floor
    (:func:`causalpos.paper1.diagonal.index_ci`; I ≈ floor: no detectable non-relative part).

    Returns ``{"rows": [{"label", "kind", "vmin", "vmax", "layers", "index", "noise_floor"}, ...]}``
    in drawing order (``index``/``noise_floor``: per-layer lists for normalized rows, else None).
    """
    stores = list(stores)
    rows = _simulation_rows(stores, list(labels), normalized_row)
    n_cols = max(int(ds.sizes["layer"]) for ds in stores)
    with plt.rc_context(GRID_STYLE):
        fig, axes = plt.subplots(
            len(rows),
            n_cols,
            figsize=(2.7 * n_cols + 1.6, 2.7 * len(rows) + 1.2),
            squeeze=False,
            layout="constrained",
        )
        out = [_simulation_row(fig, axes, r, row, n_cols) for r, row in enumerate(rows)]
        first = stores[0].attrs
        diag = sorted({raw_limits(ds.attrs)[1] for ds in stores})
        details = (
            f"batch-mean pre-softmax logits over {first.get('n_samples')} sequences of random "
            f"inputs, d = {first.get('dim')}; raw rows: the diagonal (logit "
            f"{', '.join(f'{d:g}' for d in diag)}) blank, colour from the other cells; "
            + INDEXING
            + (f"; {INDEX_NOTE}, noise: its Monte-Carlo floor" if normalized_row else "")
        )
        suptitle(fig, title, "parameter-free decoder (no learned weights)", details)
        save(fig, out_paths)
    return {"rows": out}


def _simulation_row(fig, axes, r: int, row: tuple, n_cols: int) -> dict:
    """Row ``r`` of :func:`draw_simulation`; returns what it drew."""
    ds, label, kind, maps = row
    index = floor = None
    if kind == "raw":
        off = np.where(np.eye(maps.shape[-1], dtype=bool)[None], np.nan, maps)
        vmin, vmax = quantile_limits(list(off), 0.0, 1.0)
        maps, cmap, cbar = off, "viridis", "mean logit"
    else:
        lo, hi = quantile_limits(list(maps))
        vmax = max(abs(lo), abs(hi))
        vmin, cmap, cbar = -vmax, DIVERGING, "diagonal-normalized logit"
        index = non_relativeness_index(maps, normalized=True)
        if "score_group" in ds and ds.sizes.get("group", 0) >= 2:
            groups = ds["score_group"].transpose("group", "layer", "query", "key").values
            floor = index_ci(groups, n_boot=10, seed=0).noise_floor
    im = None
    last = r == axes.shape[0] - 1
    for c in range(n_cols):
        ax = axes[r, c]
        if c >= maps.shape[0]:
            ax.axis("off")
            continue
        panel = f"layer {c}"
        if index is not None:
            panel += f"   I = {index[c]:.2g}" + (
                f" (noise {floor[c]:.1g})" if floor is not None else ""
            )
        im = heatmap(ax, maps[c], vmin=vmin, vmax=vmax, cmap=cmap, title=panel)
        if c > 0:
            ax.set_ylabel("")
        if not last:  # "key position" once, under the last row: above, it meets a title
            ax.set_xlabel("")
    words = "raw logits" if kind == "raw" else "diagonal-normalized"
    setting = "\n".join(textwrap.wrap(setting_name(ds.attrs), 26))  # no longer than the panel
    axes[r, 0].set_ylabel(f"{setting}\n{words}\nquery position")
    fig.colorbar(im, ax=axes[r, :].tolist(), shrink=0.85, pad=0.01, label=cbar)
    return {
        "label": label,
        "kind": kind,
        "vmin": float(vmin),
        "vmax": float(vmax),
        "layers": int(maps.shape[0]),
        "index": None if index is None else [float(v) for v in index],
        "noise_floor": None if floor is None else [float(v) for v in floor],
    }
