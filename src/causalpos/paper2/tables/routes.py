"""The decomposition's three routes in the tables (:mod:`causalpos.paper2.decomposition`): where
the mask-free route applies (:func:`mark_mask_free`: token 0 one fixed id across the prompts) and
paper 2's two components on each mapping, a row per mapping (:func:`mappings_frame`, table
``decomposition_mappings``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.paper2.decomposition import MAPPINGS
from causalpos.paper2.labels import MEASURED

#: The components that read the mask-free route (the ring run's logits alone) and the shares
#: made of it; "not applicable" (NaN) where token 0 is not fixed. The indirect route (causal
#: minus ring logits) and the aliases keep their numbers.
MASK_FREE_COLUMNS = ("mask_free", "share_mask_free", "share_causal_mask_ablation")

#: ``mask_free_status`` where token 0 varies across the prompts, and where the summary does not
#: record it.
NOT_FIXED = (
    "not applicable: token 0 is not one fixed id across the prompts (ids {ids}), so the ring's "
    "logits read 0 by symmetry; give the dataset prepend_bos, or a tokenizer that adds a BOS"
)
UNRECORDED = (
    "not applicable: the summary does not record token 0 (made without the dataset's token "
    "store); summarize with the data store (rule leakage does)"
)


def token0_status(summary: xr.Dataset) -> tuple[float, str]:
    """(``token0_fixed``: 1, 0 or NaN where unrecorded, ``mask_free_status``: measured or why
    the mask-free route is not applicable) of a summary (its ``token0_fixed`` attr, read from
    the data store's tokens by :func:`causalpos.stages.leakage.token0_attrs`)."""
    fixed = summary.attrs.get("token0_fixed")
    if fixed is None:
        return np.nan, UNRECORDED
    if int(fixed) == 1:
        return 1.0, MEASURED
    ids = ", ".join(str(int(x)) for x in np.atleast_1d(summary.attrs.get("token0_ids", [])))
    return 0.0, NOT_FIXED.format(ids=ids + (", ..." if ids.count(",") >= 4 else ""))


def mark_mask_free(df: pd.DataFrame, summary: xr.Dataset) -> pd.DataFrame:
    """``df`` (a components table) with ``token0_fixed`` and ``mask_free_status`` columns, and
    :data:`MASK_FREE_COLUMNS` (estimate and interval) NaN where the route is not applicable."""
    fixed, status = token0_status(summary)
    out = df.copy()
    out["token0_fixed"] = fixed
    out["mask_free_status"] = status
    if status != MEASURED:
        cols = [c + s for c in MASK_FREE_COLUMNS for s in ("", "_lo", "_hi") if c + s in out]
        out[cols] = np.nan
    return out


def mappings_frame(comp: pd.DataFrame) -> pd.DataFrame:
    """``decomposition_mappings``: paper 2's two components on each mapping, a row per
    (condition, landmark, window, ``mapping``) of a pooled components table (``comp``, marked by
    :func:`mark_mask_free`): ``causal_mask``, ``residual_stream`` and ``share_causal_mask`` with
    their intervals, ``total``, and what each mapping's components are (``causal_mask_is``,
    ``residual_stream_is``). The ablation mapping (paper 2's own) reads the mask-free route as
    the residual stream, so its residual stream and share are NaN where that route is not
    applicable (``status``)."""
    keys = [c for c in ("condition", "landmark", "reading", "window", "target") if c in comp]
    keys += [c for c in ("ring_run", "token0_fixed") if c in comp]
    parts = []
    for mapping, (mask, resid, share) in MAPPINGS.items():
        d = comp[keys].copy()
        d.insert(keys.index("window") + 1, "mapping", mapping)
        for name, src in (("causal_mask", mask), ("residual_stream", resid), ("share", share)):
            col = "share_causal_mask" if name == "share" else name
            for s in ("", "_lo", "_hi"):
                d[col + s] = comp[src + s].to_numpy()
        d["total"] = comp["total"].to_numpy()
        d["causal_mask_is"] = _IS[mask]
        d["residual_stream_is"] = _IS[resid]
        if mapping == "ablation" and "mask_free_status" in comp:
            d["status"] = comp["mask_free_status"].to_numpy()
        else:
            d["status"] = MEASURED
        parts.append(d)
    return pd.concat(parts, ignore_index=True)


#: What each mapping's components are, in the routes' names.
_IS = {
    "causal_mask": "direct_mask + indirect_mask",
    "mask_free": "mask_free",
    "direct_mask": "direct_mask",
    "logit": "indirect_mask + mask_free",
}
