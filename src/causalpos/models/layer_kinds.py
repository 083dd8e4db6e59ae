"""Each layer's attention mask as the model was trained: its *layer kind* (a leaf: numpy only).

A kind is ``"global"`` (a query sees every earlier key, j ≤ i) or ``"sliding<W>"`` (the last W
keys, i − W < j ≤ i: transformers' sliding window of size W), read from the model's config
(:func:`config_kinds`). Stores record them as the coordinate ``layer_kind`` on ``layer``
(:func:`layer_kinds` reads it back); every per-layer statistic and table names its layer's kind
and pools like with like. At a length T ≤ W a sliding window masks nothing the causal mask does
not (:func:`masks_anything`): a comparison of the two kinds is not applicable there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

GLOBAL = "global"
SLIDING = "sliding"
_KIND = re.compile(r"(global)|sliding([1-9]\d*)")

#: The coordinate on ``layer`` and the column of every per-layer table.
LAYER_KIND = "layer_kind"
#: Row 0 of position 0's trajectory: the embedding, before any block.
EMBEDDING = "embedding"

#: transformers' ``layer_types`` entries and the kind each one is.
_LAYER_TYPES = {"full_attention": GLOBAL, "sliding_attention": SLIDING}


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def config_kinds(config: Any) -> list[str]:
    """The kind of every layer of a model (a transformers config or its ``config.json`` dict):
    ``layer_types`` where it has them (e.g. Gemma 3's 5 : 1 pattern), else ``sliding_window`` on
    every layer (Mistral), else global. ``ValueError`` naming the layer for a type the analyses
    cannot read (e.g. chunked or linear attention) or a sliding layer without a positive window.
    """
    n = int(_get(config, "num_hidden_layers"))
    window = _get(config, "sliding_window")
    types = _get(config, "layer_types")
    if types is None:
        types = ["sliding_attention" if window is not None else "full_attention"] * n
    types = list(types)
    if len(types) != n:
        raise ValueError(f"config: layer_types has {len(types)} entries for num_hidden_layers {n}")
    out = []
    for i, t in enumerate(types):
        kind = _LAYER_TYPES.get(t)
        if kind is None:
            raise ValueError(
                f"layer {i} is of type {t!r}: the analyses read {sorted(_LAYER_TYPES)} layers "
                "only (their masks: every earlier key, or the last sliding_window keys)"
            )
        if kind == SLIDING:
            if not isinstance(window, int) or isinstance(window, bool) or window < 1:
                raise ValueError(
                    f"layer {i} is a sliding-window layer but the config's sliding_window is "
                    f"{window!r}: a positive integer is needed"
                )
            kind = f"{SLIDING}{window}"
        out.append(kind)
    return out


def is_kind(value: str) -> bool:
    """Whether ``value`` is a layer kind: ``"global"`` or ``"sliding<W>"`` (W ≥ 1)."""
    return _KIND.fullmatch(str(value)) is not None


def parse_kind(kind: str) -> int | None:
    """The window W of a kind (None for ``"global"``); ``ValueError`` for another string."""
    m = _KIND.fullmatch(str(kind))
    if not m:
        raise ValueError(
            f"layer kind {kind!r}: expected 'global' or 'sliding<W>' (e.g. 'sliding512')"
        )
    return None if m.group(1) else int(m.group(2))


def pattern(kind: str, seq_len: int) -> np.ndarray:
    """``(T, T)`` bool: the (query, key) pairs a layer of ``kind`` attends to in a causal pass —
    j ≤ i, and i − j < W for ``"sliding<W>"``."""
    T = int(seq_len)
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    allowed = j <= i
    window = parse_kind(kind)
    if window is not None:
        allowed &= i - j < window
    return allowed


def masks_anything(kind: str, seq_len: int) -> bool:
    """Whether a layer of ``kind`` masks a pair the causal mask keeps at length ``seq_len``:
    False for global layers, and for a window W ≥ T (it masks nothing at that length)."""
    window = parse_kind(kind)
    return window is not None and window < seq_len


def kind_groups(kinds: Sequence[str]) -> dict[str, list[int]]:
    """Kind -> the indices of its layers, kinds in order of first appearance."""
    out: dict[str, list[int]] = {}
    for i, k in enumerate(kinds):
        out.setdefault(str(k), []).append(i)
    return out


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
    kinds = [str(k) for k in da.values]
    if bad := sorted({k for k in kinds if not _KIND.fullmatch(k)}):
        raise ValueError(
            f"{LAYER_KIND}: {bad} are not layer kinds; each layer's kind is 'global' or "
            "'sliding<W>' with W the window in tokens (e.g. 'sliding512')"
        )
    return kinds


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
    if missing := sorted({int(v) for v in out[layer]} - set(lookup)):
        raise ValueError(f"no layer kind for layer(s) {missing} (kinds known: {sorted(lookup)})")
    values = [lookup[int(v)] for v in out[layer]]
    out.insert(out.columns.get_loc(layer) + 1, LAYER_KIND, values)
    return out
