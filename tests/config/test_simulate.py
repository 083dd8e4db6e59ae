"""causalpos.config.simulate: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import pytest

from causalpos.config import ConfigError
from tests.config.configs import resolved


def test_simulation_settings_get_the_sections_defaults(default):
    assert default.sim_setting("rope_a050") == {
        "norm": "l2",
        "scaling": "none",
        "rope": True,
        "causal": True,
        "residual": True,
        "n_samples": 100000,
        "seq_len": 50,
        "dim": 64,
        "n_layers": 4,
        "n_groups": 20,
        "rope_theta": 10000.0,
        "alpha": 0.5,
    }
    params = default.sim_setting_params("ln_d_a020")
    assert list(params) == sorted(params)
    assert (params["norm"], params["scaling"], params["alpha"]) == ("layernorm", "d", 0.2)


def test_theory_applies_to_the_l2_causal_settings_only(default, smoke):
    assert default.theory_settings() == ["l2_a000", "l2_a020", "l2_a040", "l2_a060", "l2_a080"]
    assert smoke.theory_stores() == ["results/sim/l2_a000.zarr", "results/sim/l2_a020.zarr"]
    assert (
        len(default.sim_stores()) == 12
        and default.sim_stores()[-1] == "results/sim/rope_bidir_a000.zarr"
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["figures"]["simulation"]["fig2"].update(settings=["nope"]),
            "simulate.settings has no setting 'nope'",
        ),
        (
            lambda c: c["simulate"].update(dim=33),
            "simulate.settings.rope_a000: rope needs an even dim, got dim=33",
        ),
        (
            lambda c: c["simulate"].update(n_groups=1000),
            "simulate.settings.l2_a000: n_groups=1000 exceeds n_samples=512",
        ),
    ],
)
def test_bad_simulation_config_names_the_key(edit, message):
    with pytest.raises(ConfigError, match=message):
        resolved("configs/smoke.yaml", edit).all_targets()
