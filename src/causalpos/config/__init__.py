"""Config resolution of the pipeline: the validated config dict -> plain values.

Everything the workflow's rules need from ``config.yaml`` beyond reading one key: simulation
settings with their section defaults, models and datasets (who shares whose tokenizer), shard
bounds, reducer lists, the experiments of paper 1, of the models trained here and of paper 2,
the statistics jobs' params, input-path lists, wildcard patterns and the targets of ``rule all``.
No Snakemake, no globals, no science and nothing heavy at import (no torch, transformers, xarray
or pandas), so every rule's inputs and params can be unit-tested on a config dict
(tests/config/test_resolved.py).

``Resolved(config)`` takes the config *after* ``snakemake.utils.validate`` filled in the
schema's defaults (workflow/schemas/config.schema.yaml). Its methods return strings, lists and
dicts; the ``*_params`` ones are the exact values of rule params, which Snakemake compares as
text: their structure and key order are part of the pipeline's behaviour (see :func:`canonical`).
A value the schema allows but the pipeline cannot use raises :class:`ConfigError` naming the key.

One module per config section, each a class ``Resolved`` inherits from (the list: CONTRIBUTING.md's
layout); all of them pure (they read nothing but the config dict) except ``checks``, the
config-time checks against the disk, and ``resources``.
"""

from causalpos.config.common import (
    VARIANT_PATTERN,
    ConfigError,
    Section,
    canonical,
    check_variant,
    names_pattern,
)
from causalpos.config.disk import MAX_PREFIX_TOKENS, capacity_bound
from causalpos.config.families import family_paths, score_dirs
from causalpos.config.leakage import LEAKAGE_DEFAULT_VARIANTS
from causalpos.config.resolved import Resolved
from causalpos.config.schema import schema_error_summary
from causalpos.config.shapes import TINY_MAX_POSITIONS
from causalpos.config.simulate import SIM_SETTING_DEFAULTS
from causalpos.config.train import TRAIN_KEYS, TRAIN_TYPE_KEYS, TRAIN_VARIANT_TYPES

__all__ = [
    "LEAKAGE_DEFAULT_VARIANTS",
    "MAX_PREFIX_TOKENS",
    "SIM_SETTING_DEFAULTS",
    "TINY_MAX_POSITIONS",
    "TRAIN_KEYS",
    "TRAIN_TYPE_KEYS",
    "TRAIN_VARIANT_TYPES",
    "VARIANT_PATTERN",
    "ConfigError",
    "Resolved",
    "Section",
    "canonical",
    "family_paths",
    "capacity_bound",
    "check_variant",
    "names_pattern",
    "schema_error_summary",
    "score_dirs",
]
