"""Paper 1's non-relativeness index of a model already in memory (``causalpos.paper1.index``): the
group maps rule ``extract_scores`` stores, read by the table builder of rule
``aggregate_llm_stats``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from causalpos.capture.settings import ExtractSettings
    from causalpos.paper1.settings import IndexSettings


def paper1_index(
    model,
    tokens,
    variants: str | Sequence[str] | Mapping[str, Mapping] = ("causal",),
    *,
    settings: IndexSettings | None = None,
    extract: ExtractSettings | None = None,
) -> pd.DataFrame:
    """Paper 1's non-relativeness index per layer of ``model``'s head-averaged maps on
    ``tokens`` (§5-6, Fig. 5): one row per (variant, layer), with intervals.

    Args:
        model, tokens, variants: as :func:`causalpos.api.scores.capture` (paper 1 reads the
            model as trained: ``causal``).
        settings: the intervals (:class:`~causalpos.paper1.settings.IndexSettings`: confidence,
            bootstrap replicates, seed, the first-keys band's keys).
        extract: the batch size and the groups of prompts the bootstrap resamples
            (``n_groups``, at most one a prompt;
            :class:`~causalpos.capture.settings.ExtractSettings`).

    Returns:
        The columns of ``results/stats/llm_index.csv``
        (:func:`causalpos.paper1.tables.llm_index_table`) but ``model`` and ``dataset``:
        ``variant``, ``layer`` (1 = first) and ``layer_kind``; ``index`` (logit units, key 0
        out) with ``ci_lo``, ``ci_hi``, ``se``, ``noise_floor``, ``index_over_floor``,
        ``index_debiased``; the key-0 column's size (``key0*``, ``key0_share*``) and the index
        with key 0 kept (``index_with_key0*``, ``noise_floor_with_key0``); the scale-free ``share`` (``share_lo``, ``share_hi``), its
        difference from layer 1 (``share_minus_l1*``) and pooled over layers
        (``share_pooled*``); the first-keys band (``band*``, ``band_with_sink*``,
        ``band_keys``); ``n_groups``, ``n_sequences``.
    """
    from dataclasses import asdict

    from causalpos.api.scores import run_variants, token_dataset, variant_specs
    from causalpos.paper1.settings import IndexSettings
    from causalpos.paper1.tables import llm_index_table

    data = token_dataset(tokens)
    runs = run_variants(model, data, variant_specs(variants, ["groups"]), extract)
    stores = {("model", "prompts", variant): ds for variant, ds in runs.items()}
    table = llm_index_table(stores, **asdict(settings or IndexSettings()))
    return table.drop(columns=["model", "dataset"])
