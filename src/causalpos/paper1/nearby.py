"""Paper 1 Fig. 3 (f)/(i): the "nearby keys score higher" index of a Gram or score map and its
table over models, torch-free (read by the light ``gram_table`` job; the maps themselves come
from :mod:`causalpos.paper1.gram`)."""

from __future__ import annotations

import numpy as np

from causalpos.inference import bounds

#: Panels whose "nearby keys score higher" index is kept per sample (Fig. 3 (f) and (i)).
NEARBY_PANELS = ("f", "i")


def nearby_index(maps) -> np.ndarray:
    """Fig. 3 (f)/(i) "nearby keys score higher", per map: the mean over query rows i ≥ 3 of the
    Pearson correlation between the key index j and Z(i, j) over keys 1 ≤ j < i (the sink key 0
    and the diagonal left out; masked / non-finite cells skipped). ``maps`` (..., T, T) ->
    (...) in [−1, 1]: 1 when every row increases linearly toward the diagonal, ≈ 0 when a row
    does not depend on j (NaN where no row has two finite keys of different value)."""
    z = np.asarray(maps, dtype=np.float64)
    T = z.shape[-1]
    i, j = np.indices((T, T))
    keep = (j >= 1) & (j < i) & (i >= 3)
    ok = keep & np.isfinite(z)
    w = ok.astype(np.float64)
    zz = np.where(ok, z, 0.0)
    jj = np.broadcast_to(j.astype(np.float64), z.shape)
    n = w.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mj = (w * jj).sum(-1) / n
        mz = zz.sum(-1) / n
        dj = np.where(ok, jj - mj[..., None], 0.0)
        dz = np.where(ok, zz - mz[..., None], 0.0)
        r = (dj * dz).sum(-1) / np.sqrt((dj * dj).sum(-1) * (dz * dz).sum(-1))
    r = np.where((n >= 2) & np.isfinite(r), r, np.nan)
    valid = np.isfinite(r).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(valid > 0, np.nansum(r, axis=-1) / valid, np.nan)


def nearby_table(stores, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95):
    """Fig. 3 (f)/(i) per model: the sample mean of :func:`nearby_index` with a percentile
    bootstrap CI over samples (seeded by ``seed``, the store's seed and the panel); ``stores``:
    model -> Gram store (those without ``nearby`` get no row)."""
    import pandas as pd

    rows = []
    for model, ds in stores.items():
        if "nearby" not in ds:
            continue
        for panel in ds["nearby_panel"].values:
            x = ds["nearby"].sel(nearby_panel=panel).values.astype(np.float64)
            x = x[np.isfinite(x)]
            if x.size == 0:
                continue
            # one generator per model and panel: a row's CI does not depend on the other rows
            rng = np.random.default_rng([seed, int(ds.attrs.get("seed", 0)), ord(str(panel)[0])])
            idx = rng.integers(0, x.size, (n_boot, x.size))
            boot = x[idx].mean(1)
            lo, hi = bounds(boot, level)
            rows.append(
                {
                    "model": model,
                    "panel": str(panel),
                    "nearby": float(x.mean()),
                    "nearby_lo": float(lo),
                    "nearby_hi": float(hi),
                    "n_samples": int(x.size),
                    "rope_identity": bool(ds.attrs.get("rope_identity", False)),
                }
            )
    cols = ["model", "panel", "nearby", "nearby_lo", "nearby_hi", "n_samples", "rope_identity"]
    return pd.DataFrame(rows, columns=cols)
