"""The ``models:`` section: model specs, which models a random-init model needs first, and whose
tokenizer a model uses. Pure: reads nothing but the config dict."""

from __future__ import annotations

import causalpos.paths as paths
from causalpos.config.common import ConfigError, Section, canonical, names_pattern
from causalpos.settings import Common


class ModelsSection(Section):
    """Configured models, their directories and tokenizers."""

    def configured_models(self) -> list[str]:
        return list(self.config["models"])

    def model_wildcard_pattern(self) -> str:
        """Regex of the model names ``prepare_model`` builds (trained-* come from train_model)."""
        return names_pattern(self.configured_models())

    def model_spec(self, name: str) -> dict:
        if name not in self.config["models"]:
            raise ConfigError(f"models: no model {name!r}; defined: {self.configured_models()}")
        return self.config["models"][name]

    def check_model(self, name: str) -> str:
        """A model an analysis names must be configured, or be one the pipeline trains."""
        if not name.startswith("trained-"):
            self.model_spec(name)
        return name

    def model_spec_params(self, name: str) -> dict:
        return canonical(self.model_spec(name))

    def prepare_model_inputs(self, name: str) -> list[str]:
        """A random_init model `like:` (or taking the `tokenizer:` of) another needs it first; a
        model prepared from the user's files needs them (:meth:`model_source_files`). A
        `tokenizer:` naming a model trained here needs the trained tokenizer only
        (``train_tokenizer``'s directory), not the training run."""
        spec = self.model_spec(name)
        refs = {spec[k] for k in ("like", "tokenizer") if spec.get(k)}
        tok_dir = self.prepare_tokenizer_dir(name)
        if tok_dir and spec.get("like") != spec["tokenizer"]:
            refs.discard(spec["tokenizer"])
        inputs = [self.model_dir(self.check_model(r)) for r in sorted(refs)]
        if tok_dir:
            inputs.insert(0, tok_dir)
        # random_init `config_file:` (an architecture file): an input, so editing it reruns
        if spec.get("config_file"):
            inputs.append(spec["config_file"])
        return inputs + self.model_source_files(name)

    def prepare_tokenizer_dir(self, name: str) -> str | None:
        """Where ``prepare_model`` reads a random_init model's tokenizer when its `tokenizer:`
        names a model trained here (they all carry the one trained tokenizer): the trained
        tokenizer's directory; None otherwise (a sibling model directory or a path)."""
        spec = self.model_spec(name)
        ref = spec.get("tokenizer")
        if spec["source"] == "random_init" and isinstance(ref, str) and ref.startswith("trained-"):
            return self.train_tokenizer_dir()
        return None

    def model_dtype(self, name: str) -> str:
        """The dtype ``name`` runs in: its spec's ``dtype`` where it has one, else the config's
        (models trained here: the config's)."""
        if name.startswith("trained-"):
            return self.values(Common).dtype
        return self.model_spec(name).get("dtype") or self.values(Common).dtype

    def prepare_dtype(self, name: str) -> str | None:
        """The dtype ``prepare_model`` builds a random_init model in: the one it runs in
        (:meth:`model_dtype`); None for the other sources (their weights keep their own)."""
        return self.model_dtype(name) if self.model_spec(name)["source"] == "random_init" else None

    def tokenizer_of(self, model: str) -> str:
        """The tokenizer ``model`` uses, named by the model whose directory holds it, or by
        :meth:`train_tokenizer_key` for the one trained here: models sharing a tokenizer share
        the data store."""
        if model.startswith("trained-"):
            # every model trained here (and its init twin) uses the one trained tokenizer: their
            # prompts are sampled once, from the tokenizer, without waiting for any training
            return self.train_tokenizer_key()
        spec = self.model_spec(model)
        ref = spec.get("tokenizer") or spec.get("like")
        return self.tokenizer_of(ref) if spec["source"] == "random_init" and ref else model

    def tokenizer_dir(self, model: str) -> str:
        """The directory of the tokenizer ``model``'s data stores use (``model`` may also be a
        :meth:`tokenizer_of` name): the models trained here (and models taking their tokenizer)
        share the one ``train_tokenizer`` writes."""
        tok = model if model == self.train_tokenizer_key() else self.tokenizer_of(model)
        return (
            self.train_tokenizer_dir() if tok == self.train_tokenizer_key() else self.model_dir(tok)
        )

    @staticmethod
    def model_dir(model: str) -> str:
        return paths.MODEL_DIR.format(model=model)
