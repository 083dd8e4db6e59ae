"""The ``figures:`` section: the simulation figures, every figure's paths (one per configured
format) and the display names each figure rule is given (``figures.labels`` over
:mod:`causalpos.figures.labels`). Pure."""

from __future__ import annotations

from collections.abc import Iterable

import causalpos.paths as paths
from causalpos.config.common import ConfigError, Section, canonical
from causalpos.figures.labels import dataset_name, model_name


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

    def display_names(
        self, models: Iterable[str] = (), datasets: Iterable[str] = ()
    ) -> dict[str, str]:
        """Name -> display name of ``models`` and ``datasets`` (the ones a figure rule draws, so
        that a model added elsewhere reruns none of its figures): ``figures.labels``, else the
        label table's (a ``random_init`` model ``like:`` another is that model's "random init"; a
        model trained here is named by its positional type), else the name itself."""
        labels = self.value("figures.labels", None) or {}
        out = {}
        for m in dict.fromkeys(models):
            like = positional = None
            if m.startswith("trained-"):
                v = m.removeprefix("trained-").removesuffix("-init")
                spec = (self.config["train"].get("variants") or {}).get(v) or {}
                positional = spec.get("positional", v)
            elif m in self.config["models"]:
                spec = self.config["models"][m]
                if spec.get("source") == "random_init" and spec.get("like"):
                    like = spec["like"]
            out[m] = model_name(m, like=like, positional=positional, labels=labels)
        for d in dict.fromkeys(datasets):
            out[d] = dataset_name(d, labels)
        return canonical(out)

    def paper1_display_names(self) -> dict[str, str]:
        """The display names of paper 1's models and datasets (rules ``plot_llm_*``)."""
        triples = self.paper1_triples()
        return self.display_names([m for m, _, _ in triples], [d for _, d, _ in triples])

    def train_display_names(self) -> dict[str, str]:
        """The display names of the models trained here, their init twins and the comparison's
        dataset (rules ``plot_loss_curves``, ``plot_loss_by_position``, ``plot_train_comparison``)."""
        variants = self.train_variants()
        models = [f"trained-{v}{s}" for v in variants for s in ("", "-init")]
        sec = self.compare_section()
        return self.display_names(models, [sec["dataset"]] if sec else [])

    def check_figure_labels(self) -> None:
        """Every name under ``figures.labels`` is a configured model or dataset, or a model
        trained here (a misspelt name would label nothing without a word)."""
        known = set(self.config["models"]) | set(self.config["datasets"])
        trained = set(self.config["train"].get("variants") or {})
        bad = [
            n
            for n in (self.value("figures.labels", None) or {})
            if n not in known
            and not (
                n.startswith("trained-")
                and n.removeprefix("trained-").removesuffix("-init") in trained
            )
        ]
        if bad:
            raise ConfigError(
                f"figures.labels: {bad} name no model or dataset of this config; the names it "
                f"may label: models {sorted(self.config['models'])}, datasets "
                f"{sorted(self.config['datasets'])}, trained-<variant>[-init] of train.variants "
                f"{sorted(trained)}. Fix: correct the name or remove the entry"
            )
