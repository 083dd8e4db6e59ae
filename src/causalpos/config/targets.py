"""The targets of ``rule all`` and the tables the scorecard reads: every section's outputs, in a
stable order. Pure: reads nothing but the config dict."""

from __future__ import annotations

from causalpos.config.common import Section


class TargetsSection(Section):
    """``rule all`` and the scorecard's inputs."""

    def scorecard_inputs(self) -> dict[str, str]:
        """Named tables the scorecard reads; absent ones make their rows "not run"."""
        inputs = {}
        if self.theory_settings():
            inputs["theory"] = "results/sim/theory.csv"
        if self.sim_settings():
            inputs["sim_index"] = "results/stats/simulation_index.csv"
        if self.paper1_enabled():
            inputs["llm_index"] = "results/stats/llm_index.csv"
        if self.compare_targets():
            inputs["train_comparison"] = "results/stats/train_comparison.csv"
        if self.gram_models():
            inputs["gram_nearby"] = "results/stats/gram_nearby.csv"
        if self.leakage_targets():
            for name in (
                "bos_effects",
                "position0",
                "position0_probes",
                "sink_heads",
                "baseline_comparison",
                "depth_trend",
                "headline",
                "decomposition_headline",
                "decomposition_components",
                "controls",
                "observational_split",
                "bos_headline",
                "scale_contrast",
            ):
                inputs[name] = f"results/stats/paper2_{name}.csv"
        return inputs

    def all_targets(self) -> list[str]:
        """The inputs of ``rule all``: every output the config asks for, in a stable order."""
        targets = []
        if self.sim_settings():
            targets += self.sim_stores()
            targets.append("results/stats/simulation_index.csv")
            for fig in self.config["figures"]["simulation"]:
                self.sim_figure(fig)
                targets += self.figure_paths(f"sim_{fig}")
        if self.theory_settings():
            targets.append("results/sim/theory.csv")
        targets += self.figure_paths("fig1_theory")
        if self.paper1_enabled():
            targets += self.paper1_normalized_stores()
            targets.append("results/stats/llm_index.csv")
            targets += self.figure_paths("llm_fig5")
            for m, d, v in self.paper1_triples():
                targets += self.figure_paths(f"llm_appE_{m}_{d}_{v}")
        targets += self.train_targets()
        targets += self.leakage_targets()
        targets += ["results/report/scorecard.csv", "results/report/scorecard.md"]
        return targets
