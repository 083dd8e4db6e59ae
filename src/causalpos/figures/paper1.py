"""Figures of paper 1 (Kim et al. 2025): the theory (Fig. 1) and the simulations (Figs. 2, 4, 6, 7, 9, 10).

Every function saves to every path in ``out_paths`` and returns the numbers it drew (colour limits,
annotated values), so tests can check a figure against its source. Layers are numbered as in the
paper (1 = first layer; the stores' ``layer`` coordinate is 0-indexed); the theory panels use the
paper's 1-indexed positions, the simulation panels the stores' 0-indexed positions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from causalpos.figures.common import DIVERGING, heatmap, quantile_limits, save
from causalpos.paper1 import theory as T
from causalpos.paper1.diagonal import index_ci, non_relativeness_index, normalize

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

__all__ = ["draw_fig1", "draw_simulation", "setting_description", "raw_limits"]


def _annotate(ax, m: np.ndarray, fmt: str = "{:.3f}", *, vmin: float, vmax: float) -> list[str]:
    """Write each finite value of a small 1-indexed map into its cell; returns the texts."""
    texts = []
    mid = (vmin + vmax) / 2
    for (i, j), v in np.ndenumerate(m):
        if np.isfinite(v):
            txt = fmt.format(v)
            ax.text(
                j + 1,
                i + 1,
                txt,
                ha="center",
                va="center",
                fontsize=8,
                color="black" if v > mid else "white",
            )
            texts.append(txt)
    return texts


def draw_fig1(
    out_paths: Sequence[str | os.PathLike],
    *,
    alphas: Sequence[float] = (0.0, 0.2, 0.6),
    n: int = 50,
) -> dict:
    """Paper 1 Fig. 1: the parameter-free layer at α = 0, n = 3, and the closed-form layer-2 maps.

    Top row (n = 3, α = 0, positions 1-indexed): layer-1 logits (cosines of the inputs), layer-1
    attention weights, layer-2 logits from the closed form g(i)/(h(i)h(j)) (annotated: the paper
    prints 0.154, 0.132, 0.150; the closed form gives 0.1535, 0.1321, 0.1508), and the norms
    h(i) = ‖x_i⁽¹⁾‖ whose decrease makes the layer-2 score increase toward the diagonal.
    Bottom row: the closed-form layer-2 map for each α in ``alphas`` at ``n`` positions (diagonal,
    identically 1, left blank so the off-diagonal structure gets the colour range), and the
    profiles S(i, j) over j for the last query.

    Returns ``{"layer2_n3": (3, 3) closed-form map, "annotations": [texts of the layer-2 panel],
    "clims": {panel title: (vmin, vmax)}}``.
    """
    alpha0 = 0.0
    x = T.equicorrelated_vectors(3, alpha0)
    cos = np.where(np.tril(np.ones((3, 3), bool)), x @ x.T, np.nan)
    w_diag, w_off = T.layer1_weights(np.arange(1, 4), alpha0)
    lower = np.tril(np.ones((3, 3), bool))
    attn = np.where(np.eye(3, dtype=bool), w_diag[:, None], np.where(lower, w_off[:, None], np.nan))
    s2 = T.layer2_matrix(3, alpha0)

    fig, axes = plt.subplots(2, 4, figsize=(15, 7.4), layout="constrained")
    clims: dict[str, tuple[float, float]] = {}
    top = [
        ("layer-1 logits  ⟨y_i, y_j⟩ (α = 0)", cos, "{:.0f}"),
        ("layer-1 attention weights", attn, "{:.3f}"),
        ("layer-2 logits, closed form (paper prints .154 .132 .150)", s2, "{:.3f}"),
    ]
    annotations: list[str] = []
    for ax, (title, m, fmt) in zip(axes[0], top):
        im = heatmap(ax, m, vmin=0.0, vmax=1.0, title=title, one_indexed=True)
        texts = _annotate(ax, m, fmt, vmin=0.0, vmax=1.0)
        if title.startswith("layer-2"):
            annotations = texts
        ax.set_xticks([1, 2, 3])
        ax.set_yticks([1, 2, 3])
        clims[title] = (0.0, 1.0)
    fig.colorbar(im, ax=axes[0, :3].tolist(), shrink=0.8, label="value")
    i3 = np.arange(1, 4)
    ax = axes[0, 3]
    hv = T.h(i3, alpha0)
    ax.bar(i3, hv, color="0.35")
    for i, v in zip(i3, hv):
        ax.text(i, v + 0.03, f"{v:.3f}", ha="center", fontsize=8)
    ax.set_xticks(i3)
    ax.set_xlabel("position i (1-indexed)")
    ax.set_ylabel(r"$h(i) = \|x_i^{(1)}\|$")
    ax.set_ylim(0, 2.3)
    ax.set_title("layer-1 output norms (decreasing)", fontsize=9)

    pos = np.arange(1, n + 1)
    for ax, alpha in zip(axes[1, :3], alphas):
        m = T.layer2_matrix(n, alpha)
        off = np.where(np.eye(n, dtype=bool), np.nan, m)
        lim = quantile_limits([off], 0.0, 1.0)
        title = f"layer 2, closed form, α = {alpha:g} (diagonal = 1 blank)"
        im = heatmap(ax, off, vmin=lim[0], vmax=lim[1], title=title, one_indexed=True)
        fig.colorbar(im, ax=ax, shrink=0.8)
        clims[title] = lim
    ax = axes[1, 3]
    for alpha in alphas:
        (line,) = ax.plot(
            pos[:-1], T.layer2_score(n, pos[:-1], alpha), label=f"α = {alpha:g}, i = {n}"
        )
        half = n // 2
        ax.plot(
            pos[: half - 1],
            T.layer2_score(half, pos[: half - 1], alpha),
            ls="--",
            color=line.get_color(),
            label=f"α = {alpha:g}, i = {half}",
        )
    ax.set_xlabel("key j < i (1-indexed)")
    ax.set_ylabel("layer-2 logit S(i, j)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.set_title("increasing in j: nearby keys score higher", fontsize=9)
    fig.suptitle(
        "Paper 1 Fig. 1 — parameter-free causal layer (Eq. 1): positional information from "
        "the causal mask alone (closed forms of §3)",
        fontsize=11,
    )
    save(fig, out_paths)
    return {"layer2_n3": s2, "annotations": annotations, "clims": clims}


def setting_description(attrs: dict) -> str:
    """One line naming α, norm, scaling, RoPE and mask of a simulation store's attrs."""
    parts = [f"α = {float(attrs.get('alpha', float('nan'))):g}"]
    norm = attrs.get("norm", "l2")
    scaling = attrs.get("scaling", "none")
    parts.append("L2" if norm == "l2" else "LayerNorm")
    parts.append({"none": "QKᵀ", "sqrt_d": "QKᵀ/√d", "d": "QKᵀ/d"}.get(scaling, str(scaling)))
    parts.append(
        f"RoPE θ={float(attrs.get('rope_theta', 10000.0)):g}" if attrs.get("rope") else "no PE"
    )
    parts.append("causal" if attrs.get("causal", True) else "bidirectional")
    if not attrs.get("residual", True):
        parts.append("no residual")
    return ", ".join(parts)


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
    10). Raw rows use :func:`raw_limits`; normalized rows symmetric limits at the larger magnitude
    of the 1% / 99% quantiles over the row's layers (one scale per row, so layers compare).
    Masked cells (above the diagonal when causal) are blank. Normalized panels are titled with the
    non-relativeness index I of the map and, when the store has ``score_group``, its Monte-Carlo
    noise floor f (:func:`causalpos.paper1.diagonal.index_ci`; I ≈ f means no detectable non-relative part).

    Returns ``{"rows": [{"label", "kind", "vmin", "vmax", "layers", "index", "noise_floor"}, ...]}``
    in drawing order (``index``/``noise_floor``: per-layer lists for normalized rows, else None).
    """
    stores = list(stores)
    rows = _simulation_rows(stores, list(labels), normalized_row)
    n_cols = max(int(ds.sizes["layer"]) for ds in stores)
    fig, axes = plt.subplots(
        len(rows),
        n_cols,
        figsize=(2.5 * n_cols + 1.2, 2.45 * len(rows) + 0.7),
        squeeze=False,
        layout="constrained",
    )
    out = []
    for r, (ds, label, kind, maps) in enumerate(rows):
        if kind == "raw":
            vmin, vmax = raw_limits(ds.attrs)
            cmap, cbar = "viridis", "mean logit"
        else:
            lo, hi = quantile_limits(list(maps))
            vmax = max(abs(lo), abs(hi))
            vmin, cmap, cbar = -vmax, DIVERGING, "diagonal-normalized logit"
        index = floor = None
        if kind == "normalized":
            index = non_relativeness_index(maps, normalized=True)
            if "score_group" in ds and ds.sizes.get("group", 0) >= 2:
                groups = ds["score_group"].transpose("group", "layer", "query", "key").values
                floor = index_ci(groups, n_boot=10, seed=0).noise_floor
        im = None
        for c in range(n_cols):
            ax = axes[r, c]
            if c >= maps.shape[0]:
                ax.axis("off")
                continue
            panel = f"layer {c + 1}"
            if index is not None:
                panel += f"   I = {index[c]:.2g}" + (
                    f" (noise {floor[c]:.1g})" if floor is not None else ""
                )
            im = heatmap(ax, maps[c], vmin=vmin, vmax=vmax, cmap=cmap, title=panel)
            if c > 0:
                ax.set_ylabel("")
            if r < len(rows) - 1:  # "key" once, under the last row: above, it meets a title
                ax.set_xlabel("")
        axes[r, 0].set_ylabel(
            f"{label} ({kind})\n{setting_description(ds.attrs)}\nquery", fontsize=8
        )
        fig.colorbar(im, ax=axes[r, :].tolist(), shrink=0.85, pad=0.01, label=cbar)
        out.append(
            {
                "label": label,
                "kind": kind,
                "vmin": float(vmin),
                "vmax": float(vmax),
                "layers": int(maps.shape[0]),
                "index": None if index is None else [float(v) for v in index],
                "noise_floor": None if floor is None else [float(v) for v in floor],
            }
        )
    first = stores[0].attrs
    fig.suptitle(
        f"{title}\nbatch-mean pre-softmax logits over {first.get('n_samples')} sequences, "
        f"d = {first.get('dim')}; layers numbered as in the paper, positions 0-indexed",
        fontsize=10,
    )
    save(fig, out_paths)
    return {"rows": out}


# --------------------------------------------------------------------------------------------
# Pretrained (or any extracted) models: Fig. 5 and App. E (paper 1 §6)
# --------------------------------------------------------------------------------------------


def draw_llm_fig5(
    stores: Sequence[xr.Dataset],
    labels: Sequence[str],
    out_paths: Sequence[str | os.PathLike],
    *,
    n_layers: int = 4,
    quantiles: tuple[float, float] = (0.01, 0.99),
) -> dict[str, list[float]]:
    """Fig. 5 layout: one row per model, its first ``n_layers`` layers, diagonal-normalized
    head-averaged maps (``score_normalized_mean``), colour limits at the 1 %/99 % quantiles of the
    finite values of each row (the attention sink would otherwise flatten the map).

    Returns per label the non-relativeness index of each drawn layer.
    """
    if not stores:
        raise ValueError("draw_llm_fig5: no stores")
    n_cols = min(n_layers, min(ds.sizes["layer"] for ds in stores))
    fig, axes = plt.subplots(
        len(stores),
        n_cols,
        figsize=(2.9 * n_cols + 1.0, 2.8 * len(stores) + 0.6),
        squeeze=False,
        layout="constrained",
    )
    drawn: dict[str, list[float]] = {}
    for r, (ds, label) in enumerate(zip(stores, labels)):
        maps = np.asarray(ds["score_normalized_mean"].values[:n_cols], dtype=np.float64)
        lo, hi = quantile_limits(list(maps), *quantiles)
        lim = max(abs(lo), abs(hi))
        idx = non_relativeness_index(maps, normalized=True)
        drawn[label] = [float(x) for x in idx]
        for c in range(n_cols):
            im = heatmap(
                axes[r, c],
                maps[c],
                vmin=-lim,
                vmax=lim,
                cmap=DIVERGING,
                title=f"layer {c + 1}   I = {idx[c]:.3g}",
            )
            if c == 0:
                axes[r, c].set_ylabel(f"{label}\nquery")
        fig.colorbar(im, ax=axes[r, :].tolist(), shrink=0.85, label="diagonal-normalized logit")
    n_seq = stores[0].attrs.get("n_sequences", "?")
    fig.suptitle(
        "Paper 1 Fig. 5: diagonal-normalized pre-softmax scores, mean over sequences and heads\n"
        f"({n_seq} sequences × {stores[0].sizes['query']} tokens; colour limits at the "
        f"{quantiles[0]:.0%}/{quantiles[1]:.0%} quantiles per row; float32 scores)",
        fontsize=10,
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
) -> None:
    """App. E: every layer of one model, raw head-averaged mean scores and diagonal-normalized ones
    (alternating rows: raw, normalized), quantile colour limits over all layers."""
    raw = np.asarray(normalized["score_mean_head_avg"].values, dtype=np.float64)
    nrm = np.asarray(normalized["score_normalized_mean"].values, dtype=np.float64)
    n_layers = raw.shape[0]
    n_cols = min(max_cols, n_layers)
    n_blocks = math.ceil(n_layers / n_cols)
    fig, axes = plt.subplots(
        2 * n_blocks,
        n_cols,
        figsize=(2.4 * n_cols + 1.0, 2.35 * 2 * n_blocks + 0.8),
        squeeze=False,
        layout="constrained",
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
        im_r = heatmap(ax_r, raw[layer], vmin=rlo, vmax=rhi, title=f"layer {layer + 1} raw")
        im_n = heatmap(
            ax_n,
            nrm[layer],
            vmin=-nlim,
            vmax=nlim,
            cmap=DIVERGING,
            title=f"layer {layer + 1} normalized",
        )
        for ax in (ax_r, ax_n):
            ax.set_xlabel("")
            ax.set_ylabel("")
            ax.xaxis.set_major_locator(MaxNLocator(4, integer=True))  # legible on small panels
    # The raw and normalized rows interleave, so their two colour bars take two sides (on one
    # side both would span the same height and be drawn over each other).
    fig.colorbar(im_r, ax=axes[0::2, :].ravel().tolist(), shrink=0.6, label="mean logit (raw rows)")
    fig.colorbar(
        im_n,
        ax=axes[1::2, :].ravel().tolist(),
        shrink=0.6,
        location="left",
        label="diagonal-normalized logit (normalized rows)",
    )
    fig.suptitle(
        f"Paper 1 App. E: {label}, all layers (query on rows, key on columns; "
        f"{normalized.attrs.get('n_sequences', '?')} sequences, mean over heads, float32)",
        fontsize=10,
    )
    save(fig, out_paths)
