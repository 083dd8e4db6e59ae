"""The ``figures:`` section: the simulation figures and every figure's paths, one per configured
format. Pure: reads nothing but the config dict."""

from __future__ import annotations

from causalpos.config.common import Section, canonical, store_paths


class FiguresSection(Section):
    """Figure specs and paths."""

    def figure_paths(self, stem: str) -> list[str]:
        """``results/figures/{stem}.{fmt}`` for every configured format."""
        return [f"results/figures/{stem}.{fmt}" for fmt in self.config["figures"]["formats"]]

    def sim_figure(self, name: str) -> dict:
        spec = self.config["figures"]["simulation"][name]
        for s in spec["settings"]:
            self.sim_setting(s)  # raises a ConfigError naming the missing setting
        return spec

    def sim_figure_params(self, name: str) -> dict:
        return canonical(self.sim_figure(name))

    def sim_figure_stores(self, name: str) -> list[str]:
        return store_paths("results/sim/{}.zarr", self.sim_figure(name)["settings"])
