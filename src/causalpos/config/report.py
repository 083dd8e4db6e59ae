"""What ``snakemake --report`` shows of each figure and table: which file of a figure drawn in
several formats (:func:`shown`), and the names each item's labels and caption carry
(:meth:`ReportSection.report_names`). A family job has no wildcards, so its figures' captions are
rendered from these names (:func:`causalpos.io.captions.item_caption`). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from causalpos.config.common import ConfigError, Section

#: The labels every report item carries, in the order the report's tables show them.
LABELS = ("figure", "model", "dataset")


def shown(paths: Sequence[str]) -> list[str]:
    """The files of one figure the report shows: its PNG where the config draws one, else its
    first format; the other formats (a PDF to print) stay outputs on disk, not report items."""
    png = [p for p in paths if str(p).endswith(".png")]
    return png[:1] or list(paths[:1])


def labels(names: dict[str, str]) -> dict[str, str]:
    """The report labels of an item (:data:`LABELS`) from its :meth:`~ReportSection.report_names`."""
    return {k: names[k] for k in LABELS}


class ReportSection(Section):
    """The report's labels and the names its per-item captions say."""

    def report_names(self, kind: str, item: str, figure: str) -> dict[str, str]:
        """The names of item ``item`` (a family dict's key) of figure family ``kind``: ``figure``
        (what it shows, e.g. "App. E"), ``model``, ``dataset`` and, where they apply, ``variant``
        and ``experiment``."""
        if kind == "simulation":
            settings = self.config["figures"]["simulation"][item]["settings"]
            return {
                "figure": f"{figure} {item}",
                "model": "parameter-free decoder",
                "dataset": ", ".join(settings),
            }
        if kind == "llm_appendix":
            model, dataset, variant = item.split("/")
            return {"figure": figure, "model": model, "dataset": dataset, "variant": variant}
        if kind == "gram":
            dataset = self.gram_dataset(item) or "held-out chapters (train.gram)"
            return {"figure": figure, "model": item, "dataset": dataset}
        if kind == "paper2_heads":
            model, dataset = item.split("/")
            return {"figure": figure, "model": model, "dataset": dataset}
        if kind == "paper2_experiment":
            exp = self.leakage_experiments()[item]
            return {
                "figure": figure,
                "model": ", ".join(exp["models"]),
                "dataset": ", ".join(exp["datasets"]),
                "experiment": item,
            }
        raise ConfigError(
            f"report_names: no figure family {kind!r}; known: simulation, llm_appendix, gram, "
            "paper2_heads, paper2_experiment"
        )

    def report_labels(
        self, figure: str, model: str | Sequence[str] = "", dataset: str | Sequence[str] = ""
    ) -> dict[str, str]:
        """The labels of a report item that is not one of a family's (a table, a figure of
        several models): ``figure``, and ``model`` / ``dataset`` (names, or lists of them;
        default: every model / dataset)."""
        model = model if isinstance(model, str) else ", ".join(model)
        dataset = dataset if isinstance(dataset, str) else ", ".join(dataset)
        return {
            "figure": figure,
            "model": model or "every model",
            "dataset": dataset or "every dataset",
        }

    def paper1_report_labels(self, figure: str) -> dict[str, str]:
        """The labels of a figure of paper 1's models on its datasets (``paper1_llm.models``,
        ``paper1_llm.datasets``)."""
        sec = self.config["paper1_llm"]
        return self.report_labels(figure, sec["models"], sec["datasets"])

    def trained_labels(self, figure: str, dataset: str = "") -> dict[str, str]:
        """The labels of a figure of every model trained here, on ``dataset`` (default: the
        comparison's, ``train.compare.dataset``)."""
        dataset = dataset or (self.compare_section() or {}).get("dataset", "")
        return self.report_labels(figure, "every variant trained here", dataset)
