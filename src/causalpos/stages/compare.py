"""Stage ``compare_trained``: the trained variants vs their untrained twins, side by side."""

from __future__ import annotations

from collections.abc import Mapping

from causalpos.training.compare import comparison_tables


def compare_trained(
    trained: Mapping[str, str],
    init: Mapping[str, str],
    out_index,
    out_comparison,
    *,
    leakage: Mapping[str, str] | None = None,
    leakage_init: Mapping[str, str] | None = None,
    lengthgen: str | None = None,
    stats: Mapping | None = None,
):
    """``compare_trained`` rule: paths in, the two CSV tables out (see
    :func:`causalpos.training.compare.comparison_tables`); ``stats``: its ``confidence``,
    ``n_boot`` and ``seed`` (the rule's ``stats`` param; default theirs)."""
    import pandas as pd

    from causalpos.catalogue_stores import open_summary
    from causalpos.io.provenance import check_table, stamp_table
    from causalpos.io.store import open_dataset

    stores = {
        v: (open_dataset(p), open_dataset(init[v]) if v in init else None)
        for v, p in trained.items()
    }
    summaries = {v: open_summary(p) for v, p in (leakage or {}).items()}
    twins = {v: open_summary(p) for v, p in (leakage_init or {}).items()}
    if lengthgen:
        check_table(lengthgen)  # made under this config's settings (io.provenance)
    lg = pd.read_csv(lengthgen) if lengthgen else None
    index, comparison = comparison_tables(
        stores,
        leakage=summaries,
        leakage_init=twins,
        lengthgen=lg,
        **dict(stats or {}),
    )
    index.to_csv(out_index, index=False)
    comparison.to_csv(out_comparison, index=False)
    stamp_table(out_index, out_comparison)
    return index, comparison
