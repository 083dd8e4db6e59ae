"""Controlled comparisons of the models trained here (issue 4): trained vs initial weights, and the
one-factor variants (rope / nope / ntk / swa) side by side on the same prompts.

* :func:`prepare_init_twin` writes a trained model's *initial* weights as a model directory: the
  untrained twin has the same architecture, positional variant, tokenizer and the very weights
  training started from (``causalpos.train.build_model`` with the training seed), so the
  difference between the two is exactly what training learned.
* :func:`paired_index_bootstrap` compares two models' per-layer non-relativeness index on the same
  groups of sequences with a *paired* bootstrap (one set of group weights for both), so prompt
  content common to both cancels from the difference. Its per-model intervals are exactly those of
  :func:`causalpos.diagonal.index_ci` (same seed, same weights, same noise correction).
* :func:`comparison_tables` joins that index with paper 2's leakage decomposition of each variant
  and its length-generalization excess into one table: the downstream link both papers list as
  missing.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from causalpos.diagonal import bootstrap_weights, index_replicates, normalize

log = logging.getLogger(__name__)

__all__ = [
    "INIT_SUFFIX",
    "twin_name",
    "prepare_init_twin",
    "PairedIndex",
    "paired_index_bootstrap",
    "comparison_tables",
    "compare_stage",
    "mean_normalized_map",
]

#: ``trained-rope`` -> ``trained-rope-init``.
INIT_SUFFIX = "-init"


def twin_name(model: str) -> str:
    return f"{model}{INIT_SUFFIX}"


# --------------------------------------------------------------------------------------------
# The untrained twin
# --------------------------------------------------------------------------------------------


def prepare_init_twin(trained_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write the weights ``trained_dir`` was trained *from* as an HF-format model directory.

    Reads the trained model's ``config.json`` (its positional variant included) and the seed in its
    ``training.json``, rebuilds the initial model with :func:`causalpos.train.build_model` (every
    variant of one seed starts from bit-identical weights) and saves it with the trained model's
    tokenizer and a ``causalpos_source.json`` naming the trained model. Atomic: the directory
    appears complete or not at all.
    """
    from transformers import AutoConfig

    from causalpos.models import SOURCE_FILE, _atomic_dir, _weights_manifest
    from causalpos.train import TRAINING_JSON, _save_model_dir, build_model

    trained_dir, out_dir = Path(trained_dir), Path(out_dir)
    summary_path = trained_dir / TRAINING_JSON
    if not summary_path.is_file():
        raise FileNotFoundError(f"prepare_init_twin: {trained_dir} has no {TRAINING_JSON}; "
                                "expected a directory written by causalpos.train.train_model")
    summary = json.loads(summary_path.read_text())
    seed = int(summary["settings"]["seed"])
    config = AutoConfig.from_pretrained(trained_dir)
    model = build_model(config, seed=seed)
    with _atomic_dir(out_dir) as tmp:
        _save_model_dir(model, trained_dir, tmp)
        record = {"name": out_dir.name, "source": "init_twin", "of": trained_dir.name,
                  "path": str(trained_dir.resolve()), "seed": seed,
                  "variant": summary.get("variant"), "sha256": _weights_manifest(tmp)}
        (tmp / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    log.info("wrote the initial weights of %s (seed %d) to %s", trained_dir.name, seed, out_dir)
    return out_dir


# --------------------------------------------------------------------------------------------
# Paired bootstrap of the non-relativeness index
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedIndex:
    """Per-layer index of models ``a`` and ``b`` on the same groups, and their paired contrasts.

    ``estimate_*``: debiased index (√max(I² − f², 0), as ``IndexCI.debiased``); ``lo_*``/``hi_*``:
    noise-corrected percentile interval (identical to ``index_ci``'s); ``boot_*``: (n_boot, layer)
    noise-corrected replicates, drawn with one set of group weights for both models, from which the
    difference, the ratio and any mean over layers get their intervals.
    """

    estimate_a: np.ndarray
    estimate_b: np.ndarray
    lo_a: np.ndarray
    hi_a: np.ndarray
    lo_b: np.ndarray
    hi_b: np.ndarray
    floor_a: np.ndarray
    floor_b: np.ndarray
    boot_a: np.ndarray
    boot_b: np.ndarray
    level: float

    def _interval(self, reps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tail = (1.0 - self.level) / 2.0
        with np.errstate(invalid="ignore"):
            lo, hi = np.nanquantile(reps, [tail, 1.0 - tail], axis=0)
        return lo, hi

    def difference(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per layer: a − b, with its paired interval."""
        return (self.estimate_a - self.estimate_b, *self._interval(self.boot_a - self.boot_b))

    def ratio(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per layer: a / b (NaN where b's index is 0), with its paired interval."""
        with np.errstate(divide="ignore", invalid="ignore"):
            est = np.where(self.estimate_b > 0, self.estimate_a / self.estimate_b, np.nan)
            reps = np.where(self.boot_b > 0, self.boot_a / self.boot_b, np.nan)
        return (est, *self._interval(reps))

    def layer_mean(self) -> dict[str, tuple[float, float, float]]:
        """Mean over layers of a, b, a − b and a / b (ratio of means), each with its interval."""
        ma, mb = self.estimate_a.mean(), self.estimate_b.mean()
        ra, rb = self.boot_a.mean(axis=1), self.boot_b.mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = ma / mb if mb > 0 else math.nan
            r_reps = np.where(rb > 0, ra / rb, np.nan)
        out = {}
        for name, est, reps in (("a", ma, ra), ("b", mb, rb), ("difference", ma - mb, ra - rb),
                                ("ratio", ratio, r_reps)):
            lo, hi = self._interval(reps[:, None])
            out[name] = (float(est), float(lo[0]), float(hi[0]))
        return out


def paired_index_bootstrap(maps_a, maps_b, *, level: float = 0.95, n_boot: int = 2000, seed: int = 0) -> PairedIndex:
    """Per-layer index of two models' group maps with one bootstrap of the shared groups.

    Args:
        maps_a, maps_b: (group, layer, query, key) raw head-averaged mean maps of the *same* groups
            of sequences (e.g. ``score_group_mean`` of two models extracted on one dataset).
        level, n_boot, seed: as :func:`causalpos.diagonal.index_ci` (the same seed draws the same
            group weights, so each model's interval equals ``index_ci``'s).
    """
    a = np.asarray(maps_a, dtype=np.float64)
    b = np.asarray(maps_b, dtype=np.float64)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"maps must have shape (group, layer, n, n); got {a.shape}")
    if a.shape != b.shape:
        raise ValueError(f"paired maps must have one shape (same groups, layers, length); got {a.shape} and {b.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1); got {level}")
    n_groups, n_layers = a.shape[:2]
    if n_groups < 2:
        raise ValueError(f"a paired bootstrap needs at least 2 groups; got {n_groups}")
    weights = bootstrap_weights(n_groups, n_boot, seed)  # one draw for both models: paired
    tail = (1.0 - level) / 2.0
    out = {f"{k}_{m}": np.full(n_layers, np.nan) for k in ("estimate", "floor", "lo", "hi") for m in "ab"}
    boots = {m: np.full((n_boot, n_layers), np.nan) for m in "ab"}
    for name, maps in (("a", a), ("b", b)):
        for layer in range(n_layers):
            rep = index_replicates(maps[:, layer], weights)
            if rep is None:
                continue
            est2, floor2, raw = rep
            out[f"estimate_{name}"][layer] = math.sqrt(max(est2 - floor2, 0.0))
            out[f"floor_{name}"][layer] = math.sqrt(floor2)
            # index_ci maps each bootstrap quantile q to sqrt(max(q² − 2f², 0)): each model's own
            # interval, exactly. The map is monotone, so mapping every replicate gives the same
            # interval up to quantile interpolation and lets the contrasts share replicates.
            q = np.quantile(raw, [tail, 1.0 - tail])
            out[f"lo_{name}"][layer], out[f"hi_{name}"][layer] = np.sqrt(np.maximum(q**2 - 2.0 * floor2, 0.0))
            boots[name][:, layer] = np.sqrt(np.maximum(raw**2 - 2.0 * floor2, 0.0))
    return PairedIndex(**out, boot_a=boots["a"], boot_b=boots["b"], level=float(level))


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def _group_maps(ds: xr.Dataset, label: str) -> np.ndarray:
    if "score_group_mean" not in ds:
        raise KeyError(f"score store of {label} has no 'score_group_mean' (extract with the 'groups' reducer)")
    return np.asarray(ds["score_group_mean"].transpose("group", "layer", "query", "key").values, dtype=np.float64)


def _check_same_prompts(a: xr.Dataset, b: xr.Dataset, la: str, lb: str) -> None:
    for key in ("dataset_name", "n_sequences"):
        if key in a.attrs and key in b.attrs and a.attrs[key] != b.attrs[key]:
            raise ValueError(f"{la} and {lb} were not extracted on the same prompts ({key}: "
                             f"{a.attrs[key]!r} vs {b.attrs[key]!r}); a paired comparison needs the same groups")
    if "group" in a.coords and "group" in b.coords and not np.array_equal(a["group"].values, b["group"].values):
        raise ValueError(f"{la} and {lb} have different groups of sequences")


def _decomposition(summary: xr.Dataset) -> dict[str, float]:
    """Paper 2's total / residual / causal-mask leakage (with CIs) of the model's own positional
    encoding: the causal vs bidirectional pair, condition ``rope`` in the summary (Table 6 names
    the conditions by their rotation; a NoPE model's pair carries the same name)."""
    if "decomposition" not in summary:
        return {}
    conds = [str(c) for c in summary["condition"].values]
    cond = next((c for c in ("rope", "causal") if c in conds), None)
    if cond is None:
        return {}
    dec = summary["decomposition"].sel(condition=cond)
    out = {}
    for comp in ("total", "residual", "causal_mask", "share_causal_mask"):
        est, lo, hi = (float(dec.sel(component=comp, stat=s)) for s in ("estimate", "lo", "hi"))
        out[f"leak_{comp}"], out[f"leak_{comp}_lo"], out[f"leak_{comp}_hi"] = est, lo, hi
    return out


def comparison_tables(stores: Mapping[str, tuple[xr.Dataset, xr.Dataset | None]], *,
                      leakage: Mapping[str, xr.Dataset] | None = None,
                      leakage_init: Mapping[str, xr.Dataset] | None = None, lengthgen=None,
                      confidence: float = 0.95, n_boot: int = 2000, seed: int = 0):
    """The index table (per variant and layer) and the comparison table (per variant).

    Args:
        stores: variant -> (score store of the trained model, score store of its init twin or
            None), causal forward pass, one dataset for all.
        leakage: variant -> paper 2 leakage summary of the trained model on that dataset (optional).
        leakage_init: variant -> the same for its init twin (paper 2's random-init baseline).
        lengthgen: ``results/stats/train_lengthgen.csv`` as a DataFrame (optional).

    Returns ``(index, comparison)`` DataFrames. ``index``: one row per (variant, weights, layer)
    with ``weights`` ∈ {trained, init}, layer 1-indexed, the debiased index with CI and noise
    floor, and on trained rows the paired difference and ratio to the twin (the ratio only where the
    twin's interval excludes 0). ``comparison``: one row per variant: the layer-mean index
    (trained, init, difference, ratio) with CIs, paper 2's decomposition of the trained model
    (``leak_*``) and of its twin (``init_leak_*``, paper 2's random-init baseline), the held-out
    loss and the loss excess beyond the training length.
    """
    import pandas as pd

    idx_rows, cmp_rows = [], []
    lg = None
    if lengthgen is not None and len(lengthgen):
        lg = lengthgen.set_index("variant")
    for variant, (trained, init) in stores.items():
        g_t = _group_maps(trained, f"trained-{variant}")
        if init is not None:
            _check_same_prompts(trained, init, f"trained-{variant}", f"trained-{variant}{INIT_SUFFIX}")
            g_i = _group_maps(init, f"trained-{variant}{INIT_SUFFIX}")
        else:
            g_i = g_t  # no twin: the contrasts are dropped below
        p = paired_index_bootstrap(g_t, g_i, level=confidence, n_boot=n_boot, seed=seed)
        diff, ratio = p.difference(), p.ratio()
        for layer in range(g_t.shape[1]):
            base = {"variant": variant, "layer": layer + 1, "n_groups": g_t.shape[0],
                    "n_sequences": int(trained.attrs.get("n_sequences", -1))}
            row = {**base, "weights": "trained", "index": p.estimate_a[layer], "ci_lo": p.lo_a[layer],
                   "ci_hi": p.hi_a[layer], "noise_floor": p.floor_a[layer]}
            if init is not None:
                ok = p.lo_b[layer] > 0  # the twin's index is detected: the ratio is bounded
                row.update({"minus_init": diff[0][layer], "minus_init_lo": diff[1][layer],
                            "minus_init_hi": diff[2][layer],
                            "over_init": ratio[0][layer] if ok else math.nan,
                            "over_init_lo": ratio[1][layer] if ok else math.nan,
                            "over_init_hi": ratio[2][layer] if ok else math.nan})
                idx_rows.append(row)
                idx_rows.append({**base, "weights": "init", "index": p.estimate_b[layer], "ci_lo": p.lo_b[layer],
                                 "ci_hi": p.hi_b[layer], "noise_floor": p.floor_b[layer]})
            else:
                idx_rows.append(row)
        m = p.layer_mean()
        row = {"variant": variant, "positional": trained.attrs.get("positional", variant),
               "index_mean": m["a"][0], "index_mean_lo": m["a"][1], "index_mean_hi": m["a"][2]}
        if init is not None:
            # A ratio over an index indistinguishable from 0 is unbounded: reported only where the
            # twin's own interval excludes 0 (the difference is always reported).
            amp = m["ratio"] if m["b"][1] > 0 else (math.nan,) * 3
            row.update({"init_index_mean": m["b"][0], "init_index_mean_lo": m["b"][1],
                        "init_index_mean_hi": m["b"][2], "minus_init": m["difference"][0],
                        "minus_init_lo": m["difference"][1], "minus_init_hi": m["difference"][2],
                        "amplification": amp[0], "amplification_lo": amp[1], "amplification_hi": amp[2]})
        if leakage and variant in leakage:
            row.update(_decomposition(leakage[variant]))
        if leakage_init and variant in leakage_init:
            row.update({f"init_{k}": v for k, v in _decomposition(leakage_init[variant]).items()})
        if lg is not None and variant in lg.index:
            r = lg.loc[variant]
            row.update({"positional": r.get("positional", row["positional"]),
                        "heldout_loss": float(r["final_heldout_loss"]),
                        "excess_beyond_context": float(r["excess_mean"]),
                        "excess_beyond_context_lo": float(r["excess_lo"]),
                        "excess_beyond_context_hi": float(r["excess_hi"])})
        row.update({"confidence": confidence, "n_sequences": int(trained.attrs.get("n_sequences", -1))})
        cmp_rows.append(row)
    return pd.DataFrame(idx_rows), pd.DataFrame(cmp_rows)


def compare_stage(trained: Mapping[str, str], init: Mapping[str, str], out_index, out_comparison, *,
                  leakage: Mapping[str, str] | None = None, leakage_init: Mapping[str, str] | None = None,
                  lengthgen: str | None = None, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0):
    """``compare_trained`` rule: paths in, the two CSV tables out (see :func:`comparison_tables`)."""
    import pandas as pd

    from causalpos.store import open_dataset

    stores = {v: (open_dataset(p), open_dataset(init[v]) if v in init else None) for v, p in trained.items()}
    summaries = {v: open_dataset(p) for v, p in (leakage or {}).items()}
    twins = {v: open_dataset(p) for v, p in (leakage_init or {}).items()}
    lg = pd.read_csv(lengthgen) if lengthgen else None
    index, comparison = comparison_tables(stores, leakage=summaries, leakage_init=twins, lengthgen=lg,
                                          confidence=confidence, n_boot=n_boot, seed=seed)
    index.to_csv(out_index, index=False)
    comparison.to_csv(out_comparison, index=False)
    return index, comparison


def mean_normalized_map(ds: xr.Dataset, layer: int) -> np.ndarray:
    """Diagonal-normalized grand-mean map of one layer (0-indexed; -1 = last) of a score store."""
    g = _group_maps(ds, ds.attrs.get("model_name", "store"))
    return normalize(g[:, layer].mean(axis=0))


