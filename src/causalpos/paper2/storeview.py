"""Label-indexed numpy views of a leakage store's expected-map statistics.

The headline estimator reads one (layer, target, window) slice of five variables per layer and
run, thousands of times in a summary; xarray's ``.sel`` costs ~1 ms a call, a numpy index
microseconds. :func:`store_view` transposes each variable once (label axes first, a view of a
loaded store) and keeps the view for as long as the Dataset lives; a slice of it holds the same
values ``ds[var].sel(...).transpose(...)`` returns.
"""

from __future__ import annotations

import weakref

import numpy as np
import xarray as xr

#: variable -> its axes in the view: the labelled axes first, then the slice's own axes.
AXES = {
    "leak_offsum": (
        ("layer", "leak_target", "leak_exp_window"),
        ("sequence", "head", "leak_offset"),
    ),
    "leak_key0sum": (("layer", "leak_target", "leak_exp_window"), ("sequence", "head")),
    "leak_rowsum": (("layer", "leak_target"), ("sequence", "head", "query")),
    "leak_map_sum": (("layer", "leak_target"), ("head", "query", "key")),
    "leak_sst": (("layer", "leak_target", "leak_window"), ("sequence", "head")),
}


class StoreView:
    """The variables of :data:`AXES` a store holds, sliced by coordinate labels (holds the
    arrays, not the Dataset)."""

    def __init__(self, ds: xr.Dataset):
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


def store_view(ds: xr.Dataset | StoreView) -> StoreView:
    """The :class:`StoreView` of ``ds``, built once per Dataset object (kept while it lives)."""
    if isinstance(ds, StoreView):
        return ds
    key = id(ds)
    hit = _VIEWS.get(key)
    if hit is not None and hit[0]() is ds:
        return hit[1]
    view = StoreView(ds)
    _VIEWS[key] = (weakref.ref(ds), view)
    weakref.finalize(ds, _VIEWS.pop, key, None)
    return view
