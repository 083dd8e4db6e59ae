"""Shared plotting helpers: heat maps of (query, key) maps with masked cells blank."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

CMAP = "viridis"
DIVERGING = "RdBu_r"


def quantile_limits(
    arrays: Sequence[np.ndarray], lo: float = 0.01, hi: float = 0.99
) -> tuple[float, float]:
    """Colour limits at the ``lo``/``hi`` quantiles of the finite values of all ``arrays``."""
    vals = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return (0.0, 1.0)
    a, b = np.quantile(vals, [lo, hi])
    if a == b:
        a, b = a - 1e-12, b + 1e-12
    return float(a), float(b)


def heatmap(
    ax,
    m: np.ndarray,
    *,
    vmin=None,
    vmax=None,
    cmap=CMAP,
    title: str | None = None,
    one_indexed: bool = False,
    labels: tuple[str, str] = ("key", "query"),
):
    """Draw a (query, key) map with NaN cells blank (white). Query on rows, key on columns;
    ``labels``: the (x, y) axis labels."""
    xlabel, ylabel = labels
    m = np.asarray(m, dtype=np.float64)
    cm = plt.get_cmap(cmap).with_extremes(bad="white")
    n_q, n_k = m.shape
    off = 1 if one_indexed else 0
    im = ax.imshow(
        np.ma.masked_invalid(m),
        vmin=vmin,
        vmax=vmax,
        cmap=cm,
        interpolation="nearest",
        extent=(off - 0.5, n_k + off - 0.5, n_q + off - 0.5, off - 0.5),
        aspect="equal",
    )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel + (" (1-indexed)" if one_indexed else ""))
    ax.set_ylabel(ylabel + (" (1-indexed)" if one_indexed else ""))
    if title:
        ax.set_title(title, fontsize=9)
    return im


#: Resolution of every saved figure (PNG pixels per inch; PDF images are embedded at it).
DPI = 150


def save(fig, paths: Sequence[str | os.PathLike]) -> None:
    """Save ``fig`` to every path (format from the suffix), cropped to its tight bounding box
    (padded by ``savefig.pad_inches``), creating parents, then close it.

    The layout (a constrained layout, where the figure has one) and the bounding box are computed
    once, with the Agg renderer at :data:`DPI` (what ``savefig(png, bbox_inches="tight")`` does
    before drawing), then frozen: each file costs one draw, not a layout, a second draw and a
    bounding box per format. A PNG is the same file as ``savefig(png, dpi=DPI,
    bbox_inches="tight")``; a PDF places its artists where the PNG does."""
    fig.set_dpi(DPI)
    fig.draw_without_rendering()  # runs the layout engine, at the PNG's dpi and text metrics
    bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(
        matplotlib.rcParams["savefig.pad_inches"]
    )
    fig.set_layout_engine(None)  # the positions just computed hold for every file
    for p in paths:
        p = Path(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, dpi=DPI, bbox_inches=bbox)
    plt.close(fig)
