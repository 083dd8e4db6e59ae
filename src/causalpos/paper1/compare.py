"""Paper 1 §3 on the models trained here: trained vs untrained twin, paired index bootstrap."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import xarray as xr

from causalpos.inference import bounds
from causalpos.paper1.diagonal import (
    bootstrap_weights,
    corrected_bounds,
    index_replicates,
    normalize,
)


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
        return bounds(reps, self.level, skip_nan=True)

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
        for name, est, reps in (
            ("a", ma, ra),
            ("b", mb, rb),
            ("difference", ma - mb, ra - rb),
            ("ratio", ratio, r_reps),
        ):
            lo, hi = self._interval(reps[:, None])
            out[name] = (float(est), float(lo[0]), float(hi[0]))
        return out


def paired_index_bootstrap(
    maps_a, maps_b, *, level: float = 0.95, n_boot: int = 2000, seed: int = 0, key0: bool = True
) -> PairedIndex:
    """Per-layer index of two models' group maps with one bootstrap of the shared groups.

    ``maps_a``, ``maps_b``: (group, layer, query, key) raw head-averaged mean maps of the *same*
    groups of sequences. ``level``, ``n_boot``, ``seed``, ``key0``: as ``index_ci`` (the same seed
    draws the same group weights, so each model's interval equals ``index_ci``'s).
    """
    a = np.asarray(maps_a, dtype=np.float64)
    b = np.asarray(maps_b, dtype=np.float64)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"maps must have shape (group, layer, n, n); got {a.shape}")
    if a.shape != b.shape:
        raise ValueError(
            f"paired maps must have one shape (same groups, layers, length); got {a.shape} and {b.shape}"
        )
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1); got {level}")
    n_groups, n_layers = a.shape[:2]
    if n_groups < 2:
        raise ValueError(f"a paired bootstrap needs at least 2 groups; got {n_groups}")
    weights = bootstrap_weights(n_groups, n_boot, seed)  # one draw for both models: paired
    out = {
        f"{k}_{m}": np.full(n_layers, np.nan)
        for k in ("estimate", "floor", "lo", "hi")
        for m in "ab"
    }
    boots = {m: np.full((n_boot, n_layers), np.nan) for m in "ab"}
    for name, maps in (("a", a), ("b", b)):
        for layer in range(n_layers):
            rep = index_replicates(maps[:, layer], weights, key0=key0)
            if rep is None:
                continue
            est2, floor2, raw = rep
            out[f"estimate_{name}"][layer] = math.sqrt(max(est2 - floor2, 0.0))
            out[f"floor_{name}"][layer] = math.sqrt(floor2)
            # each model's own interval, exactly index_ci's; the map q -> sqrt(max(q² − 2f², 0))
            # is monotone, so mapping every replicate gives the same interval up to quantile
            # interpolation and lets the contrasts share replicates
            lo_hi = corrected_bounds(raw, floor2, level)
            out[f"lo_{name}"][layer], out[f"hi_{name}"][layer] = lo_hi
            boots[name][:, layer] = np.sqrt(np.maximum(raw**2 - 2.0 * floor2, 0.0))
    return PairedIndex(**out, boot_a=boots["a"], boot_b=boots["b"], level=float(level))


def mean_normalized_map(ds: xr.Dataset, layer: int) -> np.ndarray:
    """Diagonal-normalized grand-mean map of one layer (0-indexed; -1 = last) of a score store."""
    g = group_maps(ds, ds.attrs.get("model_name", "store"))
    return normalize(g[:, layer].mean(axis=0))


def group_maps(ds: xr.Dataset, label: str) -> np.ndarray:
    if "score_group_mean" not in ds:
        raise KeyError(
            f"score store of {label} has no 'score_group_mean' (extract with the 'groups' reducer)"
        )
    return np.asarray(
        ds["score_group_mean"].transpose("group", "layer", "query", "key").values, dtype=np.float64
    )
