"""The ``paper1_llm:`` and ``stats:`` sections: paper 1 §6's (model, dataset, variant) triples, their
stores, labels and random-init twins, and the statistics jobs' params. Pure."""

from __future__ import annotations

from itertools import product

import causalpos.paths as paths
from causalpos.config.common import Section, canonical, check_variant
from causalpos.paper1.settings import IndexSettings


class Paper1Section(Section):
    """Paper 1 §6 on pretrained models, and the bootstrap settings of its statistics."""

    def paper1_triples(self) -> list[tuple[str, str, str]]:
        sec = self.config["paper1_llm"]
        variants = [check_variant("paper1_llm.variants", v) for v in sec["variants"]]
        return [
            (self.check_model(m), self.dataset_spec(d) and d, v)
            for m, d, v in product(sec["models"], sec["datasets"], variants)
        ]

    def paper1_score_stores(self) -> list[str]:
        return [
            paths.SCORE_STORE.format(model=m, dataset=d, variant=v)
            for m, d, v in self.paper1_triples()
        ]

    def paper1_normalized_stores(self) -> list[str]:
        return [
            paths.NORMALIZED_STORE.format(model=m, dataset=d, variant=v)
            for m, d, v in self.paper1_triples()
        ]

    def paper1_labels(self) -> list[str]:
        return ["/".join(t) for t in self.paper1_triples()]

    def paper1_twins(self) -> dict[str, str]:
        """Paper 1 model -> its random-init twin among the paper 1 models: a ``random_init`` model
        ``like:`` it, or ``trained-<v>-init`` of ``trained-<v>`` (same architecture, tokenizer and
        prompts, so their group maps pair)."""
        models = list(dict.fromkeys(self.config["paper1_llm"]["models"]))
        out = {}
        for m in models:
            if m.startswith("trained-"):
                base = m.removesuffix("-init")
                if base != m and base in models:
                    out.setdefault(base, m)
                continue
            spec = self.model_spec(m)
            if spec["source"] == "random_init" and spec.get("like") in models:
                out.setdefault(spec["like"], m)
        return out

    def paper1_enabled(self) -> bool:
        sec = self.config["paper1_llm"]
        return bool(sec["models"] and sec["datasets"])

    def llm_stats_params(self) -> dict:
        """Keyword arguments of ``aggregate_llm_stats``: the index settings and the random-init
        twins."""
        return canonical({**self.settings(IndexSettings), "twins": self.paper1_twins()})
