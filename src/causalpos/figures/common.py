"""Shared plotting helpers: one text style (:data:`GRID_STYLE`) and one title form
(:func:`suptitle`: what it shows, of which model and dataset) for every figure; heat maps of
(query, key) maps with masked cells blank; grids of panels legible at page width; each layer's
mask kind (coordinate ``layer_kind``) in per-layer figures. Layers and positions count from 0."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from causalpos.models.layer_kinds import GLOBAL, is_kind  # noqa: E402

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
    cmap="viridis",
    title: str | None = None,
    labels: tuple[str, str] = ("key position", "query position"),
    ticks: int = 4,
):
    """Draw a (query, key) map with NaN cells blank (white). Query on rows, key on columns, both
    0-indexed, filling the panel (figures size their panels near square); ``labels``: the (x, y)
    axis labels; ``ticks``: at most that many intervals between integer ticks per axis (more
    would run together on a small panel: "120150180")."""
    xlabel, ylabel = labels
    m = np.asarray(m, dtype=np.float64)
    cm = plt.get_cmap(cmap).with_extremes(bad="white")
    n_q, n_k = m.shape
    im = ax.imshow(
        np.ma.masked_invalid(m),
        vmin=vmin,
        vmax=vmax,
        cmap=cm,
        interpolation="nearest",
        extent=(-0.5, n_k - 0.5, n_q - 0.5, -0.5),
        aspect="auto",  # the panel's box: a fixed aspect lets the layout put texts on texts
    )
    integer_ticks(ax, ticks)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    return im


def subplot_grid(rows: int, cols: int, size: tuple[float, float], **kw):
    """``(fig, axes)``: a figure of ``size`` inches, constrained layout, ``axes`` always 2-D."""
    return plt.subplots(rows, cols, figsize=size, squeeze=False, layout="constrained", **kw)


def integer_ticks(ax, n: int = 4, *, axis: str = "both") -> None:
    """Integer ticks, at most ``n`` intervals on ``axis`` ("x", "y" or "both")."""
    from matplotlib.ticker import MaxNLocator

    for a in ("x", "y") if axis == "both" else (axis,):
        getattr(ax, f"{a}axis").set_major_locator(MaxNLocator(n, integer=True))


#: Resolution of every saved figure (PNG pixels per inch; PDF images are embedded at it).
DPI = 150


def ci_text(level: float) -> str:
    """An interval's level as every legend and label writes it: "95 % CI"."""
    return f"{100 * float(level):g} % CI"


def wrapped(text: str, width_in: float, fontsize: float = 10.0) -> str:
    """``text`` with each line wrapped to fit 90 % of ``width_in`` inches at ``fontsize`` points
    (a character taken as 0.6 em wide: a line wider than the figure would leave the layout no
    room for the panels' own texts)."""
    chars = max(20, int(0.9 * width_in * 72 / (0.6 * fontsize)))
    return "\n".join(
        "\n".join(textwrap.wrap(line, chars, break_on_hyphens=False)) or line
        for line in text.split("\n")
    )


def tick_words(name: str, width: int = 18) -> str:
    """A display name on a tick: each " · " part wrapped at ``width`` characters, one part a
    line (rotated labels would need boxes that overlap)."""
    return "\n".join(w for part in name.split(" · ") for w in textwrap.wrap(part, width))


def suptitle(fig, what: str, subject: str | None = None, details: str | None = None):
    """The figure's title: ``what`` it shows, ``subject`` (the model and dataset, or what the
    panels hold) after a dash, then ``details`` (units, intervals, conventions) in smaller text;
    each line wrapped to the figure's width."""
    width = fig.get_size_inches()[0]
    size = matplotlib.rcParams["figure.titlesize"]
    size = 10.0 if isinstance(size, str) else float(size)
    head = wrapped(what + (f" — {subject}" if subject else ""), width, size)
    text = head if not details else head + "\n" + wrapped(details, width, size - 1)
    return fig.suptitle(text, fontsize=size)


def save(fig, paths: Sequence[str | os.PathLike]) -> None:
    """Save ``fig`` to every path (format from the suffix), cropped to its tight bounding box
    (padded by ``savefig.pad_inches``), creating parents, then close it.

    The layout and the bounding box are computed once, with the Agg renderer at :data:`DPI`, then
    frozen: each file costs one draw, not a layout, a second draw and a bounding box per format.
    A PNG is the same file as ``savefig(png, dpi=DPI, bbox_inches="tight")``; a PDF places its
    artists where the PNG does."""
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


# ---------------------------------------------------------------------------------------------
# Per-layer figures: panel grids legible at page width, and each layer's mask kind.

#: Text sizes of the grid figures (points), so that a figure about 10 inches wide, shown at a
#: page width of about 1000 pixels, keeps its smallest text near 12 pixels.
GRID_STYLE = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8.5,
    "ytick.labelsize": 8.5,
    "legend.fontsize": 8.5,
    "figure.titlesize": 10,
}
#: Most panels in a row of a grid figure.
MAX_COLUMNS = 3


def grid_columns(n: int, max_columns: int = MAX_COLUMNS) -> int:
    """Columns of a grid of ``n`` panels: at most ``max_columns``, rows as full as the number of
    rows allows (5 panels: 3 + 2; 4: 2 + 2)."""
    if n < 1:
        raise ValueError(f"grid_columns: n = {n}; a grid needs at least one panel")
    rows = -(-n // max_columns)
    return -(-n // rows)


#: Background of the global layers where a model mixes kinds.
GLOBAL_SHADE = {"color": "0.88", "lw": 0, "zorder": 0}


def kind_marker(kind: str) -> str:
    """The marker of a layer kind in per-layer point plots: a global layer's, every window's."""
    return "o" if kind == GLOBAL else "^"


def kind_order(kinds) -> list[str]:
    """The distinct kinds, sliding windows by size first, "global" last."""
    uniq = {str(k) for k in kinds}
    sliding = sorted((k for k in uniq if k != GLOBAL), key=lambda k: int(k[len("sliding") :]))
    return sliding + ([GLOBAL] if GLOBAL in uniq else [])


def kinds_text(kinds) -> str:
    """What a set of layers holds: "30 layers, all global", "15 sliding512 + 3 global"."""
    kinds = list(kinds)
    counts = [(k, kinds.count(k)) for k in kind_order(kinds)]
    if len(counts) == 1:
        k, c = counts[0]
        return f"{c} layer{'s' if c != 1 else ''}, all {k}"
    return " + ".join(f"{c} {k}" for k, c in counts)


def shade_global_layers(ax, layers, kinds) -> bool:
    """Shade the background of the global layers (each layer ± 0.5) where ``kinds`` mixes kinds;
    True where it did. A model with one kind is left plain (its title says which)."""
    kinds = np.asarray(kinds, dtype=object)
    if len(set(kinds)) < 2:
        return False
    layers = np.asarray(layers)
    for x in layers[kinds == GLOBAL]:
        ax.axvspan(x - 0.5, x + 0.5, **GLOBAL_SHADE)
    return True


def kind_handles(kinds, *, shaded: bool, markers: bool = False) -> dict:
    """Legend label -> handle for the layer kinds of a figure: the shaded background of global
    layers (``shaded``) and, with ``markers``, each kind's marker."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = {}
    if shaded:
        handles["global layer (grey background)"] = Patch(
            facecolor=GLOBAL_SHADE["color"], edgecolor="0.6"
        )
    if markers:
        for k in kind_order(kinds):
            label = f"{k} layer" if k == GLOBAL else f"{k} layer (window {k[len('sliding') :]})"
            handles[label] = Line2D(
                [], [], ls="none", marker=kind_marker(k), color="0.3", mfc="white", ms=6
            )
    return handles


def kind_dim(arr) -> str | None:
    """The dim of a pooled variable that splits it by layer kind, where it has one: a dim other
    than ``layer`` whose coordinate values are all layer kinds ("global", "sliding<W>")."""
    for d in arr.dims:
        if d == "layer" or d not in arr.coords:
            continue
        vals = [str(v) for v in arr[d].values]
        if vals and all(is_kind(v) for v in vals):
            return d
    return None


def pooled_by_kind(arr, kinds) -> dict:
    """Label -> a pooled (over layers) variable, per layer kind where ``arr`` has a kind dim
    (:func:`kind_dim`; label "3 global layers"), else the one pooled reading, labelled with what
    it pools ("all layers: 15 sliding512 + 3 global")."""
    d = kind_dim(arr)
    kinds = list(kinds)
    if d is None:
        return {f"all layers: {kinds_text(kinds)}": arr}
    out = {}
    for k in kind_order(str(v) for v in arr[d].values):
        n = kinds.count(k)
        out[f"{n} {k} layer{'s' if n != 1 else ''}"] = arr.sel({d: k})
    return out
