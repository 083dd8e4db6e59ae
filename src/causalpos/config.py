"""Config resolution of the pipeline: the validated config dict -> plain values.

Everything the workflow's rules need from ``config.yaml`` beyond reading one key: simulation
settings with their section defaults, models and datasets (who shares whose tokenizer), shard
bounds, reducer lists, the experiments of paper 1, of the models trained here and of paper 2,
input-path lists, wildcard patterns and the targets of ``rule all``. Pure: no Snakemake, no
globals, no science and nothing heavy at import (no torch, transformers, xarray or pandas), so
every rule's inputs and params can be unit-tested on a config dict (tests/test_config.py).

``Resolved(config)`` takes the config *after* ``snakemake.utils.validate`` filled in the
schema's defaults (workflow/schemas/config.schema.yaml). Its methods return strings, lists and
dicts; the ``*_params`` ones are the exact values of rule params, which Snakemake compares as
text: their structure and key order are part of the pipeline's behaviour (see :func:`canonical`).
A value the schema allows but the pipeline cannot use raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from itertools import product
from pathlib import Path
from typing import Any

from causalpos.models.context import ContextError, check_seq_len
from causalpos.models.variants import DECOMPOSITION_CONDITIONS, parse_variant, variant_names


class ConfigError(ValueError):
    """A config value that the schema allows but the pipeline cannot use (names the key)."""


def canonical(value: Any) -> Any:
    """``value`` with every dict's keys sorted: params are compared by their text, so the order in
    which a YAML file lists keys must not make Snakemake think a param changed."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def names_pattern(names: Iterable[str]) -> str:
    """Regex matching exactly ``names`` (in their order), or nothing when there are none."""
    names = list(names)
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


#: Regex of the forward-pass variant names (the ``{variant}`` wildcard constraint): the atoms
#: and every valid composition, built from the library's list (causalpos.models.variants:
#: torch-free), so an invalid composition matches no rule.
VARIANT_PATTERN = names_pattern(variant_names())

# Simulation settings: each setting's own keys over the section's defaults.
SIM_KEYS = ("n_samples", "seq_len", "dim", "n_layers")
SIM_SETTING_DEFAULTS = {
    "norm": "l2",
    "scaling": "none",
    "rope": False,
    "causal": True,
    "residual": True,
}

# Positional types of the models trained here, in the canonical order of train_variants().
TRAIN_VARIANT_TYPES = ("rope", "nope", "ntk", "swa")
# Keys that determine a trained model (each one a train_model argument).
TRAIN_KEYS = (
    "hidden",
    "layers",
    "heads",
    "kv_heads",
    "intermediate",
    "rope_theta",
    "tie_embeddings",
    "context",
    "steps",
    "batch",
    "lr",
    "warmup",
    "min_lr_ratio",
    "weight_decay",
    "grad_clip",
    "dtype",
    "eval_every",
    "n_eval",
)
# Keys only one positional type reads.
TRAIN_TYPE_KEYS = {"swa": ("window",), "ntk": ("ntk_factor",)}

LEAKAGE_DEFAULT_VARIANTS = ["causal", "bidirectional"]
# The tables aggregate_leakage writes (the library's PAPER2_TABLES), as
# results/stats/paper2_<name>.csv.
PAPER2_TABLE_NAMES = [
    "leakage_by_model",
    "decomposition",
    "leakage_by_layer",
    "decomposition_by_layer",
    "rope_controls",
    "bos_effects",
    "observational_split",
    "heads",
    "sink_heads",
    "position0",
    "position0_probes",
    "baseline_comparison",
    "depth_trend",
]


def _store_paths(template: str, names: Iterable[str]) -> list[str]:
    return [template.format(name) for name in names]


def check_variant(key: str, name: str) -> str:
    """``name`` if it is a forward-pass variant, else a ConfigError naming ``key`` and the allowed values."""
    try:
        parse_variant(name)
    except ValueError as exc:  # the parser says what is wrong and what to write instead
        raise ConfigError(f"{key}: {exc}") from None
    return name


def _key_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def schema_error_summary(error: BaseException, schema_file: str = "") -> str:
    """A few lines on a config that fails the JSON schema: the key path, the value, what is wrong
    (and, for an unknown key, the keys allowed there) — never the schema itself.

    ``error`` is a ``jsonschema.ValidationError`` or the ``WorkflowError`` that
    ``snakemake.utils.validate`` wraps it in.
    """
    # snakemake's WorkflowError keeps only the text; the ValidationError is its context
    for inner in (error, error.__cause__, error.__context__, *getattr(error, "args", ())):
        if hasattr(inner, "absolute_path") and hasattr(inner, "validator"):
            error = inner
            break
    if not hasattr(error, "absolute_path"):
        return str(error)
    path = _key_path(error.absolute_path)
    lines = [f"invalid config at `{path or '(top level)'}`: {error.message}"]
    instance = error.instance
    if not isinstance(instance, (dict, list)) or len(repr(instance)) <= 120:
        text = repr(instance)
        lines.append(f"  value: {text if len(text) <= 200 else text[:200] + '...'}")
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        if allowed:
            lines.append(f"  allowed keys there: {', '.join(allowed)}")
    for sub in list(getattr(error, "context", None) or [])[:4]:
        lines.append(f"  - {sub.message}")
    description = " ".join(str(schema.get("description", "")).split())
    if description and error.validator != "additionalProperties":
        lines.append(f"  `{path}`: {description[:300]}")
    if schema_file:
        lines.append(f"  every key, its default and its allowed values: {schema_file}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Config-time checks of what a corpus can supply and how long a sequence a model can take.

#: Tokens a tokenizer may put before a sequence's text (its BOS and the like) in the bound below.
MAX_PREFIX_TOKENS = 2
#: ``max_position_embeddings`` of a ``random_init`` model of ``size: tiny``
#: (causalpos.models.load.tiny_config_kwargs; tests check they agree).
TINY_MAX_POSITIONS = 4096


def capacity_bound(sizes: Iterable[int], seq_len: int, mode: str) -> int | None:
    """An upper bound, valid for *any* tokenizer, on the sequences of ``seq_len`` tokens that
    documents of ``sizes`` UTF-8 bytes can give (``None``: no bound).

    It assumes only that every token but one spans at least one byte of text (true of byte-level
    BPE and of SentencePiece with byte fallback; the one is SentencePiece's word-boundary marker
    before the first word) and that a tokenizer puts at most :data:`MAX_PREFIX_TOKENS` tokens
    before the text. So a document of ``b`` bytes has at most ``b + 1`` text tokens and a sequence
    needs at least ``need = seq_len - MAX_PREFIX_TOKENS`` of them: mode ``first`` counts the
    documents with ``b + 1 >= need``, mode ``chunks`` sums ``(b + 1) // need``. Real tokenizers
    spend ~4 bytes per token on English text, so a corpus passing this check can still be short
    (sampling then says so, naming the exact count); one failing it cannot be sampled at all.
    """
    need = seq_len - MAX_PREFIX_TOKENS
    if need < 1:
        return None
    if mode == "first":
        return sum(1 for b in sizes if b + 1 >= need)
    return sum((b + 1) // need for b in sizes)


def _local_model_config(spec: dict) -> dict | None:
    """The ``config.json`` of a model whose spec names a local HF directory, if readable now."""
    source = spec.get("source")
    path = spec.get("path") if source == "local" else spec.get("id") if source == "hf" else None
    if not path:
        return None
    cfg = Path(path).expanduser() / "config.json"
    try:
        return json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None


class Resolved:
    """The pipeline's view of one validated config (nothing is cached: the dict is read on each
    call, as Snakemake's input functions would)."""

    def __init__(
        self,
        config: dict,
        *,
        document_sizes: Callable[[dict], list[int] | None] | None = None,
    ) -> None:
        self.config = config
        # Corpus reader of the config-time checks (tests pass their own): document sizes in
        # UTF-8 bytes, or None where they are not cheap to know (causalpos.data.local_document_sizes).
        self._document_sizes = document_sizes
        self._sizes: dict[str, list[int] | None] = {}

    # -----------------------------------------------------------------------------------------
    # Simulation settings (paper 1 §2, §4) and figures.

    def sim_settings(self) -> list[str]:
        return list(self.config["simulate"]["settings"])

    def sim_setting(self, name: str) -> dict:
        """Full parameter set of simulation setting ``name`` (section defaults filled in)."""
        section = self.config["simulate"]
        if name not in section["settings"]:
            raise ConfigError(
                f"simulate.settings has no setting {name!r}; defined: {sorted(section['settings'])}"
            )
        params = dict(SIM_SETTING_DEFAULTS)
        params.update({k: section[k] for k in SIM_KEYS})
        params["n_groups"] = section["n_groups"]
        params["rope_theta"] = section["rope_theta"]
        params.update(section["settings"][name])
        if params["rope"] and params["dim"] % 2:
            raise ConfigError(
                f"simulate.settings.{name}: rope needs an even dim, got dim={params['dim']}"
            )
        if params["n_groups"] > params["n_samples"]:
            raise ConfigError(
                f"simulate.settings.{name}: n_groups={params['n_groups']} exceeds "
                f"n_samples={params['n_samples']}"
            )
        return params

    def sim_setting_params(self, name: str) -> dict:
        return canonical(self.sim_setting(name))

    def theory_settings(self) -> list[str]:
        """Settings that are paper 1's Eq. 1 exactly (L2, no RoPE, causal, residual): theory applies."""
        out = []
        for name in self.sim_settings():
            p = self.sim_setting(name)
            if p["norm"] == "l2" and not p["rope"] and p["causal"] and p["residual"]:
                out.append(name)
        return out

    def sim_figure(self, name: str) -> dict:
        spec = self.config["figures"]["simulation"][name]
        for s in spec["settings"]:
            self.sim_setting(s)  # raises a ConfigError naming the missing setting
        return spec

    def sim_figure_params(self, name: str) -> dict:
        return canonical(self.sim_figure(name))

    def sim_figure_stores(self, name: str) -> list[str]:
        return _store_paths("results/sim/{}.zarr", self.sim_figure(name)["settings"])

    def theory_stores(self) -> list[str]:
        return _store_paths("results/sim/{}.zarr", self.theory_settings())

    def sim_stores(self) -> list[str]:
        return _store_paths("results/sim/{}.zarr", self.sim_settings())

    def figure_paths(self, stem: str) -> list[str]:
        """``results/figures/{stem}.{fmt}`` for every configured format."""
        return [f"results/figures/{stem}.{fmt}" for fmt in self.config["figures"]["formats"]]

    # -----------------------------------------------------------------------------------------
    # Models, datasets, extraction.

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
        if name.startswith("trained-"):
            return name
        self.model_spec(name)
        return name

    def model_spec_params(self, name: str) -> dict:
        return canonical(self.model_spec(name))

    def prepare_model_inputs(self, name: str) -> list[str]:
        """A random_init model `like:` (or taking the `tokenizer:` of) another needs it first."""
        spec = self.model_spec(name)
        refs = {spec[k] for k in ("like", "tokenizer") if spec.get(k)}
        inputs = [f"resources/models/{self.check_model(r)}" for r in sorted(refs)]
        # random_init `config_file:` (an architecture file): an input, so editing it reruns
        if spec.get("config_file"):
            inputs.append(spec["config_file"])
        return inputs

    def train_tokenizer_key(self) -> str:
        """The name data stores give the tokenizer trained here (``train.tokenizer.name``)."""
        return f"tokenizer-{self.config['train']['tokenizer']['name']}"

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
        spec.setdefault("seed", self.config["seed"])
        return spec

    def dataset_spec_params(self, name: str) -> dict:
        return canonical(self.dataset_spec(name))

    def data_store(self, model: str, dataset: str) -> str:
        return f"results/data/{dataset}/{self.tokenizer_of(model)}.zarr"

    def tokenizer_dir(self, model: str) -> str:
        """The directory of the tokenizer ``model``'s data stores use (``model`` may also be a
        :meth:`tokenizer_of` name): the models trained here (and models taking their tokenizer)
        share the one ``train_tokenizer`` writes."""
        tok = model if model == self.train_tokenizer_key() else self.tokenizer_of(model)
        return (
            self.train_tokenizer_dir() if tok == self.train_tokenizer_key() else self.model_dir(tok)
        )

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
        """Inputs of ``sample_sequences``: the tokenizer's model and the other tokenizers whose
        documents the draw must fit (:meth:`document_peers`), where there are any."""
        inputs: dict[str, Any] = {"tokenizer": self.tokenizer_dir(tokenizer)}
        peers = self.document_peers(dataset, tokenizer)
        if peers:
            inputs["peers"] = peers
        return inputs

    def n_shards(self, dataset: str) -> int:
        spec = self.dataset_spec(dataset)
        return math.ceil(spec["n_sequences"] / self.config["extract"]["shard_size"])

    def shard_bounds(self, dataset: str, shard: str | int) -> list[int]:
        """``[first, end)`` sequence indices of shard ``shard`` (the ``{shard}`` wildcard) of ``dataset``."""
        size = self.config["extract"]["shard_size"]
        total = self.dataset_spec(dataset)["n_sequences"]
        k = int(shard)
        if k >= self.n_shards(dataset):
            raise ConfigError(f"shard {k} beyond the {self.n_shards(dataset)} shards of {dataset}")
        return [k * size, min((k + 1) * size, total)]

    def score_shards(self, model: str, dataset: str, variant: str) -> list[str]:
        """Shard directories ``variant``'s merge reads: one extraction job per (model, dataset,
        shard) writes every variant of the pair into ``shard-NNNN/{variant}.zarr``."""
        if variant not in self.extraction_variants(model, dataset):
            raise ConfigError(
                f"no stage asks for scores of model {model!r} on dataset {dataset!r} under "
                f"variant {variant!r}"
            )
        return [
            f"results/scores/{model}/{dataset}/shard-{k:04d}" for k in range(self.n_shards(dataset))
        ]

    def map_triples(self) -> set[tuple[str, str, str]]:
        """(model, dataset, variant) whose score maps a stage reads: paper 1's models (diagonal
        normalization, the index) and the trained-vs-init comparison (its causal maps)."""
        out = set(self.paper1_triples())
        sec = self.compare_section()
        if sec:
            d = sec["dataset"]
            out |= {(f"trained-{v}", d, "causal") for v in self.train_variants()}
            out |= {(f"trained-{v}-init", d, "causal") for v in self.compare_twin_variants()}
        return out

    def extraction_variants(self, model: str, dataset: str) -> list[str]:
        """Every variant some stage reads for (model, dataset), in a fixed order (causal first)."""
        seen = {v for m, d, v in self.map_triples() if (m, d) == (model, dataset)}
        seen |= set(self.leakage_pairs().get((model, dataset), ()))
        seen |= set(self.position0_conditions(model, dataset))
        order = {"causal": 0, "bidirectional": 1}
        return sorted(seen, key=lambda v: (order.get(v, 2), v))

    def extraction_params(self, model: str, dataset: str) -> dict:
        """What one extraction job computes: variant -> {reducers, leakage (reducer kwargs)}."""
        variants = self.extraction_variants(model, dataset)
        if not variants:
            raise ConfigError(f"no stage asks for scores of model {model!r} on dataset {dataset!r}")
        return canonical(
            {
                v: {
                    "reducers": self.reducers_for(model, dataset, v),
                    "leakage": self.leakage_reducer_params(model, dataset, v),
                }
                for v in variants
            }
        )

    def reducers_for(self, model: str, dataset: str, variant: str) -> list[str]:
        """Reducers of one variant's extraction: the maps (moments, group means) where a stage
        reads them (:meth:`map_triples`); paper 2's per-sequence metrics where an experiment
        names the variant. Nothing else is computed or stored."""
        names = []
        if (model, dataset, variant) in self.map_triples():
            names += ["moments", "groups"]
        if self.leakage_wants(model, dataset, variant):
            names += ["leakage", "sink"]
        if variant in self.position0_conditions(model, dataset):
            names += ["position0"]
        return names

    def leakage_wants(self, model: str, dataset: str, variant: str) -> bool:
        """Whether a paper-2 experiment names this (model, dataset, variant)."""
        return variant in self.leakage_pairs().get((model, dataset), ())

    def leakage_reducer_params(self, model: str, dataset: str, variant: str) -> dict:
        """LeakageReducer kwargs of an extraction job ({} where paper 2 does not want it)."""
        if self.leakage_wants(model, dataset, variant):
            return self.leakage_reducer_kwargs(variant)
        return {}

    def gpu_count(self) -> int:
        """GPUs an extraction job holds."""
        return 1 if self.config["device"] in ("cuda", "auto") else 0

    # -----------------------------------------------------------------------------------------
    # Paper 1 §6: pretrained models.

    def paper1_triples(self) -> list[tuple[str, str, str]]:
        sec = self.config["paper1_llm"]
        variants = [check_variant("paper1_llm.variants", v) for v in sec["variants"]]
        return [
            (self.check_model(m), self.dataset_spec(d) and d, v)
            for m, d, v in product(sec["models"], sec["datasets"], variants)
        ]

    def paper1_score_stores(self) -> list[str]:
        return [f"results/scores/{m}/{d}/{v}.zarr" for m, d, v in self.paper1_triples()]

    def paper1_normalized_stores(self) -> list[str]:
        return [f"results/normalized/{m}/{d}/{v}.zarr" for m, d, v in self.paper1_triples()]

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

    # -----------------------------------------------------------------------------------------
    # Models trained here.

    def train_variants(self) -> list[str]:
        """Variant names in a canonical order (rope, nope, ntk, swa types, then by name), not the
        YAML file's: params are compared by text, and reordering the config must rerun nothing.
        """
        section = self.config["train"]
        if not section["enabled"]:
            return []

        def key(name):
            spec = section["variants"][name] or {}
            positional = spec.get("positional", name)
            order = (
                TRAIN_VARIANT_TYPES.index(positional) if positional in TRAIN_VARIANT_TYPES else 99
            )
            return (order, name)

        return sorted(section["variants"], key=key)

    def train_variant(self, name: str) -> dict:
        """Full training settings of variant ``name``: ``positional`` type, seed and every hyper-parameter."""
        section = self.config["train"]
        if name not in section["variants"]:
            raise ConfigError(
                f"train.variants has no variant {name!r}; defined: {sorted(section['variants'])}"
            )
        spec = dict(section["variants"][name] or {})
        positional = spec.pop("positional", name)
        if positional not in TRAIN_VARIANT_TYPES:
            raise ConfigError(
                f"train.variants.{name}: positional type {positional!r} unknown; give it "
                f"`positional:` one of {list(TRAIN_VARIANT_TYPES)}"
            )
        keys = TRAIN_KEYS + TRAIN_TYPE_KEYS.get(positional, ())
        settings = {k: section[k] for k in keys}
        settings["seed"] = self.config["seed"]
        for key, value in spec.items():
            if key not in keys + ("seed",):
                raise ConfigError(
                    f"train.variants.{name}.{key}: a {positional} model does not use {key!r}"
                )
            settings[key] = value
        if settings["warmup"] > settings["steps"]:
            raise ConfigError(
                f"train (variant {name}): warmup={settings['warmup']} exceeds steps={settings['steps']}"
            )
        if positional == "swa" and not 1 <= settings["window"] < settings["context"]:
            raise ConfigError(
                f"train (variant {name}): window={settings['window']} must be in "
                f"[1, context={settings['context']}) to mask anything in training"
            )
        return {"variant": positional, **settings}

    def train_variant_params(self, name: str) -> dict:
        return canonical(self.train_variant(name))

    @staticmethod
    def trained_model(name: str) -> str:
        return f"resources/models/trained-{name}"

    def trained_models(self) -> list[str]:
        return [self.trained_model(v) for v in self.train_variants()]

    def train_tokenizer_dir(self) -> str:
        return f"resources/tokenizers/{self.config['train']['tokenizer']['name']}"

    def train_corpus(self) -> dict:
        """The training corpus spec (params: key order canonical)."""
        return canonical(self.config["train"]["corpus"])

    def train_heldout_corpus(self) -> dict:
        """The held-out side of the training corpus, as a causalpos.data corpus spec."""
        corpus = dict(self.config["train"]["corpus"])
        if corpus.get("type") != "kjv":
            raise ConfigError(
                f"train.corpus: type {corpus.get('type')!r} is not supported yet; the analyses of "
                "trained models read the held-out books back as {type: kjv, books: [...]}"
            )
        corpus["books"] = list(self.config["train"]["heldout"])
        return canonical(corpus)

    def gram_models(self) -> list[str]:
        """Models of the Fig. 3/8 analysis: `trained-<variant>` names (skipped when nothing is
        trained here), or models the `models:` section prepares (e.g. paper 1's NoPE checkpoint)."""
        gram = self.config["train"]["gram"]
        trained = {f"trained-{v}" for v in self.train_variants()}
        configured = set(self.config.get("models") or {})
        names = [n for n in gram["models"] if trained or not n.startswith("trained-")]
        known = trained | configured
        for name in names:
            if name not in known:
                raise ConfigError(
                    f"train.gram.models: {name!r} is neither trained here nor configured under "
                    f"models:; known: {sorted(known)}"
                )
        for name, dataset in (gram.get("datasets") or {}).items():
            if name not in gram["models"]:
                raise ConfigError(
                    f"train.gram.datasets.{name}: {name!r} is not among train.gram.models "
                    f"{list(gram['models'])}"
                )
            if dataset not in self.config["datasets"]:
                raise ConfigError(
                    f"train.gram.datasets.{name}: no dataset {dataset!r} under datasets:; "
                    f"defined: {sorted(self.config['datasets'])}"
                )
        return names

    def gram_dataset(self, model: str) -> str | None:
        """The dataset (under ``datasets:``) of ``model``'s Fig. 3/8 sequences, or None: the first
        ``train.gram.seq_len`` tokens of ``train.gram.n_sequences`` held-out chapters."""
        return (self.config["train"]["gram"].get("datasets") or {}).get(model) or None

    def gram_draw(self, model: str) -> dict:
        """Corpus, ``seq_len`` and ``n_sequences`` of ``model``'s Fig. 3/8 sequences (rule params)."""
        dataset = self.gram_dataset(model)
        if dataset:
            spec = self.dataset_spec(dataset)
            return {
                "corpus": canonical(spec["corpus"]),
                "seq_len": spec["seq_len"],
                "n_sequences": spec["n_sequences"],
            }
        gram = self.config["train"]["gram"]
        return {
            "corpus": self.train_heldout_corpus(),
            "seq_len": gram["seq_len"],
            "n_sequences": gram["n_sequences"],
        }

    def gram_inputs(self, model: str) -> dict[str, str]:
        """The model directory, and the data store where the model's panels read a dataset."""
        inputs = {"model": self.model_dir(model)}
        dataset = self.gram_dataset(model)
        if dataset:
            inputs["data"] = self.data_store(model, dataset)
        return inputs

    def gram_targets(self) -> list[str]:
        targets = []
        for model in self.gram_models():
            targets.append(f"results/gram/{model}.zarr")
            targets += self.figure_paths(f"train_fig3_{model}")
            targets += self.figure_paths(f"train_fig8_{model}")
        return targets

    @staticmethod
    def model_dir(model: str) -> str:
        return f"resources/models/{model}"

    def train_gpu(self) -> int:
        """1 when models run on a GPU, so the scheduler never puts two such jobs on one card."""
        return 0 if self.config["device"] == "cpu" else 1

    def compare_section(self) -> dict | None:
        """``train.compare`` checked: the dataset exists and the trained models are configured."""
        sec = self.config["train"].get("compare") or {}
        if (
            not sec.get("dataset")
            or not self.config["train"]["enabled"]
            or not self.train_variants()
        ):
            return None
        self.dataset_spec(sec["dataset"])  # raises a ConfigError naming the dataset
        return sec

    def compare_twin_variants(self) -> list[str]:
        sec = self.compare_section()
        return self.train_variants() if sec and sec.get("init_twins", True) else []

    def compare_leakage_variants(self, suffix: str = "") -> list[str]:
        """Variants whose trained model (suffix "") or init twin (suffix "-init") paper 2 decomposes
        on the comparison dataset (causal and bidirectional runs both configured)."""
        sec = self.compare_section()
        if not sec:
            return []
        pairs = self.leakage_pairs()
        variants = self.compare_twin_variants() if suffix else self.train_variants()
        return [
            v
            for v in variants
            if {"causal", "bidirectional"}
            <= set(pairs.get((f"trained-{v}{suffix}", sec["dataset"]), ()))
        ]

    def compare_inputs(self) -> dict:
        sec = self.compare_section()
        d = sec["dataset"]
        return {
            "trained": [
                f"results/scores/trained-{v}/{d}/causal.zarr" for v in self.train_variants()
            ],
            "init": [
                f"results/scores/trained-{v}-init/{d}/causal.zarr"
                for v in self.compare_twin_variants()
            ],
            "leakage": [
                f"results/leakage/trained-{v}/{d}.zarr" for v in self.compare_leakage_variants()
            ],
            "leakage_init": [
                f"results/leakage/trained-{v}-init/{d}.zarr"
                for v in self.compare_leakage_variants("-init")
            ],
            "lengthgen": "results/stats/train_lengthgen.csv",
        }

    def compare_plot_inputs(self) -> dict:
        inputs = self.compare_inputs()
        return {
            "index": "results/stats/train_index.csv",
            "comparison": "results/stats/train_comparison.csv",
            "trained": inputs["trained"],
            "init": inputs["init"],
        }

    def compare_targets(self) -> list[str]:
        if not self.compare_section():
            return []
        targets = ["results/stats/train_index.csv", "results/stats/train_comparison.csv"]
        for stem in ("train_index", "train_comparison", "train_maps"):
            targets += self.figure_paths(stem)
        return targets

    def train_targets(self) -> list[str]:
        if not self.config["train"]["enabled"] or not self.train_variants():
            return self.gram_targets()  # only models configured under models:
        for name in self.train_variants():
            self.train_variant(name)  # raises a ConfigError naming the key
        targets = self.trained_models()
        targets += self.figure_paths("train_loss_curves")
        targets += self.gram_targets()
        targets += [
            "results/lengthgen/lengthgen.zarr",
            "results/stats/train_lengthgen.csv",
        ]
        targets += self.figure_paths("train_loss_by_position")
        targets += self.compare_targets()
        return targets

    # -----------------------------------------------------------------------------------------
    # Paper 2: leakage experiments. A (model, dataset) pair is extracted and summarized once,
    # over the union of the variants its experiments list.

    def leakage_experiments(self) -> dict[str, dict]:
        """Experiment name -> {models, datasets, variants}, every name checked against the config."""
        out = {}
        for name, exp in self.config.get("leakage", {}).get("experiments", {}).items():
            variants = list(exp.get("variants") or LEAKAGE_DEFAULT_VARIANTS)
            for v in variants:
                check_variant(f"leakage.experiments.{name}.variants", v)
            if "causal" not in variants:
                raise ConfigError(
                    f"leakage.experiments.{name}.variants must include 'causal' (the baseline of the "
                    f"decomposition and BOS effects, and the run whose sink heads are probed); got {variants}"
                )
            out[name] = {
                "models": [self.check_model(m) for m in exp["models"]],
                "datasets": [self.dataset_spec(d) and d for d in exp["datasets"]],
                "variants": variants,
            }
        return out

    def leakage_pairs(self) -> dict[tuple[str, str], list[str]]:
        """(model, dataset) -> the union of its experiments' variants (causal first, then bidirectional)."""
        pairs: dict[tuple[str, str], list[str]] = {}
        for exp in self.leakage_experiments().values():
            for m, d in product(exp["models"], exp["datasets"]):
                seen = pairs.setdefault((m, d), [])
                seen += [v for v in exp["variants"] if v not in seen]
        order = {"causal": 0, "bidirectional": 1}
        return {k: sorted(v, key=lambda x: order.get(x, 2)) for k, v in pairs.items()}

    def leakage_variants(self, model: str, dataset: str) -> list[str]:
        pairs = self.leakage_pairs()
        if (model, dataset) not in pairs:
            raise ConfigError(
                f"no leakage experiment names model {model!r} with dataset {dataset!r}; "
                f"configured pairs: {sorted(pairs)}"
            )
        return pairs[(model, dataset)]

    def leakage_settings(self) -> dict:
        """The summary's settings, cross-checked against the reducer's fits and windows."""
        sec = self.config["leakage"]
        red = sec["reducer"]
        for v in sec["permutation_variants"] or ():
            check_variant("leakage.permutation_variants", v)
        if sec["fit"] not in red["fits"]:
            raise ConfigError(
                f"leakage.fit {sec['fit']!r} is not among leakage.reducer.fits {red['fits']}"
            )
        for key, wins in (("window", [sec["window"]]), ("bos_windows", sec["bos_windows"])):
            missing = [w for w in wins if w not in red["windows"]]
            if missing:
                raise ConfigError(
                    f"leakage.{key}: {missing} not among leakage.reducer.windows {red['windows']}"
                )
        return sec

    def leakage_reducer_kwargs(self, variant: str) -> dict:
        """LeakageReducer keyword arguments of an extraction job (sorted: compared as text).

        The prompt-mean maps (2 x layers x heads x T^2 float64, ~280 MB for SmolLM2 at T = 256)
        are summed only for the variants the permutation test reads.
        """
        sec = self.leakage_settings()
        kwargs = dict(sec["reducer"])
        tested = sec["permutation_variants"]
        kwargs["mean_maps"] = bool(
            kwargs["mean_maps"]
            and sec["n_permutations"] > 0
            and (tested is None or variant in tested)
        )
        return canonical(kwargs)

    def leakage_score_stores(self, model: str, dataset: str) -> list[str]:
        return [
            f"results/scores/{model}/{dataset}/{v}.zarr"
            for v in self.leakage_variants(model, dataset)
        ]

    def leakage_summary_params(self) -> dict:
        sec = self.leakage_settings()
        perm = sec["permutation_variants"]
        return canonical(
            {
                "fit": sec["fit"],
                "window": sec["window"],
                "floor_correct": sec["floor_correct"],
                "n_boot": self.config["stats"]["n_bootstrap"],
                "level": self.config["stats"]["confidence"],
                "n_perm": sec["n_permutations"],
                "perm_variants": None if perm is None else list(perm),
                "alpha": sec["alpha"],
                "taus": list(sec["taus"]),
                "bos_windows": list(sec["bos_windows"]),
                "seed": self.config["seed"],
            }
        )

    def model_attrs(self, model: str) -> dict:
        """What a model is, for the leakage tables (claim 3, sink heads): ``positional`` = the
        ``train.variants`` type (rope, ntk, swa, nope) of a model trained here or of its init
        twin, empty otherwise; ``init_of`` = the model whose weights an init twin
        (``trained-<v>-init``) or a ``random_init`` model ``like:`` another would have been
        trained into, empty for a trained or pretrained model."""
        if model.startswith("trained-"):
            variant = model.removeprefix("trained-").removesuffix("-init")
            positional = (
                self.train_variant(variant)["variant"] if variant in self.train_variants() else ""
            )
            init_of = f"trained-{variant}" if model.endswith("-init") else ""
            return {"positional": positional, "init_of": init_of}
        spec = self.model_spec(model)
        like = spec.get("like") if spec["source"] == "random_init" else None
        return {"positional": "", "init_of": str(like or "")}

    def position0_conditions(self, model: str, dataset: str) -> list[str]:
        """Forward passes whose position-0 states extraction reads for (model, dataset): the
        ``leakage.position0`` conditions of every pair a paper-2 experiment names."""
        if (model, dataset) not in self.leakage_pairs():
            return []
        return list(self.config["leakage"]["position0"]["conditions"])

    def position0_inputs(self, model: str, dataset: str) -> list[str]:
        """The merged stores, one per position-0 condition, that rule ``position0`` reads."""
        return [
            f"results/scores/{model}/{dataset}/{c}.zarr"
            for c in self.position0_conditions(model, dataset)
        ]

    def position0_params(self) -> dict:
        sec = self.config["leakage"]["position0"]
        for c in sec["conditions"]:
            check_variant("leakage.position0.conditions", c)
        return canonical(dict(sec))

    @staticmethod
    def leakage_label(pair: tuple[str, str]) -> str:
        return f"{pair[0]}/{pair[1]}"

    def leakage_summary_stores(self) -> list[str]:
        return [f"results/leakage/{m}/{d}.zarr" for m, d in self.leakage_pairs()]

    def position0_stores(self) -> list[str]:
        return [f"results/position0/{m}/{d}.zarr" for m, d in self.leakage_pairs()]

    def leakage_pair_labels(self) -> list[str]:
        return [self.leakage_label(p) for p in self.leakage_pairs()]

    def leakage_experiment(self, name: str) -> list[tuple[str, str]]:
        """The (model, dataset) pairs of experiment ``name``."""
        exps = self.leakage_experiments()
        if name not in exps:
            raise ConfigError(
                f"leakage.experiments has no experiment {name!r}; defined: {sorted(exps)}"
            )
        exp = exps[name]
        return list(product(exp["models"], exp["datasets"]))

    def experiment_summary_stores(self, name: str) -> list[str]:
        return [f"results/leakage/{m}/{d}.zarr" for m, d in self.leakage_experiment(name)]

    def experiment_position0_stores(self, name: str) -> list[str]:
        return [f"results/position0/{m}/{d}.zarr" for m, d in self.leakage_experiment(name)]

    def experiment_labels(self, name: str) -> list[str]:
        return [self.leakage_label(p) for p in self.leakage_experiment(name)]

    def experiment_has_decomposition(self, name: str) -> bool:
        pairs = self.leakage_pairs()
        # a decomposition needs some condition's causal and bidirectional runs
        return any(
            set(runs) <= set(pairs[p])
            for p in self.leakage_experiment(name)
            for runs in DECOMPOSITION_CONDITIONS.values()
        )

    def leakage_experiment_pattern(self) -> str:
        return names_pattern(sorted(set(self.config.get("leakage", {}).get("experiments", {}))))

    def leakage_model_pattern(self) -> str:
        return names_pattern(sorted({m for m, _ in self.leakage_pairs()}))

    def leakage_dataset_pattern(self) -> str:
        return names_pattern(sorted({d for _, d in self.leakage_pairs()}))

    @staticmethod
    def paper2_table_paths() -> list[str]:
        return [f"results/stats/paper2_{n}.csv" for n in PAPER2_TABLE_NAMES] + [
            "results/stats/paper2_tables.md"
        ]

    def leakage_targets(self) -> list[str]:
        """Everything paper 2 builds for the configured experiments (nothing when there are none)."""
        exps = self.leakage_experiments()
        if not exps:
            return []
        self.leakage_settings()
        targets = []
        for m, d in self.leakage_pairs():
            targets += [f"results/leakage/{m}/{d}.zarr", f"results/position0/{m}/{d}.zarr"]
            targets += self.figure_paths(f"paper2_heads_{m}_{d}")
        targets += self.paper2_table_paths()
        for name in exps:
            targets += self.figure_paths(f"paper2_layers_{name}")
            targets += self.figure_paths(f"paper2_position0_{name}")
            if self.experiment_has_decomposition(name):
                targets += self.figure_paths(f"paper2_shares_{name}")
        return targets

    # -----------------------------------------------------------------------------------------
    # The scorecard and `rule all`.

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
        if self.leakage_targets():
            for name in (
                "leakage_by_model",
                "decomposition",
                "rope_controls",
                "bos_effects",
                "position0",
                "position0_probes",
                "sink_heads",
                "baseline_comparison",
                "depth_trend",
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

    # -----------------------------------------------------------------------------------------
    # Config-time checks (the Snakefile runs check() before any job starts).

    def corpus_sizes(self, corpus: dict) -> list[int] | None:
        """Document sizes of a corpus (UTF-8 bytes), read once per corpus spec; None: unknown."""
        key = json.dumps(corpus, sort_keys=True, default=str)
        if key not in self._sizes:
            reader = self._document_sizes
            if reader is None:
                from causalpos.data import local_document_sizes as reader
            self._sizes[key] = reader(dict(corpus))
        return self._sizes[key]

    def check_capacity(
        self, key: str, corpus: dict, *, seq_len: int, n_sequences: int, mode: str
    ) -> None:
        """ConfigError (naming ``key``) when a local corpus cannot give ``n_sequences`` sequences of
        ``seq_len`` tokens with any tokenizer (:func:`capacity_bound`); hub corpora are skipped."""
        if corpus.get("type") == "random_tokens":
            return
        try:
            sizes = self.corpus_sizes(corpus)
        except ValueError as exc:  # causalpos.data.CorpusError: a missing or unreadable file
            raise ConfigError(f"{key}.corpus: {exc}") from None
        if sizes is None:
            return
        bound = capacity_bound(sizes, seq_len, mode)
        if bound is None or bound >= n_sequences:
            return
        need = seq_len - MAX_PREFIX_TOKENS
        if mode == "first":
            what = (
                f"mode 'first' needs {n_sequences} documents of at least {seq_len} tokens; the "
                f"corpus has {len(sizes)} documents, of which at most {bound} can hold them (a "
                f"token spans at least one byte: documents of >= {need - 1} bytes)"
            )
            todo = "lower n_sequences or seq_len, use mode 'chunks', or a larger corpus"
        else:
            what = (
                f"mode 'chunks' needs {n_sequences} chunks of {seq_len} tokens; the corpus "
                f"({len(sizes)} documents, {sum(sizes)} bytes) gives at most {bound} (a token "
                "spans at least one byte)"
            )
            todo = "lower n_sequences or seq_len, or use a larger corpus"
        raise ConfigError(
            f"{key}: n_sequences={n_sequences}, seq_len={seq_len}: {what}. Corpus "
            f"{canonical(corpus)}. Fix: {todo}"
        )

    def check_datasets(self) -> None:
        """Every dataset under ``datasets:`` and the held-out draws of the models trained here
        against what their local corpora can supply (:meth:`check_capacity`)."""
        for name in self.config["datasets"]:
            spec = self.dataset_spec(name)
            self.check_capacity(
                f"datasets.{name}",
                spec["corpus"],
                seq_len=spec["seq_len"],
                n_sequences=spec["n_sequences"],
                mode=spec["mode"],
            )
        if not self.train_variants():
            return
        heldout = self.train_heldout_corpus()
        gram = self.config["train"]["gram"]
        if any(not self.gram_dataset(m) for m in self.gram_models()):
            self.check_capacity(
                "train.gram",
                heldout,
                seq_len=gram["seq_len"],
                n_sequences=gram["n_sequences"],
                mode="first",
            )
        lengthgen = self.config["train"]["lengthgen"]
        context = max(self.train_variant(v)["context"] for v in self.train_variants())
        self.check_capacity(
            "train.lengthgen",
            heldout,
            seq_len=int(round(lengthgen["length_factor"] * context)),
            n_sequences=lengthgen["n_sequences"],
            mode="chunks",
        )

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
                context = self._architecture_file_context(model, spec)
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

    def _architecture_file_context(self, model: str, spec: dict) -> int | None:
        """The context of a random_init model built from ``config_file:`` (read now, so that a
        missing or invalid file stops the run before any job, naming the key)."""
        from causalpos.models.load import ModelSpecError, read_architecture_file

        try:
            kw = read_architecture_file(spec["config_file"])
        except ModelSpecError as exc:
            raise ConfigError(f"models.{model}.config_file: {exc}") from None
        kw.update(spec.get("config") or {})
        return kw.get("max_position_embeddings")

    def model_seq_lens(self) -> list[tuple[str, str, int]]:
        """``(model, what, seq_len)`` of every sequence length a configured job runs a model at
        (lengthgen excluded: it runs past the context on purpose)."""
        pairs: set[tuple[str, str]] = set()
        pairs.update((m, d) for m, d, _ in self.paper1_triples())
        pairs.update(self.leakage_pairs())
        sec = self.compare_section()
        if sec:
            for v in self.train_variants():
                pairs.add((f"trained-{v}", sec["dataset"]))
            for v in self.compare_twin_variants():
                pairs.add((f"trained-{v}-init", sec["dataset"]))
        out = [(m, f"datasets.{d}", self.dataset_spec(d)["seq_len"]) for m, d in sorted(pairs)]
        for m in self.gram_models():
            d = self.gram_dataset(m)
            if d:
                out.append((m, f"datasets.{d}", self.dataset_spec(d)["seq_len"]))
            else:
                out.append((m, "train.gram", self.config["train"]["gram"]["seq_len"]))
        return out

    def check_contexts(self) -> list[str]:
        """Warnings for models run past their context (RoPE, NoPE); a ConfigError where a model
        with learned absolute positions would be (:func:`causalpos.models.context.check_seq_len`)."""
        warnings = []
        for model, what, seq_len in self.model_seq_lens():
            known = self.model_context(model)
            if known is None:
                continue
            try:
                msg = check_seq_len(*known, seq_len, f"{what}.seq_len with model {model!r}")
            except ContextError as exc:
                raise ConfigError(str(exc)) from None
            if msg:
                warnings.append(msg)
        return warnings

    def check(self) -> list[str]:
        """Every config-time check; returns warnings, raises one ConfigError listing every error.

        The target lists (each resolver method checks what it reads), the variant names, what
        local corpora can supply (:meth:`check_datasets`) and sequence lengths against the
        models' contexts where known (:meth:`check_contexts`).
        """
        errors: list[str] = []
        warnings: list[str] = []
        for step in (self.all_targets, self.check_datasets, self.check_contexts):
            try:
                out = step()
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            if step == self.check_contexts:
                warnings += out
        if errors:
            raise ConfigError("\n".join(dict.fromkeys(errors)))  # each error once
        return warnings
