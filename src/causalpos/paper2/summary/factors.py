"""claim 3 by intervention within one model (paper2.md §3, "Architecture factors"): each factor's
effect on the headline decomposition, the same weights and prompts, paired replicates.

Gemma-3's sliding and global layers differ in the window *and* the RoPE base (10k vs 1M), depth
and role, so their contrast (``components_kind_contrast``) is observational. Each factor is
isolated by a forward-pass variant (:data:`causalpos.models.variants.FACTOR_ATOMS`):

- ``window``: the window's effect, the plain causal run minus ``no_window`` (every sliding layer
  given the full causal mask). Its ring twin is the plain ``ring`` (the ring has no window), so
  its mask-free reading is 0 by construction;
- ``rope_base``: the global base's effect, ``global_base`` (the sliding layers rotated with the
  global layers' base, their window kept) minus the plain run; its ring twin
  ``global_base+ring`` against ``ring``.

Readings (:data:`READINGS`), each a difference of ΔSS of the two runs' expected maps over *one*
denominator, the plain causal run's expected log-attention variance (the decomposition's unit), on
the pairs each layer attends to as trained: ``total`` (log-attention), ``logit`` (the causal
run's logits: the position q·k carry, paper 2's residual stream on the mechanism mapping),
``direct`` (log-attention minus logits: the normaliser with its cross term), ``indirect``
(causal logits minus ring logits) and ``mask_free`` (the ring's logits: the residual stream on
the ablation mapping). Per layer, pooled per layer kind and over every layer, and as the
least-squares slope of the per-layer effect on the layer index across the sliding layers
(``factor_slope``), every interval from the same replicates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos.models.layer_kinds import GLOBAL, kind_groups, masks_anything
from causalpos.paper2.estimator.grams import GramCache
from causalpos.paper2.estimator.replicates import LINEAR_PARTS, sum_parts
from causalpos.paper2.estimator.storeview import layer_kind_of
from causalpos.paper2.labels import STAT

#: Factor -> (intervention run, its ring twin, sign): the factor's effect is sign · (intervention
#: − plain), so a positive effect is what the factor adds (the window kept; the global base on).
FACTORS: dict[str, tuple[str, str, float]] = {
    "window": ("no_window", "ring", -1.0),
    "rope_base": ("global_base", "global_base+ring", 1.0),
}
PLAIN, PLAIN_RING = "causal", "ring"

#: Each reading as (role, target, coefficient) terms of one run pair: c the causal run, r its ring.
READINGS: dict[str, tuple[tuple[str, str, float], ...]] = {
    "total": (("c", "logattn", 1.0),),
    "logit": (("c", "logit", 1.0),),
    "direct": (("c", "logattn", 1.0), ("c", "logit", -1.0)),
    "indirect": (("c", "logit", 1.0), ("r", "logit", -1.0)),
    "mask_free": (("r", "logit", 1.0),),
}
#: The level over every layer, beside each layer kind's.
ALL_LAYERS = "all"


def factor_runs(runs: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """Factor -> (intervention run, its ring twin or None) for every factor whose intervention
    and the plain causal run are among ``runs`` (the ring readings need both rings)."""
    out = {}
    for factor, (run, ring, _) in FACTORS.items():
        if run in runs and PLAIN in runs:
            out[factor] = (run, ring if ring in runs and PLAIN_RING in runs else None)
    return out


def _terms(factor: str, run: str, ring: str | None, reading: str) -> dict | None:
    """(run, target) -> coefficient of ``reading``'s effect (None: a ring it needs is missing)."""
    sign = FACTORS[factor][2]
    out: dict[tuple[str, str], float] = {}
    for role, target, co in READINGS[reading]:
        pair = (run, PLAIN) if role == "c" else (ring, PLAIN_RING)
        if pair[0] is None:
            return None
        for r, s in zip(pair, (1.0, -1.0)):
            out[(r, target)] = out.get((r, target), 0.0) + sign * s * co
    return {k: v for k, v in out.items() if v != 0.0}


def slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of ``y (..., len(x))`` on ``x`` along the last axis (NaN for < 2
    distinct x)."""
    x = np.asarray(x, dtype=np.float64)
    xc = x - x.mean() if x.size else x
    sxx = float((xc * xc).sum())
    if x.size < 2 or sxx == 0.0:
        return np.full(np.shape(y)[:-1], np.nan)
    return (np.asarray(y) * xc).sum(-1) / sxx


class _Effect:
    """One reading's effect of one factor: its numerator Gram (layer, n, n) over heads, linear
    parts, and the plain run's denominator, at every level."""

    def __init__(self, cache: GramCache, terms: Mapping, window: str) -> None:
        self.cache = cache
        grams, parts = [], []
        for (run, target), co in terms.items():
            p = cache.parts(run, window, target)
            grams.append(co * cache.grams(run, window, target)["num"].sum(1))
            parts.append({k: co * v for k, v in p.items()})
        self.gram = sum(grams)
        self.parts = {k: sum(p[k] for p in parts) for k in LINEAR_PARTS}
        self.d0, self.db = cache.denominator(PLAIN, window, "logattn", "layer")

    def at(self, layers: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(estimate, replicates): per layer (None) or pooled over ``layers`` (indices)."""
        if layers is None:
            est, rep = self.cache.numerator(self.gram, contrast=True, parts=self.parts)
            return est / self.d0, rep / self.db
        parts = sum_parts({k: v[:, layers] for k, v in self.parts.items()}, 0)
        est, rep = self.cache.numerator(self.gram[layers].sum(0), contrast=True, parts=parts)
        return est / self.d0[layers].sum(), rep / self.db[:, layers].sum(-1)


def factor_block(cache: GramCache, wins: Sequence[str]) -> xr.Dataset:
    """claim 3's factor effects (module doc) for every factor the summary holds the runs of.

    ``factor_layer`` (factor, factor_reading, window, layer, stat),
    ``factor_kind`` (..., factor_level, stat: each layer kind's layers pooled, then
    :data:`ALL_LAYERS`), ``factor_slope`` (factor, factor_reading, window, stat: the
    per-layer effect's least-squares slope on the layer index across the sliding layers, per
    layer). NaN where a reading's ring twin is missing. Attrs: ``factor_runs``,
    ``factor_sliding_layers`` (the slope's layers), ``factor_window_masks`` (whether a
    sliding window masks anything at this length: where it does not, the window factor changes
    nothing and reads 0 exactly)."""
    ps = cache.ps
    runs = factor_runs(list(ps.runs))
    if not runs:
        return xr.Dataset()
    plain = ps.runs[PLAIN]
    kinds = layer_kind_of(plain) or {ly: GLOBAL for ly in ps.layers}
    kind_list = [kinds[ly] for ly in ps.layers]
    groups = kind_groups(kind_list) | {ALL_LAYERS: list(range(len(ps.layers)))}
    sliding = [i for i, k in enumerate(kind_list) if k != GLOBAL]
    T = int(plain.attrs.get("seq_len", plain.sizes.get("query", 0))) or None
    shape = (len(runs), len(READINGS), len(wins))
    layer = np.full(shape + (len(ps.layers), 3), np.nan)
    kind = np.full(shape + (len(groups), 3), np.nan)
    slopes = np.full(shape + (3,), np.nan)
    x = np.asarray([ps.layers[i] for i in sliding], dtype=np.float64)
    for fi, (factor, (run, ring)) in enumerate(runs.items()):
        for ri, reading in enumerate(READINGS):
            terms = _terms(factor, run, ring, reading)
            if terms is None:
                continue
            for wi, w in enumerate(wins):
                if not terms:  # the same run on both sides: exactly 0
                    layer[fi, ri, wi, :, :] = kind[fi, ri, wi, :, :] = slopes[fi, ri, wi] = 0.0
                    continue
                eff = _Effect(cache, terms, w)
                est, rep = eff.at(None)
                layer[fi, ri, wi] = ps.ci(rep, est)
                for gi, idx in enumerate(groups.values()):
                    e, r = eff.at(np.asarray(idx))
                    kind[fi, ri, wi, gi] = ps.ci(r, e)
                if len(sliding) >= 2:
                    slopes[fi, ri, wi] = ps.ci(slope(x, rep[:, sliding]), slope(x, est[sliding]))
    window_masks = T is not None and any(masks_anything(k, T) for k in kind_list)
    lead = ("factor", "factor_reading", "window")
    return xr.Dataset(
        {
            "factor_layer": (lead + ("layer", "stat"), layer),
            "factor_kind": (lead + ("factor_level", "stat"), kind),
            "factor_slope": (lead + ("stat",), slopes),
        },
        coords={
            "factor": list(runs),
            "factor_reading": list(READINGS),
            "window": list(wins),
            "layer": ps.layers,
            "factor_level": list(groups),
            "stat": list(STAT),
        },
        attrs={
            "factor_runs": repr({f: [r, g] for f, (r, g) in runs.items()}),
            "factor_sliding_layers": [int(ps.layers[i]) for i in sliding],
            "factor_window_masks": int(window_masks),
        },
    )
