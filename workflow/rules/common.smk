# Helpers shared by every stage: config resolution, target lists, wildcard constraints.
# No science here; the library (src/causalpos) holds it.

import math
import sys
from pathlib import Path

# The library is imported from the checkout (not only an installed copy), so a Snakemake process
# running under --use-conda or without `pip install -e .` fingerprints the code that jobs will run.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from causalpos.io.fingerprint import code_fingerprint as _code_fingerprint  # noqa: E402


def code_fingerprint(script):
    """Hash of ``workflow/scripts/<script>.py`` and of every library module it imports."""
    return _code_fingerprint(
        Path(workflow.basedir) / "workflow" / "scripts" / f"{script}.py"
    )


ENV_ANALYSIS = "../../envs/analysis.yaml"
ENV_MODELS = "../../envs/models.yaml"


def canonical(value):
    """``value`` with every dict's keys sorted: params are compared by their text, so the order in
    which a YAML file lists keys must not make Snakemake think a param changed."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


class ConfigError(ValueError):
    """A config value that the schema allows but the pipeline cannot use (names the key)."""


VARIANT_PATTERN = (
    r"causal|bidirectional|identity_rope|scrambled_rope"
    r"|bos_replace_(?:mean|zeros|token|gaussian)|bos_replace_all_(?:token|gaussian)"
)


wildcard_constraints:
    setting=r"[A-Za-z0-9_.-]+",
    figure=r"[A-Za-z0-9_]+",
    model=r"[^/]+",
    dataset=r"[^/]+",
    tokenizer=r"[^/]+",
    variant=VARIANT_PATTERN,
    shard=r"\d{4}",


# ---------------------------------------------------------------------------------------------
# Simulation settings: each setting's own keys over the section's defaults.
SIM_KEYS = ("n_samples", "seq_len", "dim", "n_layers")
SIM_SETTING_DEFAULTS = {
    "norm": "l2",
    "scaling": "none",
    "rope": False,
    "causal": True,
    "residual": True,
}


def sim_setting(name):
    """Full parameter set of simulation setting ``name`` (section defaults filled in)."""
    section = config["simulate"]
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


def sim_setting_params(wildcards):
    return canonical(sim_setting(wildcards.setting))


def sim_settings():
    return list(config["simulate"]["settings"])


def theory_settings():
    """Settings that are paper 1's Eq. 1 exactly (L2, no RoPE, causal, residual): theory applies."""
    out = []
    for name in sim_settings():
        p = sim_setting(name)
        if p["norm"] == "l2" and not p["rope"] and p["causal"] and p["residual"]:
            out.append(name)
    return out


def sim_figure(name):
    spec = config["figures"]["simulation"][name]
    for s in spec["settings"]:
        sim_setting(s)  # raises a ConfigError naming the missing setting
    return spec


def sim_figure_params(wildcards):
    return canonical(sim_figure(wildcards.figure))


def sim_figure_stores(wildcards):
    return expand(
        "results/sim/{setting}.zarr", setting=sim_figure(wildcards.figure)["settings"]
    )


def theory_stores(wildcards):
    return expand("results/sim/{setting}.zarr", setting=theory_settings())


def sim_stores(wildcards):
    return expand("results/sim/{setting}.zarr", setting=sim_settings())


def figure_paths(stem):
    """``results/figures/{stem}.{fmt}`` for every configured format."""
    return expand(
        "results/figures/{stem}.{fmt}", stem=stem, fmt=config["figures"]["formats"]
    )


# ---------------------------------------------------------------------------------------------
# Models, datasets, extraction.
import re as _re


def configured_models():
    return list(config["models"])


def model_wildcard_pattern():
    """Regex of the model names ``prepare_model`` builds (trained-* come from train_model)."""
    names = configured_models()
    return "|".join(_re.escape(n) for n in names) if names else "(?!)"


def model_spec(name):
    if name not in config["models"]:
        raise ConfigError(f"models: no model {name!r}; defined: {configured_models()}")
    return config["models"][name]


def check_model(name):
    """A model an analysis names must be configured, or be one the pipeline trains."""
    if name.startswith("trained-"):
        return name
    model_spec(name)
    return name


def model_spec_params(wildcards):
    return canonical(model_spec(wildcards.model))


def prepare_model_inputs(wildcards):
    """A random_init model `like:` (or taking the `tokenizer:` of) another needs it first."""
    spec = model_spec(wildcards.model)
    refs = {spec[k] for k in ("like", "tokenizer") if spec.get(k)}
    return [f"resources/models/{check_model(r)}" for r in sorted(refs)]


def tokenizer_of(model):
    """The model whose tokenizer ``model`` uses: models sharing one share the data store."""
    if model.startswith("trained-"):
        return model.removesuffix(
            "-init"
        )  # an init twin shares its trained model's tokenizer
    spec = model_spec(model)
    ref = spec.get("tokenizer") or spec.get("like")
    return tokenizer_of(ref) if spec["source"] == "random_init" and ref else model


def dataset_spec(name):
    if name not in config["datasets"]:
        raise ConfigError(
            f"datasets: no dataset {name!r}; defined: {sorted(config['datasets'])}"
        )
    spec = dict(config["datasets"][name])
    spec.setdefault("mode", "first")
    spec.setdefault("seed", config["seed"])
    return spec


def dataset_spec_params(wildcards):
    return canonical(dataset_spec(wildcards.dataset))


def data_store(wildcards):
    return f"results/data/{wildcards.dataset}/{tokenizer_of(wildcards.model)}.zarr"


def n_shards(dataset):
    spec = dataset_spec(dataset)
    return math.ceil(spec["n_sequences"] / config["extract"]["shard_size"])


def shard_bounds_params(wildcards):
    size = config["extract"]["shard_size"]
    total = dataset_spec(wildcards.dataset)["n_sequences"]
    k = int(wildcards.shard)
    if k >= n_shards(wildcards.dataset):
        raise ConfigError(
            f"shard {k} beyond the {n_shards(wildcards.dataset)} shards of {wildcards.dataset}"
        )
    return [k * size, min((k + 1) * size, total)]


def score_shards(wildcards):
    return expand(
        "results/scores/{model}/{dataset}/{variant}/shard-{shard}.zarr",
        model=wildcards.model,
        dataset=wildcards.dataset,
        variant=wildcards.variant,
        shard=[f"{k:04d}" for k in range(n_shards(wildcards.dataset))],
    )


def reducers_for(model, dataset, variant):
    """Reducers of an extraction job: maps always; paper 2's per-sequence metrics where wanted."""
    names = ["moments", "groups"]
    if leakage_wants(model, dataset, variant):
        names += ["leakage", "sink"]
    return names


def reducers_params(wildcards):
    return reducers_for(wildcards.model, wildcards.dataset, wildcards.variant)


def leakage_wants(model, dataset, variant):
    """Whether a paper-2 experiment (leakage.smk) names this (model, dataset, variant)."""
    return variant in leakage_pairs().get((model, dataset), ())


def leakage_reducer_params(wildcards):
    """LeakageReducer kwargs of an extraction job ({} where paper 2 does not want it)."""
    if leakage_wants(wildcards.model, wildcards.dataset, wildcards.variant):
        return leakage_reducer_kwargs(wildcards.variant)
    return {}


def extract_mem_mb(wildcards, attempt):
    """Retries (profiles/slurm: retries) ask for more memory each attempt."""
    return 8000 * attempt


def gpu_count(wildcards):
    return 1 if config["device"] in ("cuda", "auto") else 0


def paper1_triples():
    sec = config["paper1_llm"]
    return [
        (check_model(m), dataset_spec(d) and d, v)
        for m in sec["models"]
        for d in sec["datasets"]
        for v in sec["variants"]
    ]


def paper1_score_stores(wildcards):
    return [f"results/scores/{m}/{d}/{v}.zarr" for m, d, v in paper1_triples()]


def paper1_normalized_stores(wildcards):
    return [f"results/normalized/{m}/{d}/{v}.zarr" for m, d, v in paper1_triples()]


def paper1_labels():
    return ["/".join(t) for t in paper1_triples()]


def scorecard_inputs(wildcards):
    """Named tables the scorecard reads; absent ones make their rows "not run in this config"."""
    inputs = {}
    if theory_settings():
        inputs["theory"] = "results/sim/theory.csv"
    if sim_settings():
        inputs["sim_index"] = "results/stats/simulation_index.csv"
    if config["paper1_llm"]["models"] and config["paper1_llm"]["datasets"]:
        inputs["llm_index"] = "results/stats/llm_index.csv"
    if compare_targets():
        inputs["train_comparison"] = "results/stats/train_comparison.csv"
    if leakage_targets():
        for name in ("decomposition", "rope_controls", "bos_effects", "position0"):
            inputs[name] = f"results/stats/paper2_{name}.csv"
    return inputs


# ---------------------------------------------------------------------------------------------
def all_targets():
    targets = []
    if sim_settings():
        targets += sim_stores(None)
        targets.append("results/stats/simulation_index.csv")
        for fig in config["figures"]["simulation"]:
            sim_figure(fig)
            targets += figure_paths(f"sim_{fig}")
    if theory_settings():
        targets.append("results/sim/theory.csv")
    targets += figure_paths("fig1_theory")
    if config["paper1_llm"]["models"] and config["paper1_llm"]["datasets"]:
        targets += paper1_normalized_stores(None)
        targets.append("results/stats/llm_index.csv")
        targets += figure_paths("llm_fig5")
        for m, d, v in paper1_triples():
            targets += figure_paths(f"llm_appE_{m}_{d}_{v}")
    targets += train_targets()
    targets += leakage_targets()
    targets += ["results/report/scorecard.csv", "results/report/scorecard.md"]
    return targets
