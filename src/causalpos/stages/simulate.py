"""Stage ``simulate``: one setting of paper 1's parameter-free decoder simulation."""

from __future__ import annotations

import gc
from collections.abc import Mapping

from causalpos.io.store import write_dataset
from causalpos.paper1 import simulate as sim
from causalpos.paper1.settings import SimulationSettings


def simulate(out, setting: Mapping, *, name: str, seed: int, attrs: Mapping | None = None):
    """Rule ``simulate``: :func:`causalpos.paper1.simulate.run_simulation` of one setting into ``out``."""
    # The imports (torch, xarray) live to the end of the job: frozen, they are skipped by the
    # collections during zarr's import and by the interpreter's final one (0.4-0.5 CPU-s a job)
    gc.freeze()
    settings = SimulationSettings.from_params({**dict(setting), "seed": seed})
    ds = sim.run_simulation(settings, progress=True)
    ds.attrs["setting"] = name
    ds.attrs.update(dict(attrs or {}))
    write_dataset(ds, out)
    return ds
