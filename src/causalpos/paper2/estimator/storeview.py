"""A leakage store's expected-map statistics as the estimator reads them: label-indexed numpy views
(:func:`store_view`), each layer's summed maps, measured pairs, per-prompt statistics and Grams.

The headline reads one (layer, target, window) slice of six variables per layer and run,
thousands of times in a summary: xarray's ``.sel`` costs ~1 ms a call, a numpy index
microseconds. :func:`store_view` transposes each variable once (label axes first) and keeps the
view while the Dataset lives; a slice holds the values ``ds[var].sel(...).transpose(...)`` does.
"""

from __future__ import annotations

import weakref

import numpy as np
import xarray as xr

from causalpos import stats
from causalpos.models.layer_kinds import LAYER_KIND, kinds_by_layer, pattern
from causalpos.paper2.estimator.pairgrams import PromptStats, plant_query_effect, prompt_grams
from causalpos.paper2.extraction.design import (
    Design,
    build_design,
    pair_mask,
    parse_fit,
    query_window,
)

#: variable -> its axes in the view: the labelled axes first, then the slice's own axes.
AXES = {
    "leak_offsum": (
        ("layer", "leak_target", "leak_exp_window"),
        ("sequence", "head", "leak_offset"),
    ),
    "leak_key0sum": (("layer", "leak_target", "leak_exp_window"), ("sequence", "head")),
    "leak_rowsum": (("layer", "leak_target"), ("sequence", "head", "query")),
    "leak_map_sum": (("layer",), ("head", "query", "key")),
    "leak_logz_sum": (("layer",), ("head", "query")),
    "leak_sst": (("layer", "leak_target", "leak_window"), ("sequence", "head")),
}


class StoreView:
    """The variables of :data:`AXES` a store holds, sliced by coordinate labels (holds the
    arrays, not the Dataset)."""

    def __init__(self, ds: xr.Dataset):
        _check_layout(ds)
        self._arrays = {
            var: ds[var].transpose(*lead, *rest).values
            for var, (lead, rest) in AXES.items()
            if var in ds
        }
        dims = {d for var in self._arrays for d in AXES[var][0]}
        self._index = {d: {v: i for i, v in enumerate(ds[d].values.tolist())} for d in dims}

    def __contains__(self, var: str) -> bool:
        return var in self._arrays

    def get(self, var: str, **labels) -> np.ndarray:
        """``ds[var].sel(**labels)`` with the slice's axes in :data:`AXES` order (a view)."""
        lead = AXES[var][0]
        if set(labels) != set(lead):
            raise ValueError(f"{var} is sliced by {lead}, got {sorted(labels)}")
        if var not in self._arrays:
            raise KeyError(f"the store has no variable {var!r}")
        pos = []
        for d in lead:
            label = labels[d]
            label = label.item() if isinstance(label, np.generic) else label
            if label not in self._index[d]:
                raise KeyError(
                    f"{label!r} is not a label of the store's {d!r} axis {list(self._index[d])}"
                )
            pos.append(self._index[d][label])
        return self._arrays[var][tuple(pos)]


_VIEWS: dict[int, tuple[weakref.ref, StoreView]] = {}


def _view_of(ds: xr.Dataset) -> StoreView | None:
    """The :class:`StoreView` already built of ``ds``, if any."""
    hit = _VIEWS.get(id(ds))
    return hit[1] if hit is not None and hit[0]() is ds else None


def store_view(ds: xr.Dataset | StoreView) -> StoreView:
    """The :class:`StoreView` of ``ds``, built once per Dataset object (kept while it lives)."""
    if isinstance(ds, StoreView):
        return ds
    view = _view_of(ds)
    if view is None:
        view = StoreView(ds)
        _VIEWS[id(ds)] = (weakref.ref(ds), view)
        weakref.finalize(ds, _VIEWS.pop, id(ds), None)
    return view


def map_sum(ds: xr.Dataset | StoreView, layer, target: str) -> np.ndarray:
    """One layer's maps of ``target`` summed over the store's sequences, (head, T, T) float64
    (a new array), NaN where masked.

    The store keeps the summed logits ``leak_map_sum`` and each query row's summed log Z
    ``leak_logz_sum``; the summed log-attention maps are Σ_p (s_p − log Z_p) = Σ s − Σ log Z,
    the subtraction done in float64 (bit for bit the reducer's float64 sums). ``ds``: a Dataset
    (read directly, unless its :func:`store_view` exists) or its view."""
    if target not in ("logit", "logattn"):
        raise ValueError(f"target {target!r} is not one of {['logit', 'logattn']}")
    names = ("leak_map_sum",) if target == "logit" else ("leak_map_sum", "leak_logz_sum")
    if not isinstance(ds, StoreView):
        _check_layout(ds)
        ds = _view_of(ds) or ds
    if any(k not in ds for k in names):
        raise KeyError(
            f"the store lacks {[k for k in names if k not in ds]}: run extraction with "
            "LeakageReducer(mean_maps=True)"
        )
    if isinstance(ds, StoreView):
        parts = [ds.get(k, layer=layer) for k in names]
    else:
        parts = [ds[k].sel(layer=layer).transpose("head", "query", ...).values for k in names]
    out = np.array(parts[0], dtype=np.float64)
    if target == "logattn":
        np.subtract(out, parts[1][..., None], out=out)
    return out


def map_sums(ds: xr.Dataset, target: str) -> np.ndarray:
    """:func:`map_sum` of every layer of ``ds``, (layer, head, T, T) float64, filled layer by
    layer."""
    layers = ds["layer"].values
    out = None
    for k, layer in enumerate(layers):
        one = map_sum(ds, layer, target)
        if out is None:
            out = np.empty((len(layers), *one.shape))
        out[k] = one
    return out


def _check_layout(ds: xr.Dataset) -> None:
    if "leak_map_sum" in ds and "leak_target" in ds["leak_map_sum"].dims:
        raise ValueError(
            "the store's leak_map_sum has a leak_target axis (the summed logit and log-attention "
            "maps of an older layout, without leak_logz_sum): rebuild the store with this code"
        )


def window_pairs(
    allowed: np.ndarray, window: str, pair_subsample: int | None = None, seed: int = 0
) -> np.ndarray:
    """The reducer's measured pairs of ``window``: lower triangle without row 0, ∧ the model's
    allowed pairs ((T, T) bool) ∧ its stratified pair subsample, on the window's query rows."""
    T = allowed.shape[-1]
    sub = None
    if pair_subsample is not None:
        sub = stats.stratified_pair_mask(T, pair_subsample, seed) & allowed
    return pair_mask(T, window=window, allowed=allowed, subsample=sub)


def store_stats(
    ds: xr.Dataset,
    layer,
    window: str,
    target: str,
    mask: np.ndarray,
    sst_sum: np.ndarray | None = None,
) -> PromptStats:
    """:class:`PromptStats` of one layer (maps: heads) from a leakage store's variables
    (``ds`` a Dataset or its :func:`~causalpos.paper2.estimator.storeview.store_view`).
    ``sst_sum``: this layer's, window's and target's ‖C S‖² as an earlier call returned it (the
    summed maps' pass, most of the call's cost), else computed."""
    v = store_view(ds)
    sel = dict(layer=layer, leak_target=target)
    lo, hi = query_window(window, mask.shape[0])
    rows = v.get("leak_rowsum", **sel).copy()  # (sequence, head, query)
    rows[..., :lo] = 0.0
    rows[..., hi:] = 0.0
    sel_e = dict(sel, leak_exp_window=window)
    if sst_sum is None:
        msum = map_sum(v, layer, target)[:, mask]  # (head, pair)
        sst_sum = ((msum - msum.mean(-1, keepdims=True)) ** 2).sum(-1)
    return PromptStats(
        off=v.get("leak_offsum", **sel_e).astype(np.float64),  # (sequence, head, offset)
        rows=rows.astype(np.float64),
        key0=v.get("leak_key0sum", **sel_e).astype(np.float64),  # (sequence, head)
        sst=v.get("leak_sst", **sel, leak_window=window).astype(np.float64),
        sst_sum=sst_sum,
    )


def store_masks(ds: xr.Dataset, window: str, target: str) -> dict:
    """Layer -> the measured pairs ((T, T) bool) of ``window`` in a leakage store: the allowed pairs
    of its summed maps ∧ the reducer's pair subsample (``leak_pair_subsample``, ``leak_seed``)."""
    need = ("leak_offsum", "leak_key0sum", "leak_rowsum", "leak_map_sum", "leak_logz_sum")
    missing = [k for k in need if k not in ds]
    if missing:
        raise ValueError(
            f"the store lacks {missing}: run extraction with LeakageReducer(expected_stats=True, "
            "mean_maps=True)"
        )
    if window not in ds["leak_exp_window"].values:
        raise ValueError(
            f"window {window!r} is not among the store's expected-map windows "
            f"{list(ds['leak_exp_window'].values)} (LeakageReducer(expected_stats=[...]))"
        )
    attrs = ds["leak_delta"].attrs
    sub = int(attrs.get("leak_pair_subsample", ds.attrs.get("leak_pair_subsample", -1)))
    seed_pairs = int(attrs.get("leak_seed", ds.attrs.get("leak_seed", 0)))
    out = {}
    v = store_view(ds)
    kinds = layer_kind_of(ds)
    for layer in ds["layer"].values:
        msum = map_sum(v, layer, target)  # (head, T, T)
        tri = np.tril(np.ones(msum.shape[-2:], dtype=bool))
        allowed = np.isfinite(msum).all(0) & tri
        if kinds is not None:  # the reducer measured the layer's pairs as trained
            ref = pattern(kinds[layer], msum.shape[-1]) & tri
            if (ref & ~allowed).any():
                raise ValueError(
                    f"layer {layer} ({kinds[layer]}): the store's summed maps are NaN on pairs "
                    "the layer attends to as trained; rebuild the store with this code"
                )
            allowed = ref
        out[layer] = window_pairs(allowed, window, None if sub < 0 else sub, seed_pairs)
    return out


def layer_kind_of(ds: xr.Dataset) -> dict | None:
    """Layer -> its kind (the store's ``layer_kind`` coordinate; None for a store without
    one, whose reducer measured each run's own finite pairs)."""
    return kinds_by_layer(ds) if LAYER_KIND in ds.coords else None


def rounding_bound(unit: float, s2: float, r2: float, target: str) -> float:
    """A bound on |‖C S̃‖² − ‖C S‖²| (C a centring, ‖C‖ ≤ 1) for a summed map S read as S̃ from a
    store whose logit sums R are rounded to ``unit`` (u); ``s2`` = ‖S‖², ``r2`` = ‖R‖².

    With E = S̃ − S the bound is 2‖S‖‖E‖ + ‖E‖². Logits (S = R, |E| ≤ u|R|): (2u + u²)‖S‖² ≤
    3u‖S‖². Log-attention (S = R − log Z, the subtraction in float64, whose unit is ≤ u):
    |E| ≤ u(1 + u)|R| + u|S| cell by cell, so ‖E‖ ≤ u((1 + u)‖R‖ + ‖S‖)."""
    if target == "logit":
        return 3 * unit * s2
    s, r = np.sqrt(s2), np.sqrt(r2)
    e = unit * ((1 + unit) * r + s)
    return float(2 * s * e + e * e)


def store_grams(
    ds: xr.Dataset,
    *,
    window: str = "all",
    target: str = "logit",
    fit: str = "saturated+query",
    landmark: bool = True,
    plant: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], float]:
    """:func:`prompt_grams` of every layer of a leakage store (leading axes (layer, head)) and a
    bound on the rounding of ‖C S‖² from the summed maps' precision (:func:`rounding_bound`).
    ``plant`` (T,): a query effect b added to every map (:func:`plant_query_effect`)."""
    parse_fit(fit)
    masks = store_masks(ds, window, target)
    per_layer = []
    unit = np.finfo(ds["leak_map_sum"].dtype).eps / 2  # a float32 store rounds the logit sums
    rounding = 0.0
    designs: dict[bytes, Design] = {}  # layers usually share one pair mask
    v = store_view(ds)
    for layer, mask in masks.items():
        s2 = float((map_sum(v, layer, target)[:, mask] ** 2).sum())
        r2 = s2 if target == "logit" else float((map_sum(v, layer, "logit")[:, mask] ** 2).sum())
        rounding += rounding_bound(unit, s2, r2, target)
        key = np.packbits(mask).tobytes()
        if key not in designs:
            designs[key] = build_design(mask, fit, landmark=landmark)
        st = store_stats(v, layer, window, target, mask)
        if plant is not None:
            st = plant_query_effect(st, mask, plant)
        per_layer.append(prompt_grams(st, designs[key]))
    return {k: np.stack([g[k] for g in per_layer]) for k in per_layer[0]}, rounding
