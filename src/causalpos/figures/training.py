"""Figures of the models trained here: loss curves, paper 1 Figs. 3 and 8, loss by position
(the comparisons with the init twins: :mod:`causalpos.figures.training_compare`).

Each writes every path given. Positions and layers count from 0. Variants are named by their
positional type (:data:`causalpos.figures.labels.TRAINED`) unless ``names`` (``trained-<variant>``
-> display name) says otherwise.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from causalpos.figures.common import GRID_STYLE, ci_text, heatmap, quantile_limits, save, suptitle
from causalpos.figures.labels import INDEXING, TRAINED_PREFIX, model_name, named

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

_COLORS = {"rope": "C0", "nope": "C3", "ntk": "C2", "swa": "C1"}


def variant_color(name: str, i: int) -> str:
    return _COLORS.get(name, f"C{(i + 4) % 10}")


def variant_label(variant: str, names: Mapping[str, str] | None = None) -> str:
    """A variant trained here, as its panels and ticks name it: its display name (``names`` of
    ``trained-<variant>``, else the label table's) without "trained here: "."""
    slug = f"trained-{variant}"
    return (named(slug, names) if names and slug in names else model_name(slug)).removeprefix(
        TRAINED_PREFIX
    )


def draw_loss_curves(
    curves: Mapping[str, Mapping[str, np.ndarray]],
    paths: Sequence[str | os.PathLike],
    *,
    unigram_entropy: float | Mapping[str, float] | None = None,
    title: str | None = None,
    names: Mapping[str, str] | None = None,
    heldout: str | None = None,
) -> None:
    """Train and held-out loss against step, one panel per variant, a shared y axis.

    ``curves``: variant → columns of ``loss_curve.csv`` (``step``, ``train_loss``,
    ``heldout_loss``; NaN where not measured). ``unigram_entropy``: the held-out unigram-entropy
    baseline (one value, or one per variant), drawn as a dashed line. ``heldout``: what the
    held-out loss is measured on (named in the title).
    """
    if not curves:
        raise ValueError("draw_loss_curves needs at least one variant's curve")
    n = len(curves)
    with plt.rc_context(GRID_STYLE):
        fig, axes = plt.subplots(
            1, n, figsize=(3.2 * n + 0.6, 3.6), sharey=True, squeeze=False, layout="constrained"
        )
        for i, (ax, (name, c)) in enumerate(zip(axes[0], curves.items())):
            step, train, held = (
                np.asarray(c[k], dtype=float) for k in ("step", "train_loss", "heldout_loss")
            )
            ok = ~np.isnan(train)
            color = variant_color(name, i)
            ax.plot(step[ok], train[ok], color=color, alpha=0.45, lw=0.8, label="train (batch)")
            ok = ~np.isnan(held)
            ax.plot(step[ok], held[ok], color=color, marker="o", ms=3, lw=1.5, label="held-out")
            base = unigram_entropy
            base = base.get(name) if isinstance(base, Mapping) else base
            if base is not None:
                ax.axhline(base, color="0.3", ls="--", lw=1, label="unigram entropy (held-out)")
            ax.set_title(variant_label(name, names))
            ax.set_xlabel("update step")
            ax.grid(alpha=0.3)
        axes[0, 0].set_ylabel("next-token loss (nats)")
        axes[0, 0].legend(fontsize=7, loc="upper right")
        suptitle(
            fig,
            title or "Models trained here: next-token loss by update step",
            f"held-out loss on {heldout}" if heldout else None,
            "train: the batch's loss at each step; held-out: mean over the held-out windows "
            "(no interval)",
        )
        save(fig, paths)


def plot_gram_panels(
    ds: xr.Dataset,
    paths: Sequence[str | os.PathLike],
    *,
    title: str | None = None,
    model: str | None = None,
) -> None:
    """Paper 1 Fig. 3: the nine panels (a)–(i) in a 3×3 grid, each with its own colour scale.

    ``ds``: output of :func:`causalpos.paper1.gram.compute_gram_panels` (``gram (panel, query,
    key)``, ``title``). Colour limits per panel at the 1 % / 99 % quantiles of its finite values
    (the BOS sink column and the diagonal would otherwise flatten the rest). ``model``: its
    display name (the title's subject).
    """
    if ds.sizes.get("panel") != 9:
        raise ValueError(f"plot_gram_panels expects 9 panels (a..i), got {ds.sizes.get('panel')}")
    n, seq = ds.attrs.get("n_samples"), ds.sizes.get("query")
    with plt.rc_context(GRID_STYLE):
        fig, axes = plt.subplots(3, 3, figsize=(10.5, 10.4), layout="constrained")
        for ax, label in zip(axes.ravel(), ds["panel"].values):
            m = ds["gram"].sel(panel=label).values
            lo, hi = quantile_limits([m])
            panel = f"({label}) {ds['title'].sel(panel=label).item()}"
            im = heatmap(ax, m, vmin=lo, vmax=hi, title=panel)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
        suptitle(
            fig,
            title or "Paper 1 Fig. 3: Gram matrices through the first layer",
            f"{model} · {n} held-out sequences of {seq} tokens" if model else None,
            f"mean over the sequences; each panel on its own colour scale (1 %/99 % quantiles); "
            f"{INDEXING}",
        )
        save(fig, paths)


def plot_layer_scores(
    ds: xr.Dataset,
    paths: Sequence[str | os.PathLike],
    *,
    title: str | None = None,
    shared_limits: bool = False,
    model: str | None = None,
) -> None:
    """Paper 1 Fig. 8: raw mean pre-softmax scores (``score (layer, query, key)``) of every layer
    in a grid, each layer on its own colour limits (1 %/99 % quantiles) unless ``shared_limits``.
    ``model``: its display name."""
    s = ds["score"]
    n_layers = s.sizes["layer"]
    cols = min(6, n_layers)
    rows = math.ceil(n_layers / cols)
    limits = quantile_limits([s.values]) if shared_limits else None
    n = ds.attrs.get("n_samples")
    with plt.rc_context(GRID_STYLE):
        fig, axes = plt.subplots(
            rows,
            cols,
            figsize=(2.7 * cols + 0.4, 2.7 * rows + 1.2),
            squeeze=False,
            layout="constrained",
        )
        for i, ax in enumerate(axes.ravel()):
            if i >= n_layers:
                ax.axis("off")
                continue
            m = s.isel(layer=i).values
            lo, hi = limits or quantile_limits([m])
            im = heatmap(ax, m, vmin=lo, vmax=hi, title=f"layer {int(s['layer'][i])}", ticks=3)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
            if i % cols:
                ax.set_ylabel("")
            if i < (rows - 1) * cols:
                ax.set_xlabel("")
        suptitle(
            fig,
            title or "Paper 1 Fig. 8: mean pre-softmax scores QKᵀ/√d by layer",
            f"{model} · {n} held-out sequences of {s.sizes['query']} tokens" if model else None,
            "mean over the sequences and heads; "
            + ("one colour scale" if shared_limits else "each layer on its own colour scale")
            + f" (1 %/99 % quantiles); {INDEXING}",
        )
        save(fig, paths)


def _moving_average(x: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average whose window shrinks at the ends (no zero padding pulling them down)."""
    if width <= 1:
        return np.asarray(x, dtype=float)
    kernel = np.ones(width)
    return np.convolve(x, kernel, mode="same") / np.convolve(
        np.ones_like(x, dtype=float), kernel, mode="same"
    )


def draw_loss_by_position(
    ds: xr.Dataset,
    paths: Sequence[str | os.PathLike],
    *,
    title: str | None = None,
    smooth: int = 1,
    names: Mapping[str, str] | None = None,
) -> None:
    """Mean next-token NLL by position with its bootstrap CI, one line per variant.

    ``ds``: output of :func:`causalpos.training.lengthgen.measure_length_generalization`
    (``nll_mean``, ``nll_lo``, ``nll_hi`` over ``(variant, position)``, ``train_context
    (variant)``). A dotted line marks each training length; ``smooth`` > 1 averages the curves
    over that many consecutive positions (display only).
    """
    conf = ds.attrs.get("confidence", 0.95)
    pos = ds["position"].values
    with plt.rc_context(GRID_STYLE):
        fig, ax = plt.subplots(figsize=(8.0, 4.6), layout="constrained")
        for i, name in enumerate(ds["variant"].values):
            sub = ds.sel(variant=name)
            mean, lo, hi = (
                _moving_average(sub[k].values, smooth) for k in ("nll_mean", "nll_lo", "nll_hi")
            )
            label = variant_label(str(name), names)
            if "excess_mean" in sub:
                label += (
                    f"  (excess beyond: {float(sub['excess_mean']):+.3f} "
                    f"[{float(sub['excess_lo']):+.3f}, {float(sub['excess_hi']):+.3f}])"
                )
            ax.plot(pos, mean, color=variant_color(str(name), i), lw=1.2, label=label)
            ax.fill_between(pos, lo, hi, color=variant_color(str(name), i), alpha=0.2, lw=0)
        for ctx in sorted({int(c) for c in np.atleast_1d(ds["train_context"].values)}):
            ax.axvline(ctx - 0.5, color="0.2", ls=":", lw=1)
            ax.text(ctx, ax.get_ylim()[1], " training length", va="top", fontsize=8)
        ax.set_xlabel("position of the predicted token (0 = first token)")
        ax.set_ylabel("next-token NLL (nats)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=2, frameon=False)
        n = ds.attrs.get("n_sequences")
        suptitle(
            fig,
            title or "Models trained here: loss by position, within and beyond the training length",
            f"held-out chunks of {len(pos)} tokens" + (f", {n} of them" if n else ""),
            f"bands: bootstrap {ci_text(conf)} over sequences"
            + (f"; curves averaged over {smooth} positions" if smooth > 1 else "")
            + "; excess beyond: mean NLL at positions past the training length minus that over "
            "its second half (nats, with its interval)",
        )
        save(fig, paths)
