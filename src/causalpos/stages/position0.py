"""Stage ``position0``: the position-0 states extraction read, per condition, in; trajectories,
content probes and the sink probe out. Loads no model (and no torch)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import xarray as xr

from causalpos.models.variants import POSITION0_PROBE_CONDITION as PROBE_CONDITION
from causalpos.paper2.position0 import (
    probe_by_layer,
    probe_cv,
    probe_labels,
    sink_heads,
    trajectory,
)
from causalpos.paper2.settings import Position0Settings


def _states(store: str | os.PathLike, seq_ids: np.ndarray, condition: str) -> xr.Dataset:
    from causalpos.io.store import open_dataset

    ds = open_dataset(store)
    if "p0_state" not in ds:
        raise ValueError(
            f"position0: {store} (condition {condition!r}) holds no position-0 states "
            "(p0_state); it was extracted without the position0 reducer — rerun extract_scores "
            "for this model and dataset with the condition in leakage.position0.conditions"
        )
    missing = np.setdiff1d(seq_ids, ds["sequence"].values)
    if missing.size:
        raise ValueError(
            f"position0: {store} lacks {missing.size} of the data store's sequences "
            f"(first {missing[:5].tolist()}); were they extracted from another data store?"
        )
    return ds.sel(sequence=seq_ids)


def position0(
    pairs: Mapping[str, Mapping], settings: Mapping, *, code_fingerprint: str = ""
) -> None:
    """Rule ``position0``: :func:`position0_pair` of every (model, dataset) of paper 2, one
    after the other (a second or two each: one job for all of them).

    ``pairs``: label -> ``{model, dataset, conditions, stores, sink, data, output}``;
    ``settings``: the rule's ``settings`` param with the config's ``seed``."""
    s = Position0Settings.from_params(settings)
    for pair in pairs.values():
        position0_pair(
            dict(zip(pair["conditions"], pair["stores"], strict=True)),
            pair["data"],
            pair["output"],
            settings=s,
            sink_store=pair["sink"],
            attrs={
                "model": pair["model"],
                "dataset": pair["dataset"],
                "code_fingerprint": code_fingerprint,
            },
        )


def position0_pair(
    stores: Mapping[str, str | os.PathLike],
    data_store,
    out,
    *,
    settings: Position0Settings | None = None,
    sink_store=None,
    attrs: dict | None = None,
) -> xr.Dataset:
    """One (model, dataset) of rule ``position0``: trajectory per condition, content probes on
    the causal states.

    ``stores``: condition -> its merged score store, holding ``p0_state (sequence, p0_layer,
    hidden)`` (and, for ``causal``, ``p0_value``).

    Output dims ``(condition, layer)`` (layer 0 = embedding): ``std``, ``mean_norm``, ``ratio``,
    ``max_abs_dev``; ``probe_*`` on the probe condition (``causal``; NaN elsewhere), labels the
    data store's ``settings.label_var``; attrs ``sink_probe_*`` from the value vectors at key 0
    of the heads whose mean attention to key 0 in ``sink_store`` is ≥ ``tau``.
    """
    from causalpos.io.store import open_dataset, write_dataset

    s = settings or Position0Settings()
    conditions = list(stores)
    if not conditions:
        raise ValueError("position0: give at least one condition")
    data = open_dataset(data_store)
    seq_ids = np.asarray(data["sequence"].values)
    tokens0 = np.asarray(data["tokens"].isel(position=0).values)
    parts, probe = [], None
    probe_cond = PROBE_CONDITION if PROBE_CONDITION in conditions else None
    for cond in conditions:
        ds = _states(stores[cond], seq_ids, cond)
        states = np.asarray(ds["p0_state"].values, dtype=np.float64)  # float32 widened exactly
        parts.append(trajectory(states))
        if cond == probe_cond:
            probe = (ds, states)
    ds = xr.concat(
        parts,
        dim=xr.DataArray(conditions, dims="condition", name="condition"),
        combine_attrs="drop_conflicts",
    )
    ds.attrs.update(
        {
            "conditions": conditions,
            "token0_fixed": int((tokens0 == tokens0[0]).all()),
            "bos": int(bool(data.attrs.get("bos", False))),
            "n_prompts": int(seq_ids.size),
            "tau": s.tau,
            "n_folds": s.n_folds,
            "ridge": s.ridge,
            "n_perm": s.n_permutations,
            "seed": s.seed,
            "probe_labels": s.label_var,
            "probe_condition": probe_cond or "",
        }
    )
    ci = conditions.index(probe_cond) if probe_cond else None
    res, keep, note = _probes(ds, data, probe, ci, s, sink_store, seq_ids)
    for k, arr in res.items():
        ds[f"probe_{k}"] = (("condition", "layer"), arr)
    ds.attrs.update({"probe_note": note, "probe_n_prompts": int(keep.sum()), **dict(attrs or {})})
    ds.attrs.setdefault("probe_n_classes", 0)
    ds.attrs.setdefault("n_sink_heads", 0)
    write_dataset(ds, out)
    return ds


def _probes(ds, data, probe, ci, s: Position0Settings, sink_store, seq_ids):
    """(per-condition probe results, the prompts kept, the note) of :func:`position0_pair`: the
    content probe by layer on the probe condition's states (row ``ci``) and, where the sink
    store is given, the sink probe (into ``ds.attrs``)."""
    res = {
        k: np.full((ds.sizes["condition"], ds.sizes["layer"]), np.nan)
        for k in ("accuracy", "chance", "null_mean", "p_value")
    }
    note = "no probe: the causal condition is not configured"
    keep = np.zeros(seq_ids.size, dtype=bool)
    label_var = s.label_var
    probe_kw = dict(n_folds=s.n_folds, ridge=s.ridge, n_perm=s.n_permutations, seed=s.seed)
    if probe is not None and label_var in data:
        store, states = probe
        # Stores give variable-width strings (numpy StringDType), which astype(str) refuses.
        labels = np.array([str(x) for x in np.asarray(data[label_var].values).ravel()])
        keep, note = probe_labels(labels, s.n_folds)
        if keep.any():
            pr = probe_by_layer(states[keep], labels[keep], **probe_kw)
            for k in res:
                res[k][ci] = pr[k].values
            ds.attrs["probe_n_classes"] = int(np.unique(labels[keep]).size)
            if sink_store is not None:
                ds.attrs.update(
                    _sink_probe(
                        store, sink_store, seq_ids[keep], labels[keep], s.tau, keep, **probe_kw
                    )
                )
    elif probe is not None:
        note = f"no probe: the data store has no {label_var!r} labels"
    return res, keep, note


def _sink_probe(store, sink_store, seq_ids, labels, tau, keep, **probe_kw) -> dict:
    """``n_sink_heads`` and ``sink_probe_*``: the probe on the value vectors at key 0 of the
    heads whose mean attention to key 0 is ≥ ``tau`` (their key head's vectors, under GQA)."""
    from causalpos.io.store import open_dataset

    sink = open_dataset(sink_store)["sink_attention"].sel(sequence=seq_ids)
    heads = np.argwhere(sink_heads(sink, tau).values)
    out: dict = {"n_sink_heads": int(len(heads))}
    if not len(heads):
        return out
    if "p0_value" not in store:
        out["sink_probe_note"] = store["p0_state"].attrs.get(
            "values_note", "the causal store holds no value vectors at key 0 (p0_value)"
        )
        return out
    vals = np.asarray(store["p0_value"].values, dtype=np.float64)[keep]
    n_rep = int(store.attrs["n_heads"]) // vals.shape[2]
    layer_ids = sink["layer"].values
    feats = np.concatenate([vals[:, int(layer_ids[l]), h // n_rep] for l, h in heads], axis=1)
    out.update({f"sink_probe_{k}": v for k, v in probe_cv(feats, labels, **probe_kw).items()})
    return out
