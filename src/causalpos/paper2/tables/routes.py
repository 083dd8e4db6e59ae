"""The decomposition's three routes in the tables (:mod:`causalpos.paper2.decomposition`): where
the mask-free route applies (:func:`mark_mask_free`: token 0 one fixed id across the prompts) and
paper 2's two components on each mapping, a row per mapping (:func:`mappings_frame`, table
``decomposition_mappings``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.paper2.decomposition import MAPPINGS
from causalpos.paper2.labels import MEASURED, token0_status

#: The components that read the mask-free route (the ring run's logits alone) and the shares
#: made of it; "not applicable" (NaN) where token 0 is not fixed. The indirect route (causal
#: minus ring logits) and the aliases keep their numbers.
MASK_FREE_COLUMNS = ("mask_free", "share_mask_free", "share_causal_mask_ablation")


def mark_mask_free(df: pd.DataFrame, summary: xr.Dataset) -> pd.DataFrame:
    """``df`` (a components table) with ``token0_fixed`` and ``mask_free_status`` columns, and
    :data:`MASK_FREE_COLUMNS` (estimate and interval) NaN where the route is not applicable."""
    fixed, status = token0_status(summary.attrs)
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
        marked = mapping == "ablation" and "mask_free_status" in comp  # reads the mask-free route
        d["status"] = comp["mask_free_status"].to_numpy() if marked else MEASURED
        parts.append(d)
    return pd.concat(parts, ignore_index=True)


#: What each mapping's components are, in the routes' names.
_IS = {
    "causal_mask": "direct_mask + indirect_mask",
    "mask_free": "mask_free",
    "direct_mask": "direct_mask",
    "logit": "indirect_mask + mask_free",
}
