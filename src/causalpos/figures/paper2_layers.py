"""Per-layer figures of paper 2: §3's components by layer (:func:`leakage_by_layer`), and the grid
of panels both per-layer figures use (claim 1's: :mod:`causalpos.figures.paper2_claim1`).

One panel per (model, dataset) of an experiment, each on its own y scale (a random twin's 0.8
does not flatten its trained model's 0.03), in a grid of at most
:data:`~causalpos.figures.common.MAX_COLUMNS` columns with :data:`~causalpos.figures.common.
GRID_STYLE`'s text sizes, one legend below the grid. Each layer's mask kind (the summary's
coordinate ``layer_kind``; absent: every layer global) is named in each panel's title and, where a
model mixes kinds, marked: its global layers on a grey background and, in the point plots, by
marker shape. Layers are 0-indexed, as in the stores.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from causalpos.figures.common import (
    GRID_STYLE,
    grid_columns,
    kind_handles,
    kinds_text,
    save,
    shade_global_layers,
)
from causalpos.models.layer_kinds import layer_kinds

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

__all__ = ["leakage_by_layer"]

STAT3 = ["estimate", "lo", "hi"]
#: Curves of the headline's per-layer panels (one unit): component of ``exp_components_layer``
#: -> (colour, line style, line width, CI band opacity (0: no band), label). Widths fall in
#: drawing order so that curves which coincide (a random-init model: total = causal mask =
#: normaliser) stay visible as nested lines.
CURVES = {
    "total": ("#222222", "-", 3.2, 0.18, "total (causal run, log-attention)"),
    "causal_mask": ("#d62728", "-", 2.2, 0.18, "causal mask (total − residual stream)"),
    "normaliser": ("#9467bd", "-", 1.2, 0.18, "normaliser (causal run, −log Z)"),
    "residual_stream": ("#1f77b4", "-", 1.5, 0.18, "residual stream (ablation, logits)"),
    "residual_stream_paper": (
        "#1f77b4",
        "--",
        1.5,
        0.08,
        "paper 2's residual stream (ablation, log-attention)",
    ),
    "artefact": ("#ff7f0e", ":", 1.8, 0.0, "softmax edge artefact (relative logits; no CI)"),
}
#: Curves of the per-prompt reading (``decomposition_layer``, ``leakage_layer``).
PER_PROMPT_CURVES = {
    "total": ("#222222", "-", 1.5, 0.18, "per-prompt: total (causal, log-attn)"),
    "residual": ("#1f77b4", "-", 1.5, 0.18, "per-prompt: residual (bidirectional, log-attn)"),
    "causal_mask": ("#d62728", "-", 1.5, 0.18, "per-prompt: causal mask (total − residual)"),
    "logit": ("#2ca02c", "-", 1.5, 0.18, "per-prompt: logit (causal)"),
}
PER_PROMPT = "per-prompt reading (reads content as position)"
#: Rows of each model's block in :func:`leakage_by_layer`, top to bottom: the headline first.
LAYER_ROWS = {
    "headline": "headline: key-0 column modelled",
    "counted": "key-0 column counted (paper 2's fit)",
    "per_prompt": PER_PROMPT,
}
#: y labels of those rows (the first column of each).
ROW_LABELS = {
    "headline": "headline\n(key 0 modelled)",
    "counted": "key 0 counted\n(paper 2's fit)",
    "per_prompt": "per-prompt reading\n(ΔR² − null)",
}
UNIT = "ΔSS / causal run's expected\nlog-attention variance (per layer)"
NO_HEADLINE = "no headline in this summary\n(leakage.reducer.expected_stats is empty)"
NOT_DRAWN = {
    "counted": "not decomposed (no ablation run of the condition)",
    "per_prompt": "per-prompt reading: drawn where no headline is",
}
#: Panel size (inches) of the grid figures.
PANEL = (3.0, 2.35)


def rows_of(arr: xr.DataArray) -> np.ndarray:
    """``(layer, 3)`` estimate, lo, hi of a per-layer variable."""
    return arr.transpose("layer", "stat").sel(stat=STAT3).values


def note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8, transform=ax.transAxes)


def _condition(s: xr.Dataset, condition: str) -> str:
    conds = [str(c) for c in s["exp_condition"].values]
    return condition if condition in conds else conds[0]


def _layer_panels(
    s: xr.Dataset, condition: str, causal_variant: str, per_prompt: bool | None
) -> dict[str, tuple[str, dict[str, np.ndarray]]]:
    """Row key -> (what the panel shows, curves) of one summary: the headline's components on
    both landmark readings (``exp_components_layer``, the summary's first window); the causal
    run's headline (``exp_layer``) where nothing is decomposed; the per-prompt reading last, when
    asked (None: only where the summary has no headline)."""
    panels: dict[str, tuple[str, dict[str, np.ndarray]]] = {}
    if "exp_components_layer" in s:
        c = _condition(s, condition)
        comp = s["exp_components_layer"].sel(exp_condition=c, exp_window=s["exp_window"].values[0])
        for row, lm in (("headline", "modelled"), ("counted", "counted")):
            x = comp.sel(exp_landmark=lm)
            curves = {k: rows_of(x.sel(component_full=k)) for k in CURVES}
            if np.isfinite(curves["total"][:, 0]).any():
                panels[row] = (f"condition {c}", curves)
    elif "exp_layer" in s and causal_variant in s["variant"].values:
        x = s["exp_layer"].sel(
            variant=causal_variant, exp_window=s["exp_window"].values[0], target="logattn"
        )
        panels["headline"] = (f"{causal_variant} run only (not decomposed)", {"total": rows_of(x)})
    if per_prompt or (per_prompt is None and not panels):
        curves = {}
        if "decomposition_layer" in s and condition in s["condition"].values:
            dl = s["decomposition_layer"].sel(condition=condition)
            for k in ("total", "residual", "causal_mask"):
                curves[k] = rows_of(dl.sel(component=k))
        if causal_variant in s["variant"].values and "leakage_layer" in s:
            curves["logit"] = rows_of(
                s["leakage_layer"].sel(variant=causal_variant, target="logit")
            )
        if curves:
            panels["per_prompt"] = (PER_PROMPT, curves)
    return panels


def _draw(ax, x, curves: Mapping[str, np.ndarray], styles: Mapping[str, tuple]) -> None:
    for k, arr in curves.items():
        color, ls, lw, alpha, label = styles[k]
        ax.plot(x, arr[:, 0], color=color, ls=ls, lw=lw, label=label)
        if alpha and np.isfinite(arr[:, 1:]).any():
            ax.fill_between(x, arr[:, 1], arr[:, 2], color=color, alpha=alpha, lw=0)


def grid_blocks(n_models: int, rows_per_model: int):
    """A grid of blocks, one per model (``rows_per_model`` panels stacked), at most
    :data:`MAX_COLUMNS` blocks a row; unused cells removed. Returns (fig, model index -> its
    axes, top first)."""
    ncol = grid_columns(n_models)
    nblock = -(-n_models // ncol)
    nrows = nblock * rows_per_model
    fig, axes = plt.subplots(
        nrows,
        ncol,
        figsize=(PANEL[0] * ncol + 0.9, PANEL[1] * nrows + 1.3),
        squeeze=False,
        layout="constrained",
    )
    cells = {}
    for j in range(nblock * ncol):
        b, c = divmod(j, ncol)
        block = [axes[b * rows_per_model + i][c] for i in range(rows_per_model)]
        if j < n_models:
            cells[j] = block
        else:
            for ax in block:
                ax.remove()
    return fig, cells


def panel_title(model: str, *parts: str) -> str:
    """A panel's title: the model, then ``parts`` on one line where it fits (else one a line)."""
    line = " · ".join(p for p in parts if p)
    return f"{model}\n" + (line if len(line) <= 40 else "\n".join(p for p in parts if p))


def grid_legend(fig, axes, extra: Mapping, ncol: int = 2, first: Mapping | None = None) -> None:
    """One legend below the grid: ``first``, every labelled artist of ``axes`` once, then
    ``extra``."""
    handles: dict = dict(first or {})
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    handles.update(extra)
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=ncol)


def leakage_by_layer(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    condition: str = "rope",
    causal_variant: str = "causal",
    per_prompt: bool | None = None,
) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Paper 2 §3 per layer on the headline, in one unit: one block of panels per model, each
    model on its own y scale (its headline rows share it).

    A block's rows (:data:`LAYER_ROWS`): the headline's components (``exp_components_layer``,
    key-0 column modelled, the summary's first window, condition ``condition`` or the summary's
    first) — total, residual stream (the ablation's logits), causal mask, normaliser with CI
    bands, and paper 2's residual-stream reading (the ablation's log-attention, dashed) beside
    the softmax edge artefact (dotted) that explains it; then the same on the key-0 column
    counted (paper 2's fit). A summary with no ablation run draws its causal run's headline
    (``exp_layer``, log-attention: the same unit as the total). The per-prompt reading, when
    drawn (``per_prompt``; None: only for a summary without a headline), is the last row, on
    its own scale. Layer kinds: named in the titles, global layers shaded where a model mixes
    kinds.

    Returns:
        model -> row -> curve -> ``(layer, 3)`` (estimate, lo, hi) as plotted, rows in drawing
        order (top first).
    """
    if not summaries:
        raise ValueError("leakage_by_layer: no summaries to plot")
    plotted = {
        m: _layer_panels(s, condition, causal_variant, per_prompt) for m, s in summaries.items()
    }
    rows = [r for r in LAYER_ROWS if any(r in p for p in plotted.values())] or ["headline"]
    if "headline" not in rows:
        rows.insert(0, "headline")
    with plt.rc_context(GRID_STYLE):
        fig, cells = grid_blocks(len(summaries), len(rows))
        shaded, all_kinds, ncol = False, [], grid_columns(len(summaries))
        for j, (model, s) in enumerate(summaries.items()):
            kinds = np.asarray(layer_kinds(s), dtype=object)
            all_kinds += list(kinds)
            shared = None
            for i, (ax, row) in enumerate(zip(cells[j], rows)):
                if row not in plotted[model]:
                    note(ax, f"{model}\n{NO_HEADLINE if row == 'headline' else NOT_DRAWN[row]}")
                    ax.set_axis_off()
                    continue
                what, curves = plotted[model][row]
                if row != "per_prompt":
                    if shared is None:
                        shared = ax
                    else:
                        ax.sharey(shared)
                shaded |= shade_global_layers(ax, s["layer"].values, kinds)
                _draw(
                    ax,
                    s["layer"].values,
                    curves,
                    PER_PROMPT_CURVES if row == "per_prompt" else CURVES,
                )
                ax.axhline(0.0, color="0.6", lw=0.8)
                ax.set_title(
                    panel_title(model, "" if row == "per_prompt" else what, kinds_text(kinds))
                )
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                if i == len(rows) - 1:
                    ax.set_xlabel("layer (0-indexed)")
                if j % ncol == 0:
                    ax.set_ylabel(ROW_LABELS[row])
        grid_legend(fig, fig.axes, kind_handles(all_kinds, shaded=shaded))
        fig.suptitle(
            "§3's components by layer on the headline. y: ΔSS of each component's expected map "
            "over the causal run's expected\nlog-attention variance in that layer; each model "
            "on its own y scale (its headline rows share it)"
        )
        save(fig, paths)
    return {m: {r: curves for r, (_, curves) in p.items()} for m, p in plotted.items()}
