"""Summaries of a map's non-relative component beside the logit-unit index (paper 1 §3, Fig. 5).

All start from per-group raw mean maps, (group, n, n), of disjoint equal groups of sequences, with
a leave-one-group-out jackknife CI (estimate ± t_{G−1} · SE_jack); the G leave-one-out values pair
two layers or models measured on the same groups (:func:`paired`).

**Non-relative share** (scale-free). On the index cells C = {(i, j): 1 ≤ i − j ≤ n − 2},
M − m̄ = (T − m̄) + N (T the band means, N the diagonal-normalized map, m̄ the mean over C); the parts
are orthogonal, and s = ‖N‖² / ‖M − m̄‖² ∈ [0, 1] is the variance over C no function of the offset
explains, unchanged by scaling or shifting M. Both sums are debiased for Monte-Carlo noise by the
U-statistic Σ_{g≠h} x_g·x_h / (G(G−1)) (unbiased for ‖x‖²; E‖x̄‖² = ‖x‖² + Σ_c Var(x_c)/G), not
clipped; NaN where the map's debiased variance does not exceed the noise term removed. A jackknife,
not the bootstrap: a bootstrap replicate of a sum of squares carries noise × noise cross terms, and
its interval came out about twice the spread (the jackknife covered 96–99 % at level 0.95 in a
check on 20 × 20 maps, 8 to 20 groups; 76 % where the total variance was ~2× its noise: read the
share only where the index is clearly above its noise floor).

**First-keys band** (logit units, signed; the sign is measured, not assumed): the mean of the
normalized map over cells i > j, 1 ≤ j ≤ k. Key 0, the attention sink, is removed before
normalizing with ``exclude_sink``: left in, a sink s lowers every other cell of band d by s/(n − d),
most on the first keys' long offsets. Bands of a single cell (0 after normalizing) are left out.
The band is linear in the map, so it needs no noise correction.

**Key 0** (paper 1 §7). ``key0=False``: the share on the index cells without key 0; the key-0
column c_i = M[i, 0] − (band i's mean over keys ≥ 1) is then separate, and
key0_share = ‖c‖² / (‖c‖² + ‖N'‖²) ∈ [0, 1] is the part of the non-relative sum of squares it
carries (both sums debiased, jackknife CI; NaN when the debiased sum is not positive).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from causalpos.inference import jackknife_interval
from causalpos.paper1.diagonal import (
    _index_cells,
    band_index,
    key0_column,
    normalized_at,
    normalized_index_cells,
)


@dataclass(frozen=True)
class Interval:
    """A statistic of the grand-mean map per leading slice (e.g. layer), with a jackknife CI.

    ``estimate``, ``lo``, ``hi``: shape (...) of the maps' leading dims; ``jack``: (group, ...)
    leave-one-group-out values, paired across statistics of the same groups (:func:`paired`).
    """

    estimate: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    jack: np.ndarray
    level: float


def _check(group_maps: npt.ArrayLike, level: float, min_groups: int) -> np.ndarray:
    gm = np.asarray(group_maps, dtype=np.float64)
    if gm.ndim < 3 or gm.shape[-1] != gm.shape[-2]:
        raise ValueError(f"group_maps must have shape (group, ..., n, n); got shape {gm.shape}")
    if gm.shape[0] < min_groups:
        raise ValueError(f"resampling groups needs at least {min_groups} groups; got {gm.shape[0]}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1); got {level}")
    return gm


def _debiased_sum_sq(cells: np.ndarray) -> tuple[float, np.ndarray, float]:
    """Σ_{g≠h} x_g·x_h / (G(G−1)) of (group, cells), its G leave-one-out values, and the noise
    term Σ_c Var_g(x_c)/G it removed from ‖x̄‖² (module doc)."""
    g = cells.shape[0]
    total = cells.sum(axis=0)
    sq = np.einsum("gc,gc->g", cells, cells)
    q = float(sq.sum())
    full = (float(total @ total) - q) / (g * (g - 1))
    noise = float(total @ total) / g**2 - full
    if g < 3:  # one group left out of two leaves no pair
        return full, np.full(g, np.nan), noise
    loo_total = total[None, :] - cells
    loo = (np.einsum("gc,gc->g", loo_total, loo_total) - (q - sq)) / ((g - 1) * (g - 2))
    return full, loo, noise


def _ratio(num, den):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.asarray(den) > 0, np.asarray(num) / np.asarray(den), np.nan)


def share_parts(
    group_maps: np.ndarray, index_values: np.ndarray | None = None, *, key0: bool = True
) -> np.ndarray:
    """The debiased sums of one (group, n, n) stack of raw maps, shape (2, 2 + G): row 0 the
    non-relative ‖N‖², row 1 the total ‖M − m̄‖²; column 0 from all groups, column 1 the noise
    term removed, column 2 + g with group g left out; NaN when no index cell is finite in every
    group. ``index_values``: ``normalized_index_cells`` of ``group_maps`` (group, n_cells) where
    the caller has it (with the same ``key0``)."""
    g, n = group_maps.shape[0], group_maps.shape[-1]
    idx = _index_cells(n, key0)
    raw = group_maps.reshape(g, n * n)[:, idx]
    if index_values is None:
        index_values = normalized_at(group_maps, idx, drop_first_key=not key0)
    nrm = index_values
    ok = np.all(np.isfinite(raw), axis=0) & np.all(np.isfinite(nrm), axis=0)
    if not ok.any():
        return np.full((2, 2 + g), np.nan)
    raw, nrm = raw[:, ok], nrm[:, ok]
    total = raw - raw.mean(axis=1, keepdims=True)  # each group's map minus its own mean over C
    out = np.empty((2, 2 + g))
    for row, cells in enumerate((nrm, total)):
        out[row, 0], out[row, 2:], out[row, 1] = _debiased_sum_sq(cells)
    return out


def _share(parts: np.ndarray) -> np.ndarray:
    """(1 + G, ...) share and leave-one-out shares from :func:`share_parts` (2, 2 + G, ...): NaN
    where the map's debiased variance does not exceed its noise term (a ratio of two
    noise-dominated sums is not a share)."""
    ratio = _ratio(
        parts[0, [0, *range(2, parts.shape[1])]], parts[1, [0, *range(2, parts.shape[1])]]
    )
    detected = parts[1, 0] > parts[1, 1]
    return np.where(detected, ratio, np.nan)


def share_intervals(
    group_maps: npt.ArrayLike,
    level: float = 0.95,
    *,
    index_values: np.ndarray | None = None,
    key0: bool = True,
) -> tuple[Interval, Interval]:
    """The share per leading slice (layer) and pooled over all of them, with jackknife CIs.

    ``group_maps``: (group, ..., query, key) raw mean maps. The first :class:`Interval` has the
    leading dims (...), a NaN interval with fewer than 3 groups (a jackknife of a pairwise
    statistic needs two groups left). The second is the pooled share Σ‖N‖² / Σ‖M − m̄‖² over the
    slices (0-d), weighting each layer by its map's variance: defined whenever some layer's map
    is above noise, where a mean of per-layer shares is not (a layer at noise has a share
    anywhere in ±∞). ``index_values``: as in :func:`share_parts`, (group, ..., n_cells).
    """
    gm = _check(group_maps, level, 2)
    g, n = gm.shape[0], gm.shape[-1]
    lead = gm.shape[1:-2]
    maps = gm.reshape(g, -1, n, n)
    vals = None if index_values is None else index_values.reshape(g, maps.shape[1], -1)
    # one leading slice (layer) at a time: memory O(G n²)
    parts = np.stack(
        [
            share_parts(maps[:, s], None if vals is None else vals[:, s], key0=key0)
            for s in range(maps.shape[1])
        ],
        axis=-1,
    )
    per = _interval(_share(parts), lead, level)
    pooled = _share(np.nansum(parts, axis=-1))  # (1 + G,)
    plo, phi = jackknife_interval(pooled[0], pooled[1:], level)
    return per, Interval(pooled[0], plo, phi, pooled[1:], level)


def key0_share_interval(
    group_maps: npt.ArrayLike,
    level: float = 0.95,
    *,
    key0_values: np.ndarray | None = None,
    index_values: np.ndarray | None = None,
) -> Interval:
    """``key0_share`` per leading slice (layer) of (group, ..., query, key) raw mean maps, with a
    jackknife CI over groups (module doc).

    ``key0_values`` (``key0_column``, (group, ..., n − 2)) and ``index_values``
    (``normalized_index_cells`` with ``key0=False``) where the caller has them. Unlike
    :func:`share_intervals` it is not refused when the keys ≥ 1 are at noise: a key-0 column far
    above its floor reads ≈ 1 (values above 1 come from a debiased sum of keys ≥ 1 below 0).
    """
    gm = _check(group_maps, level, 2)
    g = gm.shape[0]
    lead = gm.shape[1:-2]
    col = key0_column(gm) if key0_values is None else key0_values
    nrm = normalized_index_cells(gm, key0=False) if index_values is None else index_values
    col = np.asarray(col).reshape(g, -1, col.shape[-1])
    nrm = np.asarray(nrm).reshape(g, -1, nrm.shape[-1])
    out = np.full((1 + g, col.shape[1]), np.nan)
    for s in range(col.shape[1]):
        c, r = col[:, s], nrm[:, s]
        c, r = c[:, np.all(np.isfinite(c), axis=0)], r[:, np.all(np.isfinite(r), axis=0)]
        if not c.shape[1]:
            continue
        both = np.concatenate([c, r], axis=1)  # disjoint cells: the sums add
        num, num_loo, _ = _debiased_sum_sq(c)
        den, den_loo, _ = _debiased_sum_sq(both)
        out[:, s] = _ratio(np.r_[num, num_loo], np.r_[den, den_loo])
    return _interval(out, lead, level)


def _interval(vals: np.ndarray, lead: tuple, level: float) -> Interval:
    """The :class:`Interval` of (1 + G, slices) estimates and leave-one-out values, the slices
    shaped back to the maps' leading dims ``lead``."""
    lo, hi = jackknife_interval(vals[0], vals[1:], level)
    jack = vals[1:].reshape(vals.shape[0] - 1, *lead)
    return Interval(vals[0].reshape(lead), lo.reshape(lead), hi.reshape(lead), jack, level)


def band_cells(n: int, keys: int, exclude_sink: bool = True) -> np.ndarray:
    """Flat indices of the first-keys band: i > j, 1 ≤ j ≤ ``keys``, without the offset whose band
    holds a single cell (n − 1, or n − 2 once the sink column is removed)."""
    if keys < 1:
        raise ValueError(f"the first-keys band needs keys >= 1; got {keys}")
    _, j = np.indices((n, n))
    k = band_index(n) - (n - 1)
    longest = n - 2 if exclude_sink else n - 1
    return np.flatnonzero(((j >= 1) & (j <= keys) & (k >= 1) & (k < longest)).ravel())


def band_values(
    group_maps: npt.ArrayLike,
    keys: int,
    exclude_sink: bool = True,
    *,
    index_values: np.ndarray | None = None,
) -> np.ndarray:
    """First-keys band of (..., n, n) raw maps -> (...), logit units (module doc).
    ``index_values``: ``normalized_index_cells`` of the maps (..., n_cells) with
    ``key0=not exclude_sink``, where the caller has it."""
    gm = np.asarray(group_maps)
    n = gm.shape[-1]
    band = band_cells(n, keys, exclude_sink)
    if index_values is not None:  # band ⊂ index cells
        cells = index_values[..., np.searchsorted(_index_cells(n, not exclude_sink), band)]
    else:
        cells = normalized_at(gm, band, drop_first_key=exclude_sink)
    with warnings.catch_warnings():  # no finite band cell: NaN, silently
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(cells, axis=-1) if cells.shape[-1] else np.full(gm.shape[:-2], np.nan)


def band_ci(
    group_maps: npt.ArrayLike,
    keys: int,
    *,
    exclude_sink: bool = True,
    level: float = 0.95,
    index_values: np.ndarray | None = None,
) -> Interval:
    """First-keys band (keys 1..``keys``) of the grand-mean map with a jackknife CI over groups.

    ``group_maps``: (group, ..., query, key) raw mean maps; ``index_values`` as in
    :func:`band_values`. The band of the mean map is the mean of the groups' bands.
    """
    gm = _check(group_maps, level, 2)
    g = gm.shape[0]
    vals = band_values(gm, keys, exclude_sink, index_values=index_values)  # (group, ...)
    est = vals.mean(axis=0)
    jack = (vals.sum(axis=0, keepdims=True) - vals) / (g - 1)
    lo, hi = jackknife_interval(est, jack, level)
    return Interval(est, lo, hi, jack, level)


def paired(a: Interval, b: Interval) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, lo, hi) of a − b, jackknifed over the groups the two share (elementwise)."""
    if a.jack.shape[0] != b.jack.shape[0]:
        raise ValueError(
            f"a paired contrast needs the same groups; got {a.jack.shape[0]} and {b.jack.shape[0]}"
        )
    est = np.asarray(a.estimate, dtype=np.float64) - np.asarray(b.estimate, dtype=np.float64)
    lo, hi = jackknife_interval(est, a.jack - b.jack, a.level)
    return est, lo, hi


def interval_columns(
    name: str, est_lo_hi, layer: int | None = None, skip: bool = False
) -> dict[str, float]:
    """``{name, name_lo, name_hi}`` of an :class:`Interval` or an (estimate, lo, hi) triple: of
    one ``layer`` (index of the leading axis; None: a scalar statistic), NaN where ``skip``."""
    if isinstance(est_lo_hi, Interval):
        est_lo_hi = (est_lo_hi.estimate, est_lo_hi.lo, est_lo_hi.hi)
    if skip:
        return {name: math.nan, f"{name}_lo": math.nan, f"{name}_hi": math.nan}
    vals = [np.asarray(x) for x in est_lo_hi]
    vals = [float(v if layer is None else v[layer]) for v in vals]
    return dict(zip((name, f"{name}_lo", f"{name}_hi"), vals))


def minus_first_layer(a: Interval) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, lo, hi) of a[..., L] − a[..., 0] for every layer L (last axis), paired over the
    groups (0 with a zero-width interval at layer 0 itself)."""
    first = Interval(
        *(np.broadcast_to(x[..., :1], x.shape) for x in (a.estimate, a.lo, a.hi, a.jack)),
        level=a.level,
    )
    return paired(a, first)
