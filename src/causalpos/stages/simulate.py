"""Stages of paper 1's parameter-free experiments: one simulation setting, the theory check."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from causalpos.io.store import open_dataset, write_dataset
from causalpos.paper1 import simulate as sim
from causalpos.paper1.theory import theory_table

log = logging.getLogger("causalpos.stages.simulate")


def simulate(out, setting: Mapping, *, name: str, seed: int, attrs: Mapping | None = None):
    """Rule ``simulate``: :func:`causalpos.paper1.simulate.simulate` of one setting into ``out``."""
    ds = sim.simulate(**dict(setting), seed=seed, progress=True)
    ds.attrs["setting"] = name
    ds.attrs.update(dict(attrs or {}))
    write_dataset(ds, out)
    return ds


def theory_check(sim_stores: Sequence[str], out, *, n_positions: int):
    """Rule ``theory_check``: closed form vs exact Gram vs the simulation stores (by alpha), CSV."""
    sims = {}
    for path in sim_stores:
        ds = open_dataset(path)
        sims[float(ds.attrs["alpha"])] = ds
    table = theory_table(sims, n=n_positions)
    table.to_csv(out, index=False)
    log.info("\n%s", table.groupby("alpha")["abs_diff"].describe())
    return table
