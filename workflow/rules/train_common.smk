# Helpers of the training stage (train.smk): variant settings, target lists, input functions.
# Kept apart from the rules (snakemake --lint: no functions beside rules); no science here.

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


def train_variants():
    """Variant names in a canonical order (rope, nope, ntk, swa types, then by name), not the
    YAML file's: params are compared by text, and reordering the config must rerun nothing.
    """
    section = config["train"]
    if not section["enabled"]:
        return []

    def key(name):
        spec = section["variants"][name] or {}
        positional = spec.get("positional", name)
        order = (
            TRAIN_VARIANT_TYPES.index(positional)
            if positional in TRAIN_VARIANT_TYPES
            else 99
        )
        return (order, name)

    return sorted(section["variants"], key=key)


def train_variant(name):
    """Full training settings of variant ``name``: ``positional`` type, seed and every hyper-parameter."""
    section = config["train"]
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
    settings["seed"] = config["seed"]
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


def train_variant_params(wildcards):
    return canonical(train_variant(wildcards.variant))


def trained_model(name):
    return f"resources/models/trained-{name}"


def trained_models(wildcards=None):
    return [trained_model(v) for v in train_variants()]


def train_tokenizer_dir(wildcards=None):
    return f"resources/tokenizers/{config['train']['tokenizer']['name']}"


def train_heldout_corpus():
    """The held-out side of the training corpus, as a causalpos.data corpus spec."""
    corpus = dict(config["train"]["corpus"])
    if corpus.get("type") != "kjv":
        raise ConfigError(
            f"train.corpus: type {corpus.get('type')!r} is not supported yet; the analyses of "
            "trained models read the held-out books back as {type: kjv, books: [...]}"
        )
    corpus["books"] = list(config["train"]["heldout"])
    return canonical(corpus)


def train_heldout_params(wildcards):
    return train_heldout_corpus()


def gram_models():
    """Models of the Fig. 3/8 analysis: `trained-<variant>` names, or models the `models:` section prepares."""
    if not config["train"]["enabled"]:
        return []
    names = list(config["train"]["gram"]["models"])
    known = {f"trained-{v}" for v in train_variants()} | set(config.get("models") or {})
    for name in names:
        if name not in known:
            raise ConfigError(
                f"train.gram.models: {name!r} is neither trained here nor configured under "
                f"models:; known: {sorted(known)}"
            )
    return names


def gram_model_dir(wildcards):
    return f"resources/models/{wildcards.model}"


def train_gpu():
    """1 when models run on a GPU, so the scheduler never puts two such jobs on one card."""
    return 0 if config["device"] == "cpu" else 1


def compare_section():
    """``train.compare`` checked: the dataset exists and the trained models are configured."""
    sec = config["train"].get("compare") or {}
    if not sec.get("dataset") or not config["train"]["enabled"] or not train_variants():
        return None
    dataset_spec(sec["dataset"])  # raises a ConfigError naming the dataset
    return sec


def compare_twin_variants():
    sec = compare_section()
    return train_variants() if sec and sec.get("init_twins", True) else []


def compare_leakage_variants(suffix=""):
    """Variants whose trained model (suffix "") or init twin (suffix "-init") paper 2 decomposes
    on the comparison dataset (causal and bidirectional runs both configured)."""
    sec = compare_section()
    if not sec:
        return []
    pairs = leakage_pairs()
    variants = compare_twin_variants() if suffix else train_variants()
    return [
        v
        for v in variants
        if {"causal", "bidirectional"}
        <= set(pairs.get((f"trained-{v}{suffix}", sec["dataset"]), ()))
    ]


def compare_inputs(wildcards):
    sec = compare_section()
    d = sec["dataset"]
    return {
        "trained": [
            f"results/scores/trained-{v}/{d}/causal.zarr" for v in train_variants()
        ],
        "init": [
            f"results/scores/trained-{v}-init/{d}/causal.zarr"
            for v in compare_twin_variants()
        ],
        "leakage": [
            f"results/leakage/trained-{v}/{d}.zarr" for v in compare_leakage_variants()
        ],
        "leakage_init": [
            f"results/leakage/trained-{v}-init/{d}.zarr"
            for v in compare_leakage_variants("-init")
        ],
        "lengthgen": "results/stats/train_lengthgen.csv",
    }


def compare_plot_inputs(wildcards):
    inputs = compare_inputs(wildcards)
    return {
        "index": "results/stats/train_index.csv",
        "comparison": "results/stats/train_comparison.csv",
        "trained": inputs["trained"],
        "init": inputs["init"],
    }


def compare_targets():
    if not compare_section():
        return []
    targets = ["results/stats/train_index.csv", "results/stats/train_comparison.csv"]
    for stem in ("train_index", "train_comparison", "train_maps"):
        targets += figure_paths(stem)
    return targets


def train_targets():
    if not config["train"]["enabled"] or not train_variants():
        return []
    for name in train_variants():
        train_variant(name)  # raises a ConfigError naming the key
    targets = trained_models()
    targets += figure_paths("train_loss_curves")
    for model in gram_models():
        targets.append(f"results/gram/{model}.zarr")
        targets += figure_paths(f"train_fig3_{model}")
        targets += figure_paths(f"train_fig8_{model}")
    targets += [
        "results/lengthgen/lengthgen.zarr",
        "results/stats/train_lengthgen.csv",
    ]
    targets += figure_paths("train_loss_by_position")
    targets += compare_targets()
    return targets
