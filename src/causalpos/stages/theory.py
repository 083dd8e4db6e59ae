"""Stage ``theory_check``: paper 1's closed form vs an exact-Gram computation vs the simulations."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from causalpos.io.provenance import stamp_table
from causalpos.io.store import open_dataset
from causalpos.paper1.theory import theory_table

log = logging.getLogger("causalpos.stages.theory")


def theory_check(sim_stores: Sequence[str], out, *, n_positions: int):
    """Rule ``theory_check``: closed form vs exact Gram vs the simulation stores (by alpha), CSV."""
    sims = {float(ds.attrs["alpha"]): ds for ds in map(open_dataset, sim_stores)}
    table = theory_table(sims, n=n_positions)
    table.to_csv(out, index=False)
    stamp_table(out)
    log.info("\n%s", table.groupby("alpha")["abs_diff"].describe())
    return table
