"""Config resolution of the pipeline: the validated config dict -> plain values.

``Resolved(config)`` takes the config *after* ``snakemake.utils.validate`` filled in the schema's
defaults and gives every rule's inputs, params, wildcard patterns and the targets of ``rule all``
as strings, lists and dicts. The ``*_params`` are the exact values of rule params, which Snakemake
compares as text: their structure and key order are behaviour (:func:`canonical`). A value the
schema allows but the pipeline cannot use raises :class:`ConfigError` naming the key. One module
per config section (CONTRIBUTING.md's layout), all pure but ``checks``, ``strict``, ``disk`` and
``resources``; nothing heavy at import (no torch, xarray or pandas)."""

from causalpos.config.common import VARIANT_PATTERN, ConfigError
from causalpos.config.families import family_paths, score_dirs
from causalpos.config.resolved import Resolved
from causalpos.config.schema import schema_error_summary
from causalpos.config.simulate import SIM_SETTING_DEFAULTS
from causalpos.config.train import TRAIN_KEYS, TRAIN_TYPE_KEYS

__all__ = [
    "SIM_SETTING_DEFAULTS",
    "TRAIN_KEYS",
    "TRAIN_TYPE_KEYS",
    "VARIANT_PATTERN",
    "ConfigError",
    "Resolved",
    "family_paths",
    "schema_error_summary",
    "score_dirs",
]
