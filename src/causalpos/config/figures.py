"""The ``figures:`` section: the simulation figures and every figure's paths, one per configured
format. Pure: reads nothing but the config dict."""

from __future__ import annotations

import causalpos.paths as paths
from causalpos.config.common import Section, canonical


class FiguresSection(Section):
    """Figure specs and paths."""

    def figure_paths(self, stem: str) -> list[str]:
        """Figure ``stem`` (:data:`causalpos.paths.FIGURE`) in every configured format."""
        return paths.figures(stem, self.config["figures"]["formats"])

    def sim_figure(self, name: str) -> dict:
        spec = self.config["figures"]["simulation"][name]
        for s in spec["settings"]:
            self.sim_setting(s)  # raises a ConfigError naming the missing setting
        return spec

    def sim_figure_params(self, name: str) -> dict:
        return canonical(self.sim_figure(name))

    def sim_figure_stores(self, name: str) -> list[str]:
        return [paths.SIM_STORE.format(setting=s) for s in self.sim_figure(name)["settings"]]
