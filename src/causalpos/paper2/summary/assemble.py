"""Paper 2's per-(model, dataset) summary: one :class:`~causalpos.paper2.prompts.PromptSet`, every
output block of both readings merged into one dataset (:func:`leakage_summary`). A new block is
one more function of a prompt set and one more entry in its list.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos.catalogue_stores import SUMMARY_FORMAT, SUMMARY_FORMAT_ATTR
from causalpos.paper2.labels import DEFAULT_CONDITIONS
from causalpos.paper2.prompts import PromptSet
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary.bos import bos_effects, wanted_bos
from causalpos.paper2.summary.headline import headline_blocks
from causalpos.paper2.summary.per_prompt import (
    baseline_comparison,
    causal_run_split,
    depth_trend,
    head_tests,
    per_prompt_decomposition,
    per_prompt_leakage,
    sink_head_counts,
    wanted_conditions,
)


def leakage_summary(
    stores: Mapping[str, xr.Dataset],
    settings: LeakageSettings | None = None,
    *,
    conditions: Mapping[str, tuple[str, str]] | None = None,
    bos: Mapping[str, tuple[str, str, str]] | None = None,
    strata: np.ndarray | None = None,
    position_free_runs: Sequence[str] = (),
) -> xr.Dataset:
    """Paper-2 leakage stage for one (model, dataset): the output blocks of one :class:`PromptSet`.

    Output variables (``stat`` = estimate, lo, hi), by block: the headline reading
    (:func:`~causalpos.paper2.summary.headline.headline_blocks`, the plain names), where the stores
    hold its statistics; the per-prompt reading (:mod:`causalpos.paper2.summary.per_prompt`, the
    ``per_prompt_*`` names, and the sink heads, ``sink_*``); BOS replacement
    (:func:`~causalpos.paper2.summary.bos.bos_effects`). Every variable's dims, reading and units:
    :mod:`causalpos.catalogue_stores`.

    Args:
        stores: variant name -> merged score store holding
            :class:`~causalpos.paper2.extraction.reducers.LeakageReducer` outputs (``leak_*``) and
            optionally ``sink_attention`` (sequence, layer, head). All stores must cover the same
            sequence ids (prompts are resampled jointly across variants).
        settings: the fits, resampling, tests and controls (:class:`LeakageSettings`; default
            its defaults).
        conditions: condition -> (causal variant, bidirectional variant); default
            :data:`~causalpos.paper2.labels.DEFAULT_CONDITIONS` that have at least one run in
            ``stores``. A condition whose runs are not all in ``stores`` is not decomposed and is
            listed, with its missing runs, in the ``conditions_not_run`` attribute (never
            silently dropped).
        bos: intervention -> (variant, baseline variant, target); default every run with a
            position-0 replacement against the same run without it
            (:func:`~causalpos.paper2.summary.bos.wanted_bos`). Interventions with a missing run go
            to the ``bos_not_run`` attribute.
        strata: optional per-sequence source labels (stratified bootstrap), aligned with the
            stores' sorted sequence ids.
        position_free_runs: the runs with no positional input (negative controls,
            :func:`causalpos.paper2.summary.headline.position_free`).

    Returns:
        xr.Dataset; ``stat`` = (estimate, lo, hi); flat views:
        :func:`causalpos.paper2.tables.assemble.paper2_tables`.
    """
    s = settings or LeakageSettings()
    ps = PromptSet.from_stores(stores, s, strata=strata)
    conds, conds_not_run = wanted_conditions(ps, conditions)
    bos_wanted, bos_pairs, bos_not_run = wanted_bos(ps, bos)
    blocks = [
        per_prompt_leakage(ps),
        head_tests(ps, s),
        baseline_comparison(ps),
        depth_trend(ps),
        per_prompt_decomposition(ps, conds),
        causal_run_split(ps),
        bos_effects(ps, bos_pairs, s.bos_windows),
        sink_head_counts(ps, s.taus),
        headline_blocks(
            ps,
            s,
            conditions=DEFAULT_CONDITIONS if conditions is None else conditions,
            position_free_runs=position_free_runs,
            bos_pairs=bos_pairs,
        ),
    ]
    out = xr.merge(blocks, join="exact", combine_attrs="drop")
    out.attrs.update({k: v for b in blocks for k, v in b.attrs.items()})
    out.attrs.update(
        {
            "fit": s.fit,
            "window": s.window,
            "floor_correct": int(s.floor_correct),
            "n_boot": s.n_boot,
            "n_perm": s.n_perm,
            "level": s.level,
            "alpha": s.alpha,
            "seed": s.seed,
            "n_sequences": int(ps.sequences.size),
            "perm_variants": [
                v for v in ps.variants if s.perm_variants is None or v in s.perm_variants
            ],
            "stratified_bootstrap": int(ps.stratified),
            "conditions": json.dumps(conds),
            "conditions_not_run": json.dumps(conds_not_run),
            "bos": json.dumps(bos_pairs),
            "bos_not_run": json.dumps(
                {k: {"runs": list(bos_wanted[k]), "missing": m} for k, m in bos_not_run.items()}
            ),
            "position_free_runs": [v for v in ps.variants if v in position_free_runs],
            "note": NOTE,
            SUMMARY_FORMAT_ATTR: SUMMARY_FORMAT,
        }
    )
    return out


#: What the summary's variables are, in its attrs.
NOTE = (
    "plain names (headline): dR2 of the expected map, U-statistics over prompt pairs, "
    "key-0 column modelled, pooled sum/sum; per_prompt_* (per-prompt reading): "
    "leakage = mean over prompts of per-prompt dR2 (minus exact within-offset "
    "permutation-null mean when floor_correct); shares = ratios of prompt means; p/q: "
    "within-offset permutation test on prompt-mean maps, BH over (layer, head) per "
    "variant and target"
)
