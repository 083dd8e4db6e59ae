"""Every paper-2 table across (model, dataset) pairs (:func:`paper2_tables`; each table is
declared in :data:`causalpos.catalogue.PAPER2_TABLES`), each row tagged with its model and
dataset, from the frames of :mod:`.headline`, :mod:`.per_prompt`, :mod:`.position0` and their
neighbours; their Markdown digest: :mod:`causalpos.paper2.tables.markdown`."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.catalogue import PAPER2_TABLES
from causalpos.models.layer_kinds import GLOBAL, LAYER_KIND, block_kinds, kinds_by_layer
from causalpos.paper2.tables.doses import plant_doses_frame
from causalpos.paper2.tables.factors import factors_frame
from causalpos.paper2.tables.headline import (
    PER_PROMPT,
    bos_headline_frame,
    components_frames,
    controls_frame,
    decomposition_headline_frame,
    headline_frame,
    scale_contrast_frame,
    wide_stat,
)
from causalpos.paper2.tables.per_prompt import (
    bos_frame,
    decomposition_frame,
    per_layer_columns,
    per_prompt_tables,
    rope_controls_frame,
)
from causalpos.paper2.tables.position0 import position0_frames
from causalpos.paper2.tables.twins import twin_contrast_frame


def _position0_columns(summary: xr.Dataset) -> dict:
    """What position 0 of the prompts was (from the data store, via the summary's attrs), and how
    the prompts were drawn (``data_mode``: chunks at random offsets or document openings)."""
    fixed = summary.attrs.get("fixed_bos")
    return {
        "data_mode": str(summary.attrs.get("data_mode", "")),
        "fixed_bos": np.nan if fixed is None else int(fixed),
        "prefix_ids": json.dumps([int(x) for x in summary.attrs.get("prefix_ids", [])])
        if "prefix_ids" in summary.attrs
        else "",
        "prepend_bos": str(summary.attrs.get("prepend_bos", "")),
    }


def _block_kinds(p0: xr.Dataset, summary: xr.Dataset | None) -> list[str]:
    """The kind of each row of position 0's trajectory (embedding, then each block's attention):
    from the position-0 store where it records them, else from the pair's summary, else
    :data:`~causalpos.models.layer_kinds.GLOBAL` for every block."""
    if LAYER_KIND in p0.variables:
        return [str(k) for k in p0[LAYER_KIND].values]
    n_blocks = int(p0.sizes["layer"]) - 1
    if summary is not None and int(summary.sizes.get("layer", -1)) == n_blocks:
        return block_kinds(list(kinds_by_layer(summary).values()))
    return block_kinds([GLOBAL] * n_blocks)


def paper2_tables(
    summaries: Mapping[tuple[str, str], xr.Dataset],
    position0: Mapping[tuple[str, str], xr.Dataset] | None = None,
) -> dict[str, pd.DataFrame]:
    """Every paper-2 table over (model, dataset) pairs: the catalogue's names
    (:data:`~causalpos.catalogue.PAPER2_TABLES`, no other: :func:`check_declared`) -> DataFrame.
    Each frame starts with ``model`` and ``dataset`` columns; values are copied from the summaries
    (no recomputation), so a table cell equals the store's number."""
    parts: dict[str, list] = {name: [] for name in PAPER2_TABLES}
    probes = []

    def add(name, df, key, extra=None):
        df = df.assign(**(extra or {}))
        df.insert(0, "dataset", key[1])
        df.insert(0, "model", key[0])
        parts[name].append(df)

    def add_rows(name, df, key, extra=None):  # a table that has rows for this pair
        if not df.empty:
            add(name, df, key, extra)

    for key, s in summaries.items():
        flat, p0 = per_prompt_tables(s), _position0_columns(s)
        # what the model is: positional (rope, ntk, swa, nope for the models trained here; empty
        # otherwise), init_of (the model whose random-init twin this is; empty if trained)
        mc = {k: str(s.attrs.get(k, "")) for k in ("positional", "init_of")}
        both = {**mc, **p0}
        add("leakage_by_model", flat["leakage_by_model"], key, p0)
        add("leakage_by_layer", flat["leakage_by_layer"], key)
        add("heads", flat["heads"], key)
        add_rows("per_prompt_decomposition", decomposition_frame(s), key, {**p0, **mc})
        if "per_prompt_decomposition" in s:
            layer = s["per_prompt_decomposition_layer"].drop_vars(LAYER_KIND, errors="ignore")
            wide = wide_stat(layer, ["per_prompt_condition", "layer"], "component")
            wide = wide.rename(columns={"per_prompt_condition": "condition"})
            add(
                "per_prompt_decomposition_by_layer",
                per_layer_columns(wide, kinds_by_layer(s), PER_PROMPT),
                key,
            )
        if "per_prompt_observational_split" in s:
            split = wide_stat(s["per_prompt_observational_split"], ["causal_variant"], "obs_term")
            add("observational_split", split, key)
        add("rope_controls", rope_controls_frame(s), key, p0)
        add_rows("bos_effects", bos_frame(s), key, p0)
        for name, extra in (("sink_heads", mc), ("baseline_comparison", mc), ("depth_trend", both)):
            if name in flat:
                add(name, flat[name], key, extra)
        head = headline_frame(s)
        if not head.empty:
            add("headline", head, key, both)
            add_rows("controls", controls_frame(s), key, both)
            add_rows("plant_doses", plant_doses_frame(s), key, both)
        if "decomposition" in s:
            add("decomposition_headline", decomposition_headline_frame(s), key, both)
        for name, df in (components_frames(s) if "components" in s else {}).items():
            add(name, df, key, both)
        add_rows("claim3_factors", factors_frame(s), key, both)
        add_rows("bos_headline", bos_headline_frame(s), key, both)
    for key, store in (position0 or {}).items():
        df, probe = position0_frames(store, _block_kinds(store, summaries.get(key)))
        add("position0", df, key)
        probes.append({"model": key[0], "dataset": key[1], **probe})
    keys = ["model", "dataset"]  # the columns of a table without rows
    out = {
        name: pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame(columns=keys)
        for name, dfs in parts.items()
    }
    out["scale_contrast"] = scale_contrast_frame(summaries)
    out["twin_contrast"] = twin_contrast_frame(summaries)
    out["position0_probes"] = pd.DataFrame(probes) if probes else pd.DataFrame(columns=keys)
    check_declared(out)
    return out


def check_declared(tables: Mapping[str, pd.DataFrame]) -> None:
    """Refuse ``tables`` unless their names are exactly the catalogue's paper-2 tables, naming
    the names to declare (in :mod:`causalpos.catalogue`) or to build (here)."""
    built, declared = set(tables), set(PAPER2_TABLES)
    if built != declared:
        raise ValueError(
            "the paper-2 tables built are not the ones causalpos.catalogue declares: "
            f"built but not declared {sorted(built - declared)} (add a Table entry to "
            f"causalpos/catalogue.py), declared but not built {sorted(declared - built)} (build "
            "it in causalpos.paper2.tables.assemble.paper2_tables, or remove its entry)"
        )
