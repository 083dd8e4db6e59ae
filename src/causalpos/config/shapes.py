"""What the config knows of a model's shape before any job: its context, its layers and the
``config.json`` fields that size it, from the training settings, a ``random_init`` spec (tiny
preset, ``like:`` chain, architecture file, ``config:`` overrides) or a local directory's
``config.json`` (read here). ``None`` where the shape is known only once the model is loaded."""

from __future__ import annotations

from causalpos.config.common import ConfigError, Section
from causalpos.config.disk import HUB_ARCHITECTURES, _local_model_config
from causalpos.training.settings import TokenizerSettings

#: ``max_position_embeddings`` of a ``random_init`` model of ``size: tiny``
#: (causalpos.models.architectures.tiny_config_kwargs; tests check they agree).
TINY_MAX_POSITIONS = 4096


class ShapesSection(Section):
    """A model's context, layers and sizing fields where the config alone gives them."""

    def model_context(self, model: str) -> tuple[int | None, str] | None:
        """``(context, kind)`` of a model where its config is known before any job runs
        (causalpos.models.context.position_limit): the models trained here, ``random_init``
        models of ``size: tiny`` (or with ``max_position_embeddings`` in ``config:``), ``like:``
        such a model, and local HF directories. ``None`` for the others (checked when loaded)."""
        if model.startswith("trained-"):
            variant = model.removeprefix("trained-").removesuffix("-init")
            if variant not in self.train_variants():
                return None
            settings = self.train_variant(variant)
            return settings["context"], "none" if settings["variant"] == "nope" else "rope"
        spec = self.model_spec(model)
        kind = "none" if spec.get("rope") == "none" else None
        if spec["source"] == "random_init":
            overrides = spec.get("config") or {}
            if spec.get("like"):
                base = self.model_context(spec["like"])
                if base is None and "max_position_embeddings" not in overrides:
                    return None
                context = overrides.get("max_position_embeddings", base and base[0])
                return context, kind or (base[1] if base else "rope")
            if spec.get("config_file"):
                kw = {**self._architecture_file(model, spec), **overrides}
                context = kw.get("max_position_embeddings")
                return (context, kind or "rope") if context else None
            default = TINY_MAX_POSITIONS if spec.get("size", "tiny") == "tiny" else None
            context = overrides.get("max_position_embeddings", default)
            return (context, kind or "rope") if context else None
        cfg = _local_model_config(spec)
        if cfg is None:
            return None
        from causalpos.models.context import position_limit

        context, found = position_limit(cfg)
        return context, kind if kind and found != "absolute" else found

    def model_layers(self, model: str) -> int | None:
        """A model's number of layers where its config is known before any job (the models
        trained here, ``random_init`` models and those ``like:`` them, local HF directories);
        ``None`` for the others (checked when loaded)."""
        if model.startswith("trained-"):
            variant = model.removeprefix("trained-").removesuffix("-init")
            if variant not in self.train_variants():
                return None
            return int(self.train_variant(variant)["layers"])
        spec = self.model_spec(model)
        if spec["source"] == "random_init":
            overrides = spec.get("config") or {}
            if "num_hidden_layers" in overrides:
                return int(overrides["num_hidden_layers"])
            if spec.get("like"):
                return self.model_layers(spec["like"])
            if spec.get("config_file"):
                n = self._architecture_file(model, spec).get("num_hidden_layers")
                return None if n is None else int(n)
            if spec.get("size", "tiny") != "tiny":
                return None
            from causalpos.models.architectures import tiny_config_kwargs

            return int(tiny_config_kwargs(spec.get("architecture", "llama"))["num_hidden_layers"])
        cfg = _local_model_config(spec)
        n = None if cfg is None else cfg.get("num_hidden_layers")
        return None if n is None else int(n)

    @staticmethod
    def _architecture_file(model: str, spec: dict) -> dict:
        """The fields of a random_init model's ``config_file:`` (read now, so that a missing or
        invalid file stops the run before any job, naming the key)."""
        from causalpos.models.architectures import ModelSpecError, read_architecture_file

        try:
            return read_architecture_file(spec["config_file"])
        except ModelSpecError as exc:
            raise ConfigError(f"models.{model}.config_file: {exc}") from None

    def model_shape_fields(self, model: str) -> dict | None:
        """The ``config.json`` fields that size ``model`` (architecture file, ``like:`` chain with
        ``config:`` overrides, tiny preset, local directory, the training settings), or None."""
        from causalpos.models.architectures import read_architecture_file, tiny_config_kwargs

        if model.startswith("trained-"):
            variant = model.removeprefix("trained-").removesuffix("-init")
            if variant not in self.train_variants():
                return None
            s = self.train_variant(variant)
            # swa is the Mistral architecture: Llama plus its sliding window (every layer)
            window = {"sliding_window": int(s["window"])} if s["variant"] == "swa" else {}
            return window | {
                "model_type": "mistral" if window else "llama",
                "vocab_size": self.values(TokenizerSettings).vocab_size,
                "hidden_size": s["hidden"],
                "intermediate_size": s["intermediate"],
                "num_hidden_layers": s["layers"],
                "num_attention_heads": s["heads"],
                "num_key_value_heads": s["kv_heads"],
                "tie_word_embeddings": s.get("tie_embeddings", True),
            }
        spec = self.model_spec(model)
        overrides = spec.get("config") or {}
        if spec["source"] == "random_init":
            if spec.get("like"):
                base = self.model_shape_fields(spec["like"])
            elif spec.get("config_file"):
                base = _read_fields(spec["config_file"], read_architecture_file)
            elif spec.get("size", "tiny") == "tiny":
                from causalpos.models.architectures import ARCHITECTURES

                arch = spec.get("architecture")
                if arch not in ARCHITECTURES:
                    return None
                base = {"model_type": ARCHITECTURES[arch], **tiny_config_kwargs(arch)}
            else:
                return None
            return None if base is None else {**base, **overrides}
        if spec["source"] == "hf" and spec.get("id") in HUB_ARCHITECTURES:
            return _read_fields(HUB_ARCHITECTURES[spec["id"]], read_architecture_file)
        return _local_model_config(spec)


def _read_fields(path: str, reader) -> dict | None:
    try:
        return reader(path)
    except ValueError:  # ModelSpecError: the config-time checks name the key
        return None
