"""Each default written once: a settings dataclass's field default against its config key's default
in the schema (workflow/schemas/config.schema.yaml) and against the embedded default config
(config.yaml), for the tests of every settings module."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import yaml

from tests.wfutil import REPO

SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())

#: The keys the embedded default (config.yaml, sized for 2 CPU cores) sets away from the schema's
#: default, each with its reason: a choice of that config, not a second default.
CHOSEN_BY_CONFIG_YAML = {
    "leakage.n_permutations": "200 permutations on 2 cores (p >= 1/201); the default is the paper's",
    "leakage.permutation_variants": "the test on the decomposition's two runs only, on 2 cores",
    "leakage.position0.conditions": "the BOS-replacement run's position 0 too (claim 7)",
    "leakage.position0.n_permutations": "100 label permutations on 32 prompts, on 2 cores",
    "leakage.reducer.fits": "no saturated+both (its cost) on 2 cores",
    "leakage.reducer.windows": "full32: rows whose window of 32 (trained-swa) is full",
    "leakage.reducer.expected_stats": "early32 and full32 beside all: Table 9, trained-swa",
    "train.compare.dataset": "the trained-vs-init comparison on kjv-heldout128 (default: none)",
}

MISSING = object()


def schema_node(key: str) -> dict | None:
    """The schema of config key ``key`` (dotted; ``*`` stands for any name of a mapping whose
    entries share one schema, e.g. ``datasets.*.mode``), or None where the schema has none."""
    node = SCHEMA
    for part in key.split("."):
        if part == "*":
            node = node.get("additionalProperties")
        else:
            node = (node.get("properties") or {}).get(part)
        if not isinstance(node, dict):
            return None
    return node


def config_value(key: str):
    """The value config.yaml sets for ``key`` (MISSING where it sets none; keys with ``*``:
    MISSING, a choice of each entry)."""
    if "*" in key:
        return MISSING
    node = CONFIG
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def _plain(value):
    """Tuples as lists (the dataclasses hold tuples where the YAML has lists)."""
    return list(value) if isinstance(value, tuple) else value


def disagreements(cls) -> list[str]:
    """Every field of the settings dataclass ``cls`` whose config key (field metadata
    ``config``) has a schema default other than the field's, or a value in config.yaml other
    than that default (:data:`CHOSEN_BY_CONFIG_YAML` aside); [] where every default agrees."""
    out = []
    for f in dataclasses.fields(cls):
        key = f.metadata.get("config")
        if key is None:
            continue
        node = schema_node(key)
        if node is None:
            out.append(f"{cls.__name__}.{f.name}: the schema has no key {key}")
            continue
        if "default" not in node:
            continue  # a required key (a dataset's seq_len): no default to agree on
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if _plain(default) != node["default"]:
            out.append(f"{cls.__name__}.{f.name} = {default!r}, schema {key} = {node['default']!r}")
        value = config_value(key)
        if value is not MISSING and value != node["default"] and key not in CHOSEN_BY_CONFIG_YAML:
            out.append(f"config.yaml {key} = {value!r}, schema default {node['default']!r}")
    return out
