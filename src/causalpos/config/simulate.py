"""The ``simulate:`` section (paper 1 §2, §4): simulation settings with the section's defaults, the
settings theory applies to, and their stores. Pure."""

from __future__ import annotations

import causalpos.paths as paths
from causalpos.config.common import ConfigError, Section, canonical
from causalpos.paper1.settings import SETTING_KEYS, SimulationSettings

# Simulation settings: each setting's own keys over the section's defaults (the setting keys'
# defaults are causalpos.paper1.settings.SimulationSettings', declared there once).
SECTION_KEYS = ("n_samples", "seq_len", "dim", "n_layers", "n_groups", "rope_theta")
SIM_SETTING_DEFAULTS = dict(SETTING_KEYS)


class SimulateSection(Section):
    """Simulation settings and their stores."""

    def sim_settings(self) -> list[str]:
        return list(self.config["simulate"]["settings"])

    def sim_setting(self, name: str) -> dict:
        """Full parameter set of simulation setting ``name`` (section defaults filled in)."""
        section = self.config["simulate"]
        if name not in section["settings"]:
            raise ConfigError(
                f"simulate.settings has no setting {name!r}; defined: {sorted(section['settings'])}"
            )
        shared = self.values(SimulationSettings, alpha=0.0)  # the section's keys (alpha: each's)
        params = dict(SIM_SETTING_DEFAULTS)
        params.update({k: getattr(shared, k) for k in SECTION_KEYS})
        params.update(section["settings"][name])
        if params["rope"] and params["dim"] % 2:
            raise ConfigError(
                f"simulate.settings.{name}: rope needs an even dim, got dim={params['dim']}"
            )
        if params["n_groups"] > params["n_samples"]:
            raise ConfigError(
                f"simulate.settings.{name}: n_groups={params['n_groups']} exceeds "
                f"n_samples={params['n_samples']}"
            )
        return params

    def sim_setting_params(self, name: str) -> dict:
        return canonical(self.sim_setting(name))

    def theory_settings(self) -> list[str]:
        """Settings that are paper 1's Eq. 1 exactly (L2, no RoPE, causal, residual): theory applies."""
        out = []
        for name in self.sim_settings():
            p = self.sim_setting(name)
            if p["norm"] == "l2" and not p["rope"] and p["causal"] and p["residual"]:
                out.append(name)
        return out

    def theory_stores(self) -> list[str]:
        return [paths.SIM_STORE.format(setting=s) for s in self.theory_settings()]

    def sim_stores(self) -> list[str]:
        return [paths.SIM_STORE.format(setting=s) for s in self.sim_settings()]
