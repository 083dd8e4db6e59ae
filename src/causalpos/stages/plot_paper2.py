"""Figure rules of paper 2: summary and position-0 stores in, figure files out. One job per
family draws the figure of every experiment (or every (model, dataset)): ``figures`` maps each
to what it reads and writes (:mod:`causalpos.config.families`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from causalpos.catalogue_stores import open_summary
from causalpos.figures import paper2
from causalpos.figures.paper2_routes import routes_by_layer
from causalpos.io.store import open_dataset


def _opened(labels: Sequence[str], stores: Sequence[str], cache: dict, opener=open_dataset) -> dict:
    """Label -> the store opened by ``opener`` (``open_summary``: leakage summaries, refused where
    of an older format); ``cache`` (path -> dataset) keeps a store that several experiments show
    from being opened (and checked) again."""
    for p in stores:
        if p not in cache:
            cache[p] = opener(p)
    return {label: cache[p] for label, p in zip(labels, stores, strict=True)}


def plot_paper2_layers(figures: Mapping[str, Mapping]) -> None:
    """Rule ``plot_paper2_layers``: per experiment (``{stores, labels, names, outputs, claim1}``),
    §3's components by layer on the headline (``outputs``) and claim 1's headline by layer with
    its intervals (``claim1``), one panel per (model, dataset)."""
    cache: dict = {}
    for name, fig in figures.items():
        summaries = _opened(fig["labels"], fig["stores"], cache, open_summary)
        kw = {"names": fig["names"], "experiment": name}
        paper2.leakage_by_layer(summaries, list(fig["outputs"]), **kw)
        paper2.claim1_by_layer(summaries, list(fig["claim1"]), **kw)


def plot_paper2_shares(figures: Mapping[str, Mapping]) -> None:
    """Rule ``plot_paper2_shares``: per experiment (``{stores, labels, names, outputs,
    routes}``), the causal-mask share on four readings of the headline (``outputs``) and §3's
    three routes by layer with their pooled shares (``routes``)."""
    cache: dict = {}
    for name, fig in figures.items():
        summaries = _opened(fig["labels"], fig["stores"], cache, open_summary)
        kw = {"names": fig["names"], "experiment": name}
        paper2.component_shares(summaries, list(fig["outputs"]), **kw)
        routes_by_layer(summaries, list(fig["routes"]), **kw)


def plot_paper2_position0(figures: Mapping[str, Mapping]) -> None:
    """Rule ``plot_paper2_position0``: position-0 cross-prompt deviation per condition, one
    figure per experiment (``{stores, labels, names, outputs}``)."""
    cache: dict = {}
    for name, fig in figures.items():
        paper2.position0_conditions(
            _opened(fig["labels"], fig["stores"], cache),
            list(fig["outputs"]),
            names=fig["names"],
            experiment=name,
        )


def plot_paper2_heads(figures: Mapping[str, Mapping]) -> None:
    """Rule ``plot_paper2_heads``: the headline per head, BH q-values marked, one figure per
    summary store (``{store, outputs, names}`` per (model, dataset))."""
    for pair, fig in figures.items():
        paper2.head_maps(
            open_summary(fig["store"]), list(fig["outputs"]), pair=pair, names=fig["names"]
        )
