"""Figure rules of paper 1: stores in, figure files out. The store reader (xarray) is imported
by the rules that read one: ``plot_fig1`` draws closed forms and starts without it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from causalpos.figures import paper1, paper1_llm


def plot_fig1(outputs: Sequence[str]) -> None:
    """Rule ``plot_fig1``: the closed-form layer-2 scores (paper 1 Fig. 1)."""
    paper1.draw_fig1(list(outputs))


def plot_simulation(figures: Mapping[str, Mapping]) -> None:
    """Rule ``plot_simulation``: every figure of simulation settings (raw and normalized rows);
    ``figures``: name -> ``{stores, outputs, spec}`` (:mod:`causalpos.config.families`)."""
    from causalpos.io.store import open_dataset

    opened: dict = {}  # a setting shown by several figures is opened once
    for name, fig in figures.items():
        spec = fig["spec"]
        for p in fig["stores"]:
            if p not in opened:
                opened[p] = open_dataset(p)
        paper1.draw_simulation(
            [opened[p] for p in fig["stores"]],
            spec["settings"],
            list(fig["outputs"]),
            normalized_row=spec["normalized_row"],
            title=f"Paper 1 {name.replace('fig', 'Fig. ')}: mean pre-softmax logits by layer",
        )


def plot_llm_fig5(
    stores: Sequence[str],
    outputs: Sequence[str],
    *,
    labels: Sequence[str],
    n_layers: int,
    names: Mapping[str, str],
) -> None:
    """Rule ``plot_llm_fig5``: normalized head-averaged maps of every (model, dataset, variant);
    ``names``: the models' and datasets' display names."""
    from causalpos.io.store import open_dataset

    paper1_llm.draw_llm_fig5(
        [open_dataset(p) for p in stores],
        list(labels),
        list(outputs),
        n_layers=n_layers,
        names=names,
    )


def plot_llm_appendix(figures: Mapping[str, Mapping], names: Mapping[str, str]) -> None:
    """Rule ``plot_llm_appendix``: every layer of each normalized store (paper 1 App. E);
    ``figures``: ``model/dataset/variant`` -> ``{store, outputs}``; ``names``: the models' and
    datasets' display names."""
    from causalpos.io.store import open_dataset

    for label, fig in figures.items():
        paper1_llm.draw_llm_appendix(
            open_dataset(fig["store"]), label, list(fig["outputs"]), names=names
        )
