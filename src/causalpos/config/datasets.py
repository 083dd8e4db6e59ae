"""The ``datasets:`` section: dataset specs with their defaults, data stores, which models run on a
dataset and the inputs of ``sample_sequences``. Pure: reads nothing but the config dict."""

from __future__ import annotations

from typing import Any

import causalpos.paths as paths
from causalpos.config.common import ConfigError, Section, canonical
from causalpos.settings import Common


class DatasetsSection(Section):
    """Datasets, their stores and the models that share their documents."""

    def dataset_spec(self, name: str) -> dict:
        if name not in self.config["datasets"]:
            raise ConfigError(
                f"datasets: no dataset {name!r}; defined: {sorted(self.config['datasets'])}"
            )
        spec = dict(self.config["datasets"][name])
        if spec.get("prepend_bos", False) is False:
            # off (the default) is today's behaviour: left out of the params, so the stores
            # sampled before the option existed stay up to date (id 0 is not "off")
            spec.pop("prepend_bos", None)
        spec.setdefault("mode", "first")
        spec.setdefault("seed", self.values(Common).seed)
        return spec

    def dataset_spec_params(self, name: str) -> dict:
        return canonical(self.dataset_spec(name))

    def data_store(self, model: str, dataset: str) -> str:
        return paths.DATA_STORE.format(dataset=dataset, tokenizer=self.tokenizer_of(model))

    def dataset_models(self, dataset: str) -> list[str]:
        """Every model that runs on ``dataset``: paper 1, paper 2, the comparison, the Gram panels."""
        models = {m for m, d, _ in self.paper1_triples() if d == dataset}
        models |= {m for m, d in self.leakage_pairs() if d == dataset}
        sec = self.compare_section()
        if sec and sec["dataset"] == dataset:
            models |= {f"trained-{v}" for v in self.train_variants()}
            models |= {f"trained-{v}-init" for v in self.compare_twin_variants()}
        models |= {m for m in self.gram_models() if self.gram_dataset(m) == dataset}
        return sorted(models)

    def document_peers(self, dataset: str, tokenizer: str) -> list[str]:
        """Tokenizer directories whose documents a ``first``-mode draw must also fit, so that
        every model running on ``dataset`` gets the same documents (paper 1 §6: one document set,
        each document at least ``seq_len`` tokens long under every model's tokenizer). Empty when
        one tokenizer serves them all (or in ``chunks`` mode, whose chunks are per tokenizer)."""
        spec = self.dataset_spec(dataset)
        if spec["mode"] != "first" or spec["corpus"].get("type") == "random_tokens":
            return []
        dirs = {self.tokenizer_dir(m) for m in self.dataset_models(dataset)}
        return sorted(dirs - {self.tokenizer_dir(tokenizer)})

    def sample_inputs(self, dataset: str, tokenizer: str) -> dict[str, Any]:
        """Inputs of ``sample_sequences``: the tokenizer's model, the other tokenizers whose
        documents the draw must fit (:meth:`document_peers`) and the corpus's local files
        (:meth:`corpus_source_files`), where there are any."""
        inputs = {
            "tokenizer": self.tokenizer_dir(tokenizer),
            "peers": self.document_peers(dataset, tokenizer),
            "corpus": self.corpus_source_files(dataset),
        }
        return {k: v for k, v in inputs.items() if v}
