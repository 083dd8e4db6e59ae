"""The targets of ``rule all``, the tables the scorecard reads, and what each rule writing tables is
given (its provenance: :meth:`TargetsSection.table_jobs`), in a stable order. Pure."""

from __future__ import annotations

import causalpos.catalogue as catalogue
import causalpos.paths as paths
from causalpos.config.common import Section
from causalpos.paper1.settings import BootstrapSettings, TheorySettings
from causalpos.settings import Common, ReportSettings
from causalpos.training.settings import LengthGenSettings


class TargetsSection(Section):
    """``rule all`` and the scorecard's inputs."""

    def scorecard_inputs(self) -> dict[str, str]:
        """Named tables the scorecard reads; absent ones make their rows "not run"."""
        runs = {
            "theory": self.theory_settings(),
            "sim_index": self.sim_settings(),
            "llm_index": self.paper1_enabled(),
            "train_comparison": self.compare_targets(),
            "gram_nearby": self.gram_models(),
        }
        keys = [key for key, run in runs.items() if run]
        if self.leakage_targets():
            keys += catalogue.SCORECARD_PAPER2_TABLES
        return {key: catalogue.SCORECARD_TABLES[key] for key in keys}

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

    def table_jobs(self) -> dict[str, dict]:
        """``{rule: {"outputs", "settings", "inputs"}}`` of every rule writing tables that this
        config runs (one job each): ``settings`` are the params its ``.smk`` rule receives (the
        same resolver calls), ``inputs`` what it is computed from; its tables' provenance."""
        common = self.values(Common)
        wanted = set(self.all_targets()) | set(self.scorecard_inputs().values())
        jobs = {
            "theory_check": (
                [paths.THEORY_TABLE],
                self.settings(TheorySettings),
                self.theory_stores(),
            ),
            "aggregate_sim_stats": (
                [paths.SIM_INDEX_TABLE],
                {"settings": self.sim_settings(), "stats": self.settings(BootstrapSettings)},
                self.sim_stores(),
            ),
            "aggregate_llm_stats": (
                [paths.LLM_INDEX_TABLE],
                {"labels": self.paper1_labels(), "stores": self.paper1_score_stores(),
                 "stats": self.llm_stats_params()},
                self.paper1_score_stores(),
            ),
            "gram_table": (
                [paths.GRAM_NEARBY_TABLE],
                {"models": self.gram_models(), "seed": common.seed},
                [paths.GRAM_STORE.format(model=m) for m in self.gram_models()],
            ),
        }  # fmt: skip
        if paths.TRAIN_LENGTHGEN_TABLE in wanted:
            jobs["length_generalization"] = (
                [paths.LENGTHGEN_STORE, paths.TRAIN_LENGTHGEN_TABLE],
                {"variants": self.train_variants(), "corpus": self.train_heldout_corpus(),
                 **self.settings(LengthGenSettings), "dtype": common.dtype},
                [paths.LENGTHGEN_STORE],  # the table is computed from the job's store
            )  # fmt: skip
        if paths.TRAIN_INDEX_TABLE in wanted:
            inputs = self.compare_inputs()
            jobs["compare_trained"] = (
                [paths.TRAIN_INDEX_TABLE, paths.TRAIN_COMPARISON_TABLE],
                {"variants": self.train_variants(), "twins": self.compare_twin_variants(),
                 "leakage": self.compare_leakage_variants(),
                 "leakage_init": self.compare_leakage_variants("-init"),
                 "stats": self.settings(BootstrapSettings),
                 "stores": {k: inputs[k] for k in ("trained", "init")}},
                [*inputs["trained"], *inputs["init"], *inputs["leakage"],
                 *inputs["leakage_init"], inputs["lengthgen"]],
            )  # fmt: skip
        jobs["aggregate_leakage"] = (
            catalogue.paper2_table_paths(),
            {"labels": self.leakage_pair_labels()},
            [*self.leakage_summary_stores(), *self.position0_stores()],
        )
        tables = {**self.scorecard_inputs(), **self.findings_inputs()}
        jobs["scorecard"] = (
            [paths.SCORECARD_CSV, paths.SCORECARD_MD, paths.FINDINGS_MD],
            {**self.settings(ReportSettings), "materiality": self.leakage_materiality()},
            list(dict.fromkeys(tables.values())),
        )
        return {
            rule: {"outputs": outputs, "settings": settings, "inputs": inputs}
            for rule, (outputs, settings, inputs) in jobs.items()
            if wanted & set(outputs)
        }
