"""The ``train:`` section: the models trained here (variants and their hyperparameters), the
tokenizer, the held-out corpus, the Gram panels (Fig. 3/8) and the trained-vs-init comparison."""

from __future__ import annotations

import causalpos.paths as paths
from causalpos.config.common import ConfigError, Section, canonical, check_path_name
from causalpos.settings import Common
from causalpos.training.settings import ModelShape, TrainCorpus, TrainSettings
from causalpos.training.settings import config_keys as train_config_keys

# Positional types of the models trained here, in the canonical order of train_variants().
TRAIN_VARIANT_TYPES = ("rope", "nope", "ntk", "swa")
# Keys that determine a trained model, and those only one positional type reads: the fields of
# causalpos.training.settings.TrainSettings, declared there once.
TRAIN_KEYS, TRAIN_TYPE_KEYS = train_config_keys()


class TrainSection(Section):
    """The models trained here and the analyses of them."""

    def train_tokenizer_key(self) -> str:
        """The name data stores give the tokenizer trained here (``train.tokenizer.name``)."""
        return f"tokenizer-{self.config['train']['tokenizer']['name']}"

    def train_variants(self) -> list[str]:
        """Variant names in a canonical order (rope, nope, ntk, swa types, then by name), not the
        YAML file's: params are compared by text, and reordering the config must rerun nothing."""
        section = self.config["train"]
        if not section["enabled"]:
            return []
        order = {t: i for i, t in enumerate(TRAIN_VARIANT_TYPES)}

        def key(name):
            positional = (section["variants"][name] or {}).get("positional", name)
            return order.get(positional, 99), name

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
        shape, hp = self.values(ModelShape), self.values(TrainSettings)
        settings = {k: getattr(shape if hasattr(shape, k) else hp, k) for k in keys}
        settings["seed"] = self.values(Common).seed
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

    def trained_models(self) -> list[str]:
        return [paths.TRAINED_MODEL_DIR.format(variant=v) for v in self.train_variants()]

    def train_tokenizer_dir(self) -> str:
        name = check_path_name("train.tokenizer.name", self.config["train"]["tokenizer"]["name"])
        return paths.TOKENIZER_DIR.format(tokenizer=name)

    def train_heldout_corpus(self) -> dict:
        """The held-out side of the training corpus, as a causalpos.data corpus spec."""
        corpus = dict(self.values(TrainCorpus).corpus)
        if corpus.get("type") != "kjv":
            raise ConfigError(
                f"train.corpus: type {corpus.get('type')!r} is not supported yet; the analyses of "
                "trained models read the held-out books back as {type: kjv, books: [...]}"
            )
        corpus["books"] = list(self.values(TrainCorpus).heldout)
        return canonical(corpus)

    def gram_models(self) -> list[str]:
        """Models of the Fig. 3/8 analysis: `trained-<variant>` names (skipped when nothing is
        trained here), or models the `models:` section prepares (e.g. paper 1's NoPE checkpoint)."""
        gram = self.config["train"]["gram"]
        trained = {f"trained-{v}" for v in self.train_variants()}
        names = [n for n in gram["models"] if trained or not n.startswith("trained-")]
        known = trained | set(self.config.get("models") or {})
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
        spec = self.dataset_spec(dataset) if dataset else self.config["train"]["gram"]
        corpus = canonical(spec["corpus"]) if dataset else self.train_heldout_corpus()
        return {"corpus": corpus, "seq_len": spec["seq_len"], "n_sequences": spec["n_sequences"]}

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
            targets.append(paths.GRAM_STORE.format(model=model))
            for stem in (paths.TRAIN_FIG3_FIGURE, paths.TRAIN_FIG8_FIGURE):
                targets += self.figure_paths(stem.format(model=model))
        return targets

    def compare_section(self) -> dict | None:
        """``train.compare`` checked: the dataset exists and the trained models are configured."""
        sec = self.config["train"].get("compare") or {}
        if not sec.get("dataset") or not self.train_variants():  # none where train is disabled
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
        """The causal score stores of the trained models and their init twins, the leakage
        summaries of those paper 2 decomposes, on the comparison's dataset; the lengthgen table."""
        d = self.compare_section()["dataset"]
        kinds = {  # key -> (pattern, variants, model suffix)
            "trained": (paths.SCORE_STORE, self.train_variants(), ""),
            "init": (paths.SCORE_STORE, self.compare_twin_variants(), "-init"),
            "leakage": (paths.LEAKAGE_STORE, self.compare_leakage_variants(), ""),
            "leakage_init": (paths.LEAKAGE_STORE, self.compare_leakage_variants("-init"), "-init"),
        }
        out = {
            key: [p.format(model=f"trained-{v}{s}", dataset=d, variant="causal") for v in vs]
            for key, (p, vs, s) in kinds.items()
        }
        return {**out, "lengthgen": paths.TRAIN_LENGTHGEN_TABLE}

    def compare_plot_inputs(self) -> dict:
        inputs = self.compare_inputs()
        return {
            "index": paths.TRAIN_INDEX_TABLE,
            "comparison": paths.TRAIN_COMPARISON_TABLE,
            "trained": inputs["trained"],
            "init": inputs["init"],
        }

    def compare_targets(self) -> list[str]:
        if not self.compare_section():
            return []
        targets = [paths.TRAIN_INDEX_TABLE, paths.TRAIN_COMPARISON_TABLE]
        for stem in (
            paths.TRAIN_INDEX_FIGURE,
            paths.TRAIN_COMPARISON_FIGURE,
            paths.TRAIN_MAPS_FIGURE,
        ):
            targets += self.figure_paths(stem)
        return targets

    def train_targets(self) -> list[str]:
        if not self.train_variants():  # none where train is disabled
            return self.gram_targets()  # only models configured under models:
        for name in self.train_variants():
            self.train_variant(name)  # raises a ConfigError naming the key
        targets = self.trained_models()
        targets += self.figure_paths(paths.TRAIN_LOSS_CURVES_FIGURE)
        targets += self.gram_targets()
        targets += [paths.LENGTHGEN_STORE, paths.TRAIN_LENGTHGEN_TABLE]
        targets += self.figure_paths(paths.TRAIN_LOSS_BY_POSITION_FIGURE)
        targets += self.compare_targets()
        return targets
