"""Stage ``position0``: model + token store in, position-0 store out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import xarray as xr

from causalpos.paper2.position0 import (
    condition_states,
    position0_values,
    probe_by_layer,
    probe_cv,
    probe_labels,
    sink_heads,
    trajectory,
)


def position0(
    model_dir,
    data_store,
    out,
    *,
    conditions: Sequence[str] = ("causal", "bidirectional"),
    sink_store=None,
    label_var: str = "source",
    tau: float = 0.5,
    n_folds: int = 5,
    ridge: float = 1.0,
    n_perm: int = 200,
    seed: int = 0,
    batch_size: int | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    attrs: dict | None = None,
) -> xr.Dataset:
    """``position0`` rule: trajectory per condition, content probes on the causal states.

    Output dims ``(condition, layer)`` (layer 0 = embedding): ``std``, ``mean_norm``, ``ratio``,
    ``max_abs_dev`` per condition; ``probe_accuracy``, ``probe_chance``, ``probe_null_mean``,
    ``probe_p_value`` on the probe condition (``causal``; NaN elsewhere), labels = the data
    store's ``label_var`` per prompt (classes with < ``n_folds`` prompts dropped, see
    :func:`probe_labels`); attrs ``sink_probe_*`` from the value vectors at key 0 of the heads whose
    mean attention to key 0 in ``sink_store`` (the causal score store) is ≥ ``tau``.
    """
    from causalpos.io.store import open_dataset, write_dataset
    from causalpos.models.device import advise_on_oom, bytes_per_sequence, resolve_device
    from causalpos.models.load import load_model

    conditions = list(conditions)
    if not conditions:
        raise ValueError("position0: give at least one condition")
    data = open_dataset(data_store)
    seq_ids = np.asarray(data["sequence"].values)
    input_ids = torch.from_numpy(np.asarray(data["tokens"].values, dtype=np.int64))
    model, _tok = load_model(model_dir, device=resolve_device(device), dtype=dtype)
    input_ids = input_ids.to(next(model.parameters()).device)
    parts, probe_states = [], None
    probe_cond = "causal" if "causal" in conditions else None
    batch = int(batch_size or input_ids.shape[0])
    for cond in conditions:
        with advise_on_oom(
            what=f"position0: model {model_dir}, condition {cond}",
            batch_size=batch,
            per_sequence=bytes_per_sequence(
                model.config, int(input_ids.shape[1]), next(model.parameters()).element_size()
            ),
            key="leakage.position0.batch_size",
        ):
            states = condition_states(
                model, input_ids, cond, seq_ids=seq_ids, seed=seed, batch_size=batch_size
            )
        parts.append(trajectory(states))
        if cond == probe_cond:
            probe_states = states
    ds = xr.concat(
        parts,
        dim=xr.DataArray(conditions, dims="condition", name="condition"),
        combine_attrs="drop_conflicts",
    )
    token0_fixed = bool((input_ids[:, 0] == input_ids[0, 0]).all())
    ds.attrs.update(
        {
            "conditions": conditions,
            "token0_fixed": int(token0_fixed),
            "bos": int(bool(data.attrs.get("bos", False))),
            "n_prompts": int(input_ids.shape[0]),
            "tau": tau,
            "n_folds": n_folds,
            "ridge": ridge,
            "n_perm": n_perm,
            "seed": seed,
            "probe_labels": label_var,
            "probe_condition": probe_cond or "",
        }
    )
    nl = ds.sizes["layer"]
    probe = {
        k: np.full((len(conditions), nl), np.nan)
        for k in ("accuracy", "chance", "null_mean", "p_value")
    }
    note = "no probe: the causal condition is not configured"
    keep = np.zeros(seq_ids.size, dtype=bool)
    if probe_states is not None and label_var in data:
        # Stores give variable-width strings (numpy StringDType), which astype(str) refuses.
        labels = np.array([str(x) for x in np.asarray(data[label_var].values).ravel()])
        keep, note = probe_labels(labels, n_folds)
        if keep.any():
            pr = probe_by_layer(
                probe_states[keep],
                labels[keep],
                n_folds=n_folds,
                ridge=ridge,
                n_perm=n_perm,
                seed=seed,
            )
            ci = conditions.index(probe_cond)
            for k in probe:
                probe[k][ci] = pr[k].values
            ds.attrs["probe_n_classes"] = int(np.unique(labels[keep]).size)
            if sink_store is not None:
                sink = open_dataset(sink_store)["sink_attention"].sel(sequence=seq_ids[keep])
                heads = np.argwhere(sink_heads(sink, tau).values)
                ds.attrs["n_sink_heads"] = int(len(heads))
                if len(heads):
                    try:
                        vals = position0_values(model, probe_states[keep])
                    except ValueError as exc:
                        ds.attrs["sink_probe_note"] = str(exc)
                    else:
                        n_rep = model.config.num_attention_heads // vals.shape[2]
                        layer_ids = sink["layer"].values
                        feats = np.concatenate(
                            [vals[:, int(layer_ids[l]), h // n_rep] for l, h in heads], axis=1
                        )
                        res = probe_cv(
                            feats,
                            labels[keep],
                            n_folds=n_folds,
                            ridge=ridge,
                            n_perm=n_perm,
                            seed=seed,
                        )
                        for k, v in res.items():
                            ds.attrs[f"sink_probe_{k}"] = v
    elif probe_states is not None:
        note = f"no probe: the data store has no {label_var!r} labels"
    for k, arr in probe.items():
        ds[f"probe_{k}"] = (("condition", "layer"), arr)
    ds.attrs.update({"probe_note": note, "probe_n_prompts": int(keep.sum()), **dict(attrs or {})})
    ds.attrs.setdefault("probe_n_classes", 0)
    ds.attrs.setdefault("n_sink_heads", 0)
    write_dataset(ds, out)
    return ds
