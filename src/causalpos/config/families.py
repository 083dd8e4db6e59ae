"""Jobs that serve a whole family: what one job of each light rule reads and writes.

A light rule (a figure, the position-0 analysis) costs a job's start-up (1-3 CPU-s) for under a
second of work per item, so it runs once per family. Each family is a dict, item -> what that item
reads and writes; the rule's inputs and outputs are the union over items (:func:`family_paths`)
and its params the dict itself, so a figure option reruns the figure jobs alone. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import causalpos.paths as paths
from causalpos.config.common import Section, canonical


def family_paths(family: Mapping[str, Mapping], *keys: str) -> list[str]:
    """Every path under ``keys`` of every item of ``family``, each once, in item order (a key's
    value is a path or a list of paths)."""
    out: list[str] = []
    for item in family.values():
        for key in keys:
            value = item[key]
            out += [value] if isinstance(value, str) else list(value)
    return list(dict.fromkeys(out))


def score_dirs(stores: Iterable[str]) -> list[str]:
    """The directories ``results/scores/{model}/{dataset}`` (rule ``extract_scores``' or
    ``merge_scores``' outputs) holding the variant stores ``stores``, each once, in order."""
    return list(dict.fromkeys(s.rsplit("/", 1)[0] for s in stores))


#: Figure kind -> the files its ``plot_paper2_<kind>`` job draws per experiment, by output key.
EXPERIMENT_FIGURES = {
    "layers": {"outputs": paths.PAPER2_LAYERS_FIGURE, "claim1": paths.PAPER2_CLAIM1_FIGURE},
    "shares": {"outputs": paths.PAPER2_SHARES_FIGURE, "routes": paths.PAPER2_ROUTES_FIGURE},
    "position0": {"outputs": paths.PAPER2_POSITION0_FIGURE},
}


class FamiliesSection(Section):
    """One job per family of light jobs."""

    @staticmethod
    def score_dir(model: str, dataset: str) -> str:
        """The pair's final stores, ``{variant}.zarr`` of every variant: rule ``extract_scores``'
        output where the dataset is one shard, ``merge_scores``' where it is several."""
        return paths.SCORE_DIR.format(model=model, dataset=dataset)

    def merge_variants(self, model: str, dataset: str) -> list[str]:
        """The variant stores of (model, dataset) that ``merge_scores`` (or, for a dataset of one
        shard, ``extract_scores``) writes: every variant its extraction runs."""
        return self.extraction_variants(model, dataset)

    def sim_figure_family(self) -> dict[str, dict]:
        """Simulation figure -> its stores, its files and its spec (rule ``plot_simulation``)."""
        if not self.sim_settings():
            return {}
        return canonical(
            {
                name: {
                    "stores": self.sim_figure_stores(name),
                    "outputs": self.figure_paths(paths.SIM_FIGURE.format(figure=name)),
                    "spec": self.sim_figure_params(name),
                }
                for name in self.config["figures"]["simulation"]
            }
        )

    def llm_appendix_family(self) -> dict[str, dict]:
        """``model/dataset/variant`` -> its normalized store and App. E files (rule
        ``plot_llm_appendix``)."""
        if not self.paper1_enabled():
            return {}
        return canonical(
            {
                "/".join((m, d, v)): {
                    "store": paths.NORMALIZED_STORE.format(model=m, dataset=d, variant=v),
                    "outputs": self.figure_paths(
                        paths.LLM_APPENDIX_FIGURE.format(model=m, dataset=d, variant=v)
                    ),
                }
                for m, d, v in self.paper1_triples()
            }
        )

    def gram_figure_family(self) -> dict[str, dict]:
        """Model -> its display name, Gram-panel store and Fig. 3 / Fig. 8 files (rule
        ``plot_gram_figures``)."""
        return canonical(
            {
                m: {
                    "name": self.display_names([m])[m],
                    "store": paths.GRAM_STORE.format(model=m),
                    "fig3": self.figure_paths(paths.TRAIN_FIG3_FIGURE.format(model=m)),
                    "fig8": self.figure_paths(paths.TRAIN_FIG8_FIGURE.format(model=m)),
                }
                for m in self.gram_models()
            }
        )

    def paper2_heads_family(self) -> dict[str, dict]:
        """``model/dataset`` -> its summary store, head-map files and display names
        (``plot_paper2_heads``)."""
        if not self.leakage_experiments():
            return {}
        return canonical(
            {
                self.leakage_label((m, d)): {
                    "store": paths.LEAKAGE_STORE.format(model=m, dataset=d),
                    "outputs": self.figure_paths(
                        paths.PAPER2_HEADS_FIGURE.format(model=m, dataset=d)
                    ),
                    "names": self.display_names([m], [d]),
                }
                for m, d in self.leakage_pairs()
            }
        )

    def paper2_experiment_family(self, kind: str) -> dict[str, dict]:
        """Experiment -> its stores, labels, display names and files of figure ``kind`` (``layers``,
        ``shares``: only with a decomposition, or ``position0``; rules ``plot_paper2_<kind>``).
        The ``layers`` job also draws claim 1 by layer (``claim1``), the ``shares`` job §3's
        three routes by layer (``routes``)."""
        out = {}
        for name in self.leakage_experiments():
            if kind == "shares" and not self.experiment_has_decomposition(name):
                continue
            stores = (
                self.experiment_position0_stores(name)
                if kind == "position0"
                else self.experiment_summary_stores(name)
            )
            pairs = self.leakage_experiment(name)
            out[name] = {
                "stores": stores,
                "labels": self.experiment_labels(name),
                "names": self.display_names([m for m, _ in pairs], [d for _, d in pairs]),
                **{
                    key: self.figure_paths(stem.format(experiment=name))
                    for key, stem in EXPERIMENT_FIGURES[kind].items()
                },
            }
        return canonical(out)

    def position0_family(self) -> dict[str, dict]:
        """``model/dataset`` -> what rule ``position0`` reads and writes for the pair: its
        conditions and their merged stores (the ``causal`` store also gives the sink heads), the
        data store and the output store."""
        if not self.leakage_experiments():
            return {}
        out = {}
        for m, d in self.leakage_pairs():
            conditions = self.position0_conditions(m, d)
            out[self.leakage_label((m, d))] = {
                "model": m,
                "dataset": d,
                # two lists, not a dict: the conditions' order is the output's (canonical
                # sorts dict keys)
                "conditions": conditions,
                "stores": self.position0_inputs(m, d),
                "sink": paths.SCORE_STORE.format(model=m, dataset=d, variant="causal"),
                "data": self.data_store(m, d),
                "output": paths.POSITION0_STORE.format(model=m, dataset=d),
            }
        return canonical(out)
