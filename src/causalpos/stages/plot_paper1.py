"""Figure rules of paper 1: stores in, figure files out."""

from __future__ import annotations

from collections.abc import Sequence

from causalpos.figures import paper1
from causalpos.io.store import open_dataset


def plot_fig1(outputs: Sequence[str]) -> None:
    """Rule ``plot_fig1``: the closed-form layer-2 scores (paper 1 Fig. 1)."""
    paper1.draw_fig1(list(outputs))


def plot_simulation(
    stores: Sequence[str], outputs: Sequence[str], *, spec: dict, figure: str
) -> None:
    """Rule ``plot_simulation``: one figure of simulation settings (raw and normalized rows)."""
    paper1.draw_simulation(
        [open_dataset(p) for p in stores],
        spec["settings"],
        list(outputs),
        normalized_row=spec["normalized_row"],
        title=f"Paper 1 {figure}: parameter-free decoder",
    )


def plot_llm_fig5(
    stores: Sequence[str], outputs: Sequence[str], *, labels: Sequence[str], n_layers: int
) -> None:
    """Rule ``plot_llm_fig5``: normalized head-averaged maps of every (model, dataset, variant)."""
    paper1.draw_llm_fig5(
        [open_dataset(p) for p in stores], list(labels), list(outputs), n_layers=n_layers
    )


def plot_llm_appendix(store: str, outputs: Sequence[str], *, label: str) -> None:
    """Rule ``plot_llm_appendix``: every layer of one normalized store (paper 1 App. E)."""
    paper1.draw_llm_appendix(open_dataset(store), label, list(outputs))
