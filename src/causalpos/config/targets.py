"""The targets of ``rule all`` and the tables the scorecard reads: every section's outputs, in a
stable order. Pure: reads nothing but the config dict."""

from __future__ import annotations

import causalpos.paths as paths
from causalpos.config.common import Section


class TargetsSection(Section):
    """``rule all`` and the scorecard's inputs."""

    def scorecard_inputs(self) -> dict[str, str]:
        """Named tables the scorecard reads; absent ones make their rows "not run"."""
        keys = []
        if self.theory_settings():
            keys.append("theory")
        if self.sim_settings():
            keys.append("sim_index")
        if self.paper1_enabled():
            keys.append("llm_index")
        if self.compare_targets():
            keys.append("train_comparison")
        if self.gram_models():
            keys.append("gram_nearby")
        if self.leakage_targets():
            keys += paths.SCORECARD_PAPER2_TABLES
        return {key: paths.SCORECARD_TABLES[key] for key in keys}

    def findings_inputs(self) -> dict[str, str]:
        """The tables the findings page may cite, by input name ``table_<file stem>``: every
        table this config writes (the scorecard aside: it is the same rule's output)."""
        stats = paths.PAPER2_TABLE.rsplit("/", 1)[0]
        tables = [
            t
            for t in self.all_targets()
            if t == paths.THEORY_TABLE or (t.endswith(".csv") and t.rsplit("/", 1)[0] == stats)
        ]
        tables += list(self.scorecard_inputs().values())
        stem = {t: t.rsplit("/", 1)[-1].removesuffix(".csv") for t in tables}
        return {f"table_{stem[t]}": t for t in dict.fromkeys(tables)}

    def all_targets(self) -> list[str]:
        """The inputs of ``rule all``: every output the config asks for, in a stable order."""
        targets = []
        if self.sim_settings():
            targets += self.sim_stores()
            targets.append(paths.SIM_INDEX_TABLE)
            for fig in self.config["figures"]["simulation"]:
                self.sim_figure(fig)
                targets += self.figure_paths(paths.SIM_FIGURE.format(figure=fig))
        if self.theory_settings():
            targets.append(paths.THEORY_TABLE)
        targets += self.figure_paths(paths.FIG1_FIGURE)
        if self.paper1_enabled():
            targets += self.paper1_normalized_stores()
            targets.append(paths.LLM_INDEX_TABLE)
            targets += self.figure_paths(paths.LLM_FIG5_FIGURE)
            for m, d, v in self.paper1_triples():
                stem = paths.LLM_APPENDIX_FIGURE.format(model=m, dataset=d, variant=v)
                targets += self.figure_paths(stem)
        targets += self.train_targets()
        targets += self.leakage_targets()
        targets += [paths.SCORECARD_CSV, paths.SCORECARD_MD, paths.FINDINGS_MD]
        return targets
