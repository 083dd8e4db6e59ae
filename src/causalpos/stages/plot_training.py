"""Figure rules of the models trained here: training outputs in, figure files out. The store
reader (xarray) and pandas are imported by the rules that read a store or a table:
``plot_loss_curves`` reads the training logs and starts without them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from causalpos.figures import training, training_compare
from causalpos.figures.labels import named
from causalpos.training.trainlog import read_loss_curve, read_training_summary


def plot_loss_curves(
    model_dirs: Sequence[str],
    outputs: Sequence[str],
    *,
    variants: Sequence[str],
    names: Mapping[str, str],
    heldout: Sequence[str],
) -> None:
    """Rule ``plot_loss_curves``: training and held-out loss of every variant; ``names``: the
    trained models' display names; ``heldout``: the held-out books."""
    pairs = list(zip(variants, model_dirs, strict=True))
    training.draw_loss_curves(
        {n: read_loss_curve(p) for n, p in pairs},
        list(outputs),
        unigram_entropy={n: read_training_summary(p)["unigram_entropy"] for n, p in pairs},
        names=names,
        heldout="the held-out books (" + ", ".join(heldout) + ")",
    )


def plot_gram_figures(figures: Mapping[str, Mapping]) -> None:
    """Rule ``plot_gram_figures``: paper 1 Figs. 3 and 8 of every model; ``figures``: model ->
    ``{name, store, fig3, fig8}`` (its display name, its Gram-panel store, the files of each
    figure)."""
    from causalpos.io.store import open_dataset

    for fig in figures.values():
        ds = open_dataset(fig["store"])
        training.plot_gram_panels(ds, list(fig["fig3"]), model=fig["name"])
        training.plot_layer_scores(ds, list(fig["fig8"]), model=fig["name"])


def plot_loss_by_position(
    store: str, outputs: Sequence[str], *, smooth: int, names: Mapping[str, str]
) -> None:
    """Rule ``plot_loss_by_position``: per-position loss beyond the training context."""
    from causalpos.io.store import open_dataset

    training.draw_loss_by_position(open_dataset(store), list(outputs), smooth=smooth, names=names)


def plot_train_comparison(
    tables: Mapping[str, str],
    stores: Mapping[str, Sequence[str]],
    outputs: dict,
    *,
    variants: Sequence[str],
    twins: Sequence[str],
    map_layer: int,
    names: Mapping[str, str],
    dataset: str,
) -> None:
    """Rule ``plot_train_comparison``: index vs twin, the comparison table, normalized maps, on
    the prompts of ``dataset``; ``tables``: the ``index`` and ``comparison`` CSVs; ``stores``:
    the ``trained`` and ``init`` score stores; ``names``: the trained models' and the dataset's
    display names."""
    import pandas as pd

    from causalpos.io.provenance import check_table
    from causalpos.io.store import open_dataset

    # made under this config's settings (io.provenance)
    check_table(tables["index"], tables["comparison"])
    comparison = pd.read_csv(tables["comparison"])
    conf = float(comparison["confidence"].iloc[0]) if "confidence" in comparison else 0.95
    kw = {"subject": f"prompts: {named(dataset, names)}", "names": names}
    training_compare.plot_index_vs_init(
        pd.read_csv(tables["index"]), list(outputs["index"]), confidence=conf, **kw
    )
    training_compare.plot_comparison(comparison, list(outputs["comparison"]), **kw)
    opened = {v: open_dataset(x) for v, x in zip(variants, stores["trained"], strict=True)}
    opened_init = {v: open_dataset(x) for v, x in zip(twins, stores["init"], strict=True)}
    training_compare.plot_variant_maps(
        opened, opened_init, list(outputs["maps"]), layer=map_layer, **kw
    )
