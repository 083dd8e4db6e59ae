# Helpers of the paper-2 stage (leakage.smk): experiments, variant unions, settings, target lists,
# input functions. Kept apart from the rules (snakemake --lint: no functions beside rules); no
# science here. common.smk's leakage_wants / leakage_reducer_params read these.

LEAKAGE_DEFAULT_VARIANTS = ["causal", "bidirectional"]
# The tables aggregate_leakage writes (causalpos.leakage.PAPER2_TABLES), as results/stats/paper2_<name>.csv.
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
]


def leakage_experiments():
    """Experiment name -> {models, datasets, variants}, every name checked against the config."""
    out = {}
    for name, exp in config.get("leakage", {}).get("experiments", {}).items():
        variants = list(exp.get("variants") or LEAKAGE_DEFAULT_VARIANTS)
        if "causal" not in variants:
            raise ConfigError(
                f"leakage.experiments.{name}.variants must include 'causal' (the baseline of the "
                f"decomposition and BOS effects, and the run whose sink heads are probed); got {variants}"
            )
        out[name] = {
            "models": [check_model(m) for m in exp["models"]],
            "datasets": [dataset_spec(d) and d for d in exp["datasets"]],
            "variants": variants,
        }
    return out


def leakage_pairs():
    """(model, dataset) -> the union of its experiments' variants (causal first, then bidirectional)."""
    pairs = {}
    for exp in leakage_experiments().values():
        for m in exp["models"]:
            for d in exp["datasets"]:
                seen = pairs.setdefault((m, d), [])
                seen += [v for v in exp["variants"] if v not in seen]
    order = {"causal": 0, "bidirectional": 1}
    return {k: sorted(v, key=lambda x: order.get(x, 2)) for k, v in pairs.items()}


def leakage_variants(model, dataset):
    pairs = leakage_pairs()
    if (model, dataset) not in pairs:
        raise ConfigError(
            f"no leakage experiment names model {model!r} with dataset {dataset!r}; "
            f"configured pairs: {sorted(pairs)}"
        )
    return pairs[(model, dataset)]


def leakage_settings():
    """The summary's settings, cross-checked against the reducer's fits and windows."""
    sec = config["leakage"]
    red = sec["reducer"]
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


def leakage_reducer_kwargs(variant):
    """LeakageReducer keyword arguments of an extraction job (sorted: compared as text).

    The prompt-mean maps (2 x layers x heads x T^2 float64, ~280 MB for SmolLM2 at T = 256) are
    summed only for the variants the permutation test reads.
    """
    sec = leakage_settings()
    kwargs = dict(sec["reducer"])
    tested = sec["permutation_variants"]
    kwargs["mean_maps"] = bool(
        kwargs["mean_maps"]
        and sec["n_permutations"] > 0
        and (tested is None or variant in tested)
    )
    return canonical(kwargs)


def leakage_score_stores(wildcards):
    return expand(
        "results/scores/{model}/{dataset}/{variant}.zarr",
        model=wildcards.model,
        dataset=wildcards.dataset,
        variant=leakage_variants(wildcards.model, wildcards.dataset),
    )


def leakage_variants_params(wildcards):
    return leakage_variants(wildcards.model, wildcards.dataset)


def leakage_summary_params(wildcards):
    sec = leakage_settings()
    perm = sec["permutation_variants"]
    return canonical(
        {
            "fit": sec["fit"],
            "window": sec["window"],
            "floor_correct": sec["floor_correct"],
            "n_boot": config["stats"]["n_bootstrap"],
            "level": config["stats"]["confidence"],
            "n_perm": sec["n_permutations"],
            "perm_variants": None if perm is None else list(perm),
            "alpha": sec["alpha"],
            "taus": list(sec["taus"]),
            "bos_windows": list(sec["bos_windows"]),
            "seed": config["seed"],
        }
    )


def position0_params(wildcards):
    return canonical(dict(config["leakage"]["position0"]))


def leakage_label(pair):
    return f"{pair[0]}/{pair[1]}"


def leakage_summary_stores(wildcards):
    return [f"results/leakage/{m}/{d}.zarr" for m, d in leakage_pairs()]


def position0_stores(wildcards):
    return [f"results/position0/{m}/{d}.zarr" for m, d in leakage_pairs()]


def leakage_pair_labels():
    return [leakage_label(p) for p in leakage_pairs()]


def leakage_experiment(name):
    exps = leakage_experiments()
    if name not in exps:
        raise ConfigError(
            f"leakage.experiments has no experiment {name!r}; defined: {sorted(exps)}"
        )
    exp = exps[name]
    return [(m, d) for m in exp["models"] for d in exp["datasets"]]


def experiment_summary_stores(wildcards):
    return [
        f"results/leakage/{m}/{d}.zarr"
        for m, d in leakage_experiment(wildcards.experiment)
    ]


def experiment_position0_stores(wildcards):
    return [
        f"results/position0/{m}/{d}.zarr"
        for m, d in leakage_experiment(wildcards.experiment)
    ]


def experiment_labels(wildcards):
    return [leakage_label(p) for p in leakage_experiment(wildcards.experiment)]


def experiment_has_decomposition(name):
    pairs = leakage_pairs()
    return any(
        "bidirectional" in pairs[p] for p in leakage_experiment(name)
    )  # causal is always there


def _names_pattern(names):
    names = sorted(set(names))
    return "|".join(_re.escape(n) for n in names) if names else "(?!)"


def leakage_experiment_pattern():
    return _names_pattern(config.get("leakage", {}).get("experiments", {}))


def leakage_model_pattern():
    return _names_pattern(m for m, _ in leakage_pairs())


def leakage_dataset_pattern():
    return _names_pattern(d for _, d in leakage_pairs())


def paper2_table_paths():
    return [f"results/stats/paper2_{n}.csv" for n in PAPER2_TABLE_NAMES] + [
        "results/stats/paper2_tables.md"
    ]


def leakage_targets():
    """Everything paper 2 builds for the configured experiments (nothing when there are none)."""
    exps = leakage_experiments()
    if not exps:
        return []
    leakage_settings()
    targets = []
    for m, d in leakage_pairs():
        targets += [f"results/leakage/{m}/{d}.zarr", f"results/position0/{m}/{d}.zarr"]
        targets += figure_paths(f"paper2_heads_{m}_{d}")
    targets += paper2_table_paths()
    for name in exps:
        targets += figure_paths(f"paper2_layers_{name}")
        targets += figure_paths(f"paper2_position0_{name}")
        if experiment_has_decomposition(name):
            targets += figure_paths(f"paper2_shares_{name}")
    return targets
