"""Each layer's attention mask, as the stores record it and every per-layer table names it.

Score and summary stores carry a coordinate ``layer_kind`` on their ``layer`` dimension:
``global`` (the full causal mask) or ``sliding<W>`` (a window of W keys, e.g. ``sliding512``). A
store without it (written before layer kinds were recorded) is read as ``global`` on every layer:
every model the pipeline ran before them had full-attention layers only, sliding-window models
aside (the models trained here with ``positional: swa``), whose stores predate the coordinate
and read ``global`` too until rerun. Position 0's trajectory has one more row than the model has
layers, the embedding (:data:`EMBEDDING`), then the output of each block.

A leaf: imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: The coordinate on ``layer`` and the column of every per-layer table.
LAYER_KIND = "layer_kind"
#: A layer with the full causal mask (and a store that records no kinds).
GLOBAL = "global"
#: Row 0 of position 0's trajectory: the embedding, before any block.
EMBEDDING = "embedding"


def layer_kinds(ds, n_layers: int | None = None) -> list[str]:
    """The kind of each layer of ``ds`` (an xarray Dataset with a ``layer`` dimension), in the
    order of that dimension; ``GLOBAL`` for all of them where ``ds`` records none. ``n_layers``:
    the number the caller reads (checked against the record)."""
    n = int(ds.sizes["layer"]) if n_layers is None else int(n_layers)
    if LAYER_KIND not in ds.variables:
        return [GLOBAL] * n
    da = ds[LAYER_KIND]
    if da.dims != ("layer",) or da.size != n:
        raise ValueError(
            f"{LAYER_KIND} must be a coordinate on 'layer' with one kind per layer ({n}); the "
            f"store has dims {da.dims} and {da.size} values: rewrite the store with this "
            "causalpos (rerun the rule that wrote it)"
        )
    return [str(k) for k in da.values]


def kinds_by_layer(ds) -> dict[int, str]:
    """``{layer coordinate value: kind}`` of ``ds`` (positions where ``layer`` has no values)."""
    layers = ds["layer"].values if "layer" in ds.coords else range(int(ds.sizes["layer"]))
    return {int(layer): kind for layer, kind in zip(layers, layer_kinds(ds))}


def block_kinds(kinds: Sequence[str]) -> list[str]:
    """The kinds of position 0's trajectory, one row per state: :data:`EMBEDDING`, then the kind
    of each block's attention layer."""
    return [EMBEDDING, *kinds]


def with_layer_kind(df, kinds: Mapping[int, str] | Sequence[str], *, layer: str = "layer"):
    """``df`` (a pandas DataFrame with a ``layer`` column) with a ``layer_kind`` column right
    after it: ``kinds[layer]`` (a mapping from the column's values, or a sequence indexed by
    them); one already present (from a store's coordinate) is replaced. A layer without a kind
    is a ValueError naming it."""
    out = df.drop(columns=[LAYER_KIND], errors="ignore")
    lookup = dict(kinds) if isinstance(kinds, Mapping) else dict(enumerate(kinds))
    missing = sorted({int(v) for v in out[layer]} - set(lookup))
    if missing:
        raise ValueError(f"no layer kind for layer(s) {missing} (kinds known: {sorted(lookup)})")
    values = [lookup[int(v)] for v in out[layer]]
    out.insert(out.columns.get_loc(layer) + 1, LAYER_KIND, values)
    return out
