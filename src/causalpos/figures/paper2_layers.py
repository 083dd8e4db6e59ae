"""Per-layer figures of paper 2: §3's components by layer (:func:`leakage_by_layer`), and the grid
of panels the per-layer figures share (claim 1's: :mod:`causalpos.figures.paper2_claim1`).

One block of panels per (model, dataset) and decomposed condition, each model on its own y scale
(a random twin's 0.8 does not flatten its trained model's 0.03). A reading that dwarfs the
decomposition's own curves gets a row on its own scale; one that repeats another (key 0 counted
reading as the headline) is said, not drawn. Where a model mixes layer kinds, its global layers
are shaded.
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
    kinds_text,
    save,
    shade_global_layers,
    subplot_grid,
    suptitle,
)
from causalpos.figures.labels import LAYER_AXIS, common_part, pair_name
from causalpos.models.layer_kinds import layer_kinds
from causalpos.paper2.labels import MEASURED, token0_status

if TYPE_CHECKING:  # annotations only: the stores come opened
    import xarray as xr

STAT3 = ["estimate", "lo", "hi"]
#: Curves of the headline's per-layer panels (one unit): component of ``components_layer``
#: -> (colour, line style, line width, CI band opacity (0: no band), label). Widths fall in
#: drawing order so that curves which coincide (a random-init model: total = causal mask =
#: normaliser) stay visible as nested lines. The controls are drawn where the summary has them.
CURVES = {
    "total": ("#222222", "-", 3.2, 0.18, "total (causal run, log-attention)"),
    "causal_mask": ("#d62728", "-", 2.2, 0.18, "causal mask (total − ring: direct + indirect)"),
    "normaliser": ("#9467bd", "-", 1.2, 0.18, "normaliser (causal run, −log Z)"),
    "residual_stream": ("#1f77b4", "-", 1.5, 0.18, "residual stream (ring logits: mask-free)"),
    "residual_stream_paper": (
        "#1f77b4",
        "--",
        1.5,
        0.08,
        "paper 2's residual stream (ablation, log-attention)",
    ),
    "artefact": ("#ff7f0e", ":", 1.8, 0.0, "softmax edge artefact (relative logits; no CI)"),
    "control_residual_stream": (
        "#2ca02c",
        "-.",
        1.5,
        0.12,
        "position-free control (identity RoPE on the ring, logits)",
    ),
    "window_edges": (
        "#8c564b",
        (0, (5, 1, 1, 1, 1, 1)),
        1.5,
        0.12,
        "window edges (identity RoPE on paper 2's ablation, logits)",
    ),
}
#: The decomposition's own curves: the scale a panel is drawn on.
CORE = ("total", "causal_mask", "residual_stream", "control_residual_stream", "window_edges")
#: A reading whose largest estimate is more than this many times the core curves' is drawn in
#: a row of its own (on one axis it would flatten them).
DWARFS = 3.0
#: The key-0 column counted is drawn only where a core curve differs from the headline's by more
#: than this fraction of the headline's largest estimate.
SAME = 0.05
#: Curves of the per-prompt reading (``per_prompt_decomposition_layer``, ``per_prompt_leakage_layer``).
PER_PROMPT_CURVES = {
    "total": ("#222222", "-", 1.5, 0.18, "per-prompt: total (causal, log-attn)"),
    "residual_stream": (
        "#1f77b4",
        "-",
        1.5,
        0.18,
        "per-prompt: residual (bidirectional, log-attn)",
    ),
    "causal_mask": ("#d62728", "-", 1.5, 0.18, "per-prompt: causal mask (total − residual)"),
    "logit": ("#2ca02c", "-", 1.5, 0.18, "per-prompt: logit (causal)"),
}
PER_PROMPT = "per-prompt reading (reads content as position)"
#: Rows of each block in :func:`leakage_by_layer`, top to bottom, and their y labels (the first
#: column's): a ``*_scale`` row holds its reading's curves that dwarf the rest.
ROW_LABELS = {
    "headline": "headline\n(key 0 modelled)",
    "headline_scale": "headline, own scale\n(key 0 modelled)",
    "counted": "key 0 counted\n(paper 2's fit)",
    "counted_scale": "key 0 counted,\nown scale",
    "per_prompt": "per-prompt reading\n(ΔR² − null)",
}
NO_HEADLINE = "no headline in this summary\n(leakage.reducer.expected_stats is empty)"
NOT_DRAWN = {
    "headline_scale": "every headline reading fits row 1's scale",
    "counted": "not decomposed on the counted key-0 column",
    "counted_scale": "every counted reading fits its row's scale",
    "per_prompt": "per-prompt reading: drawn where no headline is",
}
#: Panel size (inches) of the grid figures; a grid of one column is drawn wider.
PANEL = (3.0, 2.35)
WIDE_PANEL = 5.2


def rows_of(arr: xr.DataArray) -> np.ndarray:
    """``(..., 3)`` estimate, lo, hi of a variable with a ``stat`` dim (``(layer, 3)`` per layer)."""
    return arr.transpose(..., "stat").sel(stat=STAT3).values


def note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8, transform=ax.transAxes)


def _peak(curves: Mapping[str, np.ndarray]) -> float:
    vals = [np.abs(a[:, 0][np.isfinite(a[:, 0])]) for a in curves.values()]
    return float(max((v.max() for v in vals if v.size), default=0.0))


def split_scales(curves: Mapping[str, np.ndarray]) -> tuple[dict, dict]:
    """(curves drawn on the decomposition's scale, curves on a scale of their own): a curve
    outside :data:`CORE` whose largest estimate is more than :data:`DWARFS` times the core
    curves' goes to the second; curves without a finite estimate are left out."""
    finite = {k: a for k, a in curves.items() if np.isfinite(a[:, 0]).any()}
    core = _peak({k: a for k, a in finite.items() if k in CORE})
    near, far = {}, {}
    for k, a in finite.items():
        big = k not in CORE and core > 0 and _peak({k: a}) > DWARFS * core
        (far if big else near)[k] = a
    return near, far


def _same_reading(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float | None:
    """The largest difference of the core curves' estimates between two readings, where it is
    within :data:`SAME` of ``a``'s largest estimate (the readings repeat each other); else None."""
    scale = _peak({k: v for k, v in a.items() if k in CORE}) or 1.0
    diffs = [np.nanmax(np.abs(a[k][:, 0] - b[k][:, 0])) for k in CORE if k in a and k in b]
    worst = max((float(d) for d in diffs if np.isfinite(d)), default=0.0)
    return worst if worst <= SAME * scale else None


def _block_rows(s: xr.Dataset, c: str) -> tuple[dict, list[str]]:
    """Row -> (what, curves) of one condition's decomposition, and the notes of what repeats."""
    comp = s["components_layer"].sel(condition=c, window=s["window"].values[0])
    read = {
        lm: {k: rows_of(comp.sel(landmark=lm, component_full=k)) for k in CURVES}
        for lm in ("modelled", "counted")
    }
    panels, notes = {}, []
    if not np.isfinite(read["modelled"]["total"][:, 0]).any():
        return panels, notes
    if token0_status(s.attrs)[1] != MEASURED:  # the ring's logits read 0 by symmetry
        for curves in read.values():
            curves.pop("residual_stream")
        notes.append("residual stream (the mask-free route) not applicable: token 0 not fixed")
    same = _same_reading(read["modelled"], read["counted"])
    for row, lm in (("headline", "modelled"), ("counted", "counted")):
        if row == "counted" and same is not None:
            notes.append(f"key 0 counted (paper 2's fit) reads as the headline (within {same:.2g})")
            continue
        near, far = split_scales(read[lm])
        panels[row] = (f"condition {c}", near)
        if far:
            panels[f"{row}_scale"] = (f"condition {c}", far)
    return panels, notes


def _layer_blocks(
    s: xr.Dataset, condition: str | None, causal_variant: str, per_prompt: bool | None
) -> dict[str, tuple[dict, list[str]]]:
    """Block key (the condition, "" undecomposed) -> (row -> (what the panel shows, curves),
    notes) of one summary: per condition the headline's components (``components_layer``, first
    window); where nothing is decomposed the causal run's ``leakage_layer``; the per-prompt
    reading last, when asked (None: only where the summary has no headline)."""
    blocks: dict[str, tuple[dict, list[str]]] = {}
    if "components_layer" in s:
        conds = [str(c) for c in s["condition"].values]
        if condition is not None:
            conds = [condition] if condition in conds else conds[:1]
        for c in conds:
            panels, notes = _block_rows(s, c)
            if panels:
                blocks[c] = (panels, notes)
    elif "leakage_layer" in s and causal_variant in s["variant"].values:
        x = s["leakage_layer"].sel(
            variant=causal_variant, window=s["window"].values[0], target="logattn"
        )
        what = f"{causal_variant} run only (not decomposed)"
        blocks[""] = ({"headline": (what, {"total": rows_of(x)})}, [])
    if per_prompt or (per_prompt is None and not blocks):
        curves = {}
        cond = condition or "rope"
        if "per_prompt_decomposition_layer" in s and cond in s["per_prompt_condition"].values:
            dl = s["per_prompt_decomposition_layer"].sel(per_prompt_condition=cond)
            for k in ("total", "residual_stream", "causal_mask"):
                curves[k] = rows_of(dl.sel(component=k))
        if causal_variant in s["variant"].values and "per_prompt_leakage_layer" in s:
            curves["logit"] = rows_of(
                s["per_prompt_leakage_layer"].sel(variant=causal_variant, target="logit")
            )
        if curves:
            key = next(iter(blocks), "")
            panels, notes = blocks.get(key, ({}, []))
            panels["per_prompt"] = (PER_PROMPT, curves)
            blocks[key] = (panels, notes)
    return blocks


def draw_curves(ax, x, curves: Mapping[str, np.ndarray], styles: Mapping[str, tuple]) -> bool:
    """The curves with their bands; True where a band was drawn."""
    banded = False
    for k, arr in curves.items():
        color, ls, lw, alpha, label = styles[k]
        ax.plot(x, arr[:, 0], color=color, ls=ls, lw=lw, label=label)
        if alpha and np.isfinite(arr[:, 1:]).any():
            ax.fill_between(x, arr[:, 1], arr[:, 2], color=color, alpha=alpha, lw=0)
            banded = True
    return banded


def grid_blocks(n_models: int, rows_per_model: int):
    """A grid of blocks, one per model (``rows_per_model`` panels stacked), at most
    :data:`MAX_COLUMNS` blocks a row, wider panels where there is one column; unused cells
    removed. Returns (fig, model index -> its axes, top first)."""
    ncol = grid_columns(n_models)
    nblock = -(-n_models // ncol)
    nrows = nblock * rows_per_model
    width = WIDE_PANEL if ncol == 1 else PANEL[0]
    fig, axes = subplot_grid(nrows, ncol, (width * ncol + 0.9, PANEL[1] * nrows + 1.8))
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


def subject_of(labels: Sequence[str], names: Mapping[str, str] | None, experiment: str | None):
    """(what a figure's title names: the experiment, its models and datasets; the panel title's
    name of each ``model/dataset`` label: the model, and the dataset where they differ)."""
    pairs = [pair_name(lab, names) for lab in labels]
    models = list(dict.fromkeys(m for m, _ in pairs))
    datasets = list(dict.fromkeys(d for _, d in pairs))
    one = common_part(datasets) is not None
    panel = {lab: m if one or not d else f"{m} · {d}" for lab, (m, d) in zip(labels, pairs)}
    subject = (f"experiment {experiment}: " if experiment else "") + " · ".join(
        "; ".join(x for x in part if x) for part in (models, datasets) if any(part)
    )
    return subject, panel


def grid_legend(fig, axes, extra: Mapping, ncol: int = 2, first: Mapping | None = None) -> None:
    """One legend below the grid: ``first``, every labelled artist of ``axes`` once, then
    ``extra``; one column where the figure is narrow."""
    handles: dict = dict(first or {})
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    handles.update(extra)
    if fig.get_size_inches()[0] < 7.5:
        ncol = 1
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=ncol)


def leakage_by_layer(
    summaries: Mapping[str, xr.Dataset],
    paths: Sequence[str | os.PathLike],
    *,
    condition: str | None = None,
    causal_variant: str = "causal",
    per_prompt: bool | None = None,
    names: Mapping[str, str] | None = None,
    experiment: str | None = None,
) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Paper 2 §3 per layer on the headline, in one unit: a block of panels per (model,
    condition), each model on its own y scale (its decomposition's rows share it).

    Rows (:data:`ROW_LABELS`; the caption: workflow/report/paper2_layers.rst): the headline's
    components (``components_layer``), the same on key 0 counted unless it repeats the headline
    (:data:`SAME`), a row on its own scale for a reading that dwarfs the core curves
    (:func:`split_scales`); without an ablation run, the causal run's ``leakage_layer``; the
    per-prompt reading last (``per_prompt``; None: only without a headline). ``names``: display
    names of the ``model/dataset`` keys; ``experiment``: named in the title.

    Returns block (``"model/dataset"``, ``" · condition"`` where several are decomposed) -> row
    -> curve -> ``(layer, 3)`` (estimate, lo, hi) as plotted, rows top first.
    """
    if not summaries:
        raise ValueError("leakage_by_layer: no summaries to plot")
    subject, panel_name = subject_of(list(summaries), names, experiment)
    blocks = {}
    for m, s in summaries.items():
        got = _layer_blocks(s, condition, causal_variant, per_prompt)
        if not got:
            blocks[m] = (m, {}, [])
        for c, (panels, notes) in got.items():
            key = m if len(got) == 1 else f"{m} · {c}"
            blocks[key] = (m, panels, notes)
    rows = [r for r in ROW_LABELS if any(r in b[1] for b in blocks.values())] or ["headline"]
    level = float(next(iter(summaries.values())).attrs.get("level", 0.95))
    with plt.rc_context(GRID_STYLE):
        fig, cells = grid_blocks(len(blocks), len(rows))
        shaded, banded, all_kinds, shared = False, False, [], {}
        ncol = grid_columns(len(blocks))
        for j, (m, panels, _) in enumerate(blocks.values()):
            s = summaries[m]
            kinds = np.asarray(layer_kinds(s), dtype=object)
            all_kinds += list(kinds)
            for i, (ax, row) in enumerate(zip(cells[j], rows)):
                if row not in panels:
                    missing = NO_HEADLINE if row == "headline" else NOT_DRAWN[row]
                    note(ax, f"{panel_name[m]}\n{missing}")
                    ax.set_axis_off()
                    continue
                what, curves = panels[row]
                if row in ("headline", "counted"):  # a model's decomposition rows: one scale
                    if m in shared:
                        ax.sharey(shared[m])
                    else:
                        shared[m] = ax
                shaded |= shade_global_layers(ax, s["layer"].values, kinds)
                styles = PER_PROMPT_CURVES if row == "per_prompt" else CURVES
                banded |= draw_curves(ax, s["layer"].values, curves, styles)
                ax.axhline(0.0, color="0.6", lw=0.8)
                ax.set_title(
                    panel_title(
                        panel_name[m], "" if row == "per_prompt" else what, kinds_text(kinds)
                    )
                )
                integer_ticks(ax, 6, axis="x")
                if i == len(rows) - 1 or rows[i + 1] not in panels:
                    ax.set_xlabel(LAYER_AXIS)
                if j % ncol == 0:
                    ax.set_ylabel(ROW_LABELS[row])
        extra = kind_handles(all_kinds, shaded=shaded)
        if banded:
            extra[f"shaded band: its curve's {ci_text(level)}"] = Patch(
                facecolor="0.5", alpha=0.3, lw=0
            )
        grid_legend(fig, fig.axes, extra)
        notes = [f"{panel_name[m]}: {n}" for m, _, ns in blocks.values() for n in ns]
        suptitle(
            fig,
            "Paper 2 §3 by layer: the decomposition of the headline",
            subject,
            "y: ΔSS of each component's expected map over the causal run's expected "
            "log-attention variance in that layer; each model on its own y scale"
            + "".join(f"; {n}" for n in notes),
        )
        save(fig, paths)
    return {k: {r: curves for r, (_, curves) in b[1].items()} for k, b in blocks.items()}
