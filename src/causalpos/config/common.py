"""What every section of the config resolver shares: the error type, canonical params, name
patterns, the variant check and :class:`Section`, the base of the per-section classes that
:class:`causalpos.config.Resolved` is composed of. Pure: reads nothing but the config dict."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from causalpos.models.variants import parse_variant, variant_names
from causalpos.settings import Scheduling, config_params, config_value, from_config, untracked
from causalpos.settings import canonical as canonical  # the resolver's params, as settings'


class ConfigError(ValueError):
    """A config value that the schema allows but the pipeline cannot use (names the key)."""


def names_pattern(names: Iterable[str]) -> str:
    """Regex matching exactly ``names`` (in their order), or nothing when there are none."""
    names = list(names)
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


#: Regex of the forward-pass variant names (the ``{variant}`` wildcard constraint): the atoms
#: and every valid composition, built from the library's list (causalpos.models.variants:
#: torch-free), so an invalid composition matches no rule.
VARIANT_PATTERN = names_pattern(variant_names())


#: Names from the config that become path components (settings, models, datasets, the trained
#: tokenizer ...): a letter or digit first, no ``/``, so none is ``.``, ``..`` or a path.
PATH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_path_name(key: str, name: Any) -> str:
    """``name`` if it is a :data:`PATH_NAME`, else a ConfigError naming ``key`` (the schema says
    the same; this holds whatever the schema says, since the name is joined to a directory that
    a job replaces)."""
    if not isinstance(name, str) or not PATH_NAME.fullmatch(name):
        raise ConfigError(
            f"{key}: {name!r} cannot name a directory: use a letter or digit first, then "
            "letters, digits, '_', '.' or '-' (no '/', not '.' or '..')"
        )
    return name


def check_variant(key: str, name: str) -> str:
    """``name`` if it is a forward-pass variant, else a ConfigError naming ``key`` and the allowed values."""
    try:
        parse_variant(name)
    except ValueError as exc:  # the parser says what is wrong and what to write instead
        raise ConfigError(f"{key}: {exc}") from None
    return name


class Section:
    """Base of the per-section resolvers: :class:`causalpos.config.Resolved` inherits from all of
    them, so a section's methods call the others' through ``self``. Nothing is cached:
    ``self.config`` is read on each call, as Snakemake's input functions would."""

    config: dict

    def value(self, key: str, *default: Any) -> Any:
        """The value of dotted config ``key`` as params hold it (:func:`canonical`; ``default``
        where a level is absent, else a KeyError naming the key)."""
        return canonical(config_value(self.config, key, *default))

    def values(self, cls, **given: Any):
        """Settings dataclass ``cls`` with each field the config sets read from its key
        (:func:`causalpos.settings.from_config`), and ``given`` over them: a rule reads a setting
        as ``CFG.values(Common).seed``."""
        return from_config(cls, self.config, **given)

    def settings(self, cls, **given: Any) -> dict:
        """A rule's params of settings dataclass ``cls`` (:meth:`values` as a flat mapping); the
        script rebuilds ``cls`` with :func:`causalpos.settings.from_params`."""
        return config_params(self.values(cls, **given), *given)

    def run_options(self):
        """The :class:`~causalpos.settings.Scheduling` keys as a rule's untracked ``run``
        param: where and how its job runs, which changes no number and reruns nothing."""
        return untracked(self.values(Scheduling))

    def local_rules(self, rules: Iterable[str]) -> list[str]:
        """The rules that a cluster run's submitting Snakemake process runs itself (config
        ``local_rules``); a name that is none of ``rules`` (the workflow's) raises, naming
        them."""
        names, known = self.value("local_rules"), sorted(rules)
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ConfigError(
                f"causalpos: local_rules names no rule of this workflow: {', '.join(unknown)} "
                f"(rules: {', '.join(known)}). Fix: remove it from local_rules"
            )
        return names
