# Helpers shared by every stage: config resolution, target lists, wildcard constraints.
# No science here; the library (src/causalpos) holds it.

import sys
from pathlib import Path

# The library is imported from the checkout (not only an installed copy), so a Snakemake process
# running under --use-conda or without `pip install -e .` fingerprints the code that jobs will run.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from causalpos.fingerprint import fingerprint  # noqa: E402

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


wildcard_constraints:
    setting=r"[A-Za-z0-9_.-]+",
    figure=r"[A-Za-z0-9_]+",


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
    targets += train_targets()
    return targets
