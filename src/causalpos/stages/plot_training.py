"""Figure rules of the models trained here: training outputs in, figure files out. The store
reader (xarray) and pandas are imported by the rules that read a store or a table:
``plot_loss_curves`` reads the training logs and starts without them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from causalpos.figures import training
from causalpos.training.trainlog import read_loss_curve, read_training_summary


def plot_loss_curves(
    model_dirs: Sequence[str], outputs: Sequence[str], *, variants: Sequence[str]
) -> None:
    """Rule ``plot_loss_curves``: training and held-out loss of every variant."""
    pairs = list(zip(variants, model_dirs, strict=True))
    training.draw_loss_curves(
        {n: read_loss_curve(p) for n, p in pairs},
        list(outputs),
        unigram_entropy={n: read_training_summary(p)["unigram_entropy"] for n, p in pairs},
        title="One-factor variants trained here: next-token loss",
    )


def plot_gram_figures(figures: Mapping[str, Mapping]) -> None:
    """Rule ``plot_gram_figures``: paper 1 Figs. 3 and 8 of every model; ``figures``: model ->
    ``{store, fig3, fig8}`` (its Gram-panel store, the files of each figure)."""
    from causalpos.io.store import open_dataset

    for model, fig in figures.items():
        ds = open_dataset(fig["store"])
        n = ds.attrs["n_samples"]
        training.plot_gram_panels(
            ds,
            list(fig["fig3"]),
            title=f"Paper 1 Fig. 3 on {model}: Gram matrices through layer 1 (mean over {n} held-out sequences)",
        )
        training.plot_layer_scores(
            ds,
            list(fig["fig8"]),
            title=f"Paper 1 Fig. 8 on {model}: mean pre-softmax scores (over {n} held-out sequences and heads)",
        )


def plot_loss_by_position(store: str, outputs: Sequence[str], *, smooth: int) -> None:
    """Rule ``plot_loss_by_position``: per-position loss beyond the training context."""
    from causalpos.io.store import open_dataset

    training.draw_loss_by_position(open_dataset(store), list(outputs), smooth=smooth)


def plot_train_comparison(
    index_csv: str,
    comparison_csv: str,
    trained: Sequence[str],
    init: Sequence[str],
    outputs: dict,
    *,
    variants: Sequence[str],
    twins: Sequence[str],
    map_layer: int,
) -> None:
    """Rule ``plot_train_comparison``: index vs twin, the comparison table, normalized maps."""
    import pandas as pd

    from causalpos.io.provenance import check_table
    from causalpos.io.store import open_dataset

    check_table(index_csv, comparison_csv)  # made under this config's settings (io.provenance)
    training.plot_index_vs_init(pd.read_csv(index_csv), list(outputs["index"]))
    training.plot_comparison(pd.read_csv(comparison_csv), list(outputs["comparison"]))
    opened = {v: open_dataset(x) for v, x in zip(variants, trained, strict=True)}
    opened_init = {v: open_dataset(x) for v, x in zip(twins, init, strict=True)}
    training.plot_variant_maps(opened, opened_init, list(outputs["maps"]), layer=map_layer)
