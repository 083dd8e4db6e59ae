"""Stage of rule ``gram_table``: Fig. 3 (f)/(i)'s "nearby keys score higher" index of every
Gram store, with CIs, as one CSV (its own module: the cheap table shares no stage code with the
model-loading ``gram_panels``)."""

from __future__ import annotations

import logging
from pathlib import Path

from causalpos.io.provenance import stamp_table
from causalpos.io.store import open_dataset
from causalpos.paper1.nearby import nearby_table


def gram_table(stores: dict, out_csv, *, seed: int = 0, n_boot: int = 2000):
    """``gram_table`` rule: :func:`causalpos.paper1.nearby.nearby_table` of every Gram store
    (model -> path) written to ``out_csv``."""
    df = nearby_table({m: open_dataset(p) for m, p in stores.items()}, n_boot=n_boot, seed=seed)
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    stamp_table(out_csv)
    logging.getLogger(__name__).info("nearby index of %d model(s) -> %s", len(stores), out_csv)
    return df
