"""Settings declared once (standard library only): each setting a field of a frozen dataclass that
carries its config key, its default and its meaning (:func:`setting`), built from the resolved
config (:func:`from_config`) or from a rule's params (:func:`from_params`).

A field's ``config`` metadata is its dotted config key (``*`` stands for any name of a mapping,
``simulate.settings.*.alpha``, which the caller supplies), or None where the config does not choose
it; its default is the key's default in ``workflow/schemas/config.schema.yaml``
(``tests/settings_defaults.py`` checks them). :class:`Scheduling`'s keys choose how and where jobs
run, never what they compute: rules pass them untracked (:func:`untracked`), so they rerun nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from types import SimpleNamespace
from typing import Any


def setting(default: Any = MISSING, key: str | None = None, doc: str = "", **meta: Any) -> Any:
    """A settings field: its default (none: required; a dict is copied per instance, canonical),
    its config key (None: not a choice of the config), its meaning, and further metadata
    (``only``: the positional type that reads a training hyper-parameter)."""
    metadata = {"config": key, "doc": doc, **meta}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: canonical(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _is_tuple(f: dataclasses.Field) -> bool:
    """A field holding a tuple (its annotation, a string under ``from __future__``)."""
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    return kind.startswith("tuple")


def check_keys(cls, params: Mapping[str, Any], allowed=None, where: str | None = None) -> None:
    """Raise on a key of ``params`` that is none of ``allowed`` (default: ``cls``' fields),
    naming the allowed ones and the module that declares them."""
    names = {f.name for f in fields(cls)} if allowed is None else set(allowed)
    unknown = sorted(set(params) - names)
    if unknown:
        raise ValueError(
            f"{where or cls.__name__} has no key(s) {unknown}; allowed: {sorted(names)} "
            f"({cls.__module__})"
        )


def from_params(cls, params: Mapping[str, Any]):
    """``cls`` from a flat mapping of its fields (a rule's params: lists become tuples where the
    field holds a tuple); a key that is no field raises, naming the allowed ones."""
    check_keys(cls, params)
    kinds = {f.name: _is_tuple(f) for f in fields(cls)}
    return cls(
        **{k: tuple(v) if kinds[k] and isinstance(v, list) else v for k, v in params.items()}
    )


#: A key the config does not hold (:func:`config_value`'s default in :func:`from_config`).
ABSENT = object()


def config_value(config: Mapping[str, Any], key: str, default: Any = MISSING) -> Any:
    """The value of dotted ``key`` in ``config`` (``default`` where a level is absent; KeyError
    where there is none)."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            if default is MISSING:
                raise KeyError(f"the config has no key {key}")
            return default
        node = node[part]
    return node


def config_fields(cls) -> list[dataclasses.Field]:
    """``cls``' fields that the config sets (a key without ``*``)."""
    return [f for f in fields(cls) if f.metadata.get("config") and "*" not in f.metadata["config"]]


def from_config(cls, config: Mapping[str, Any], **given: Any):
    """``cls`` with each field the config sets read from its key (the field's default where the
    config has none), and ``given`` over them."""
    read = {f.name: config_value(config, f.metadata["config"], ABSENT) for f in config_fields(cls)}
    return from_params(cls, {**{k: v for k, v in read.items() if v is not ABSENT}, **given})


def canonical(value: Any) -> Any:
    """``value`` as params hold it: every dict's keys sorted at every depth, tuples as lists
    (params are compared by their text: the order of a YAML file's keys must rerun nothing)."""
    if isinstance(value, Mapping):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def config_params(obj, *also: str) -> dict[str, Any]:
    """The fields of settings ``obj`` that the config sets, and those named in ``also``, as a
    rule's params (sorted by name, tuples as lists): :func:`from_params` rebuilds ``obj`` from
    them with the other fields at their defaults."""
    names = {f.name for f in config_fields(type(obj))} | set(also)
    return {n: canonical(getattr(obj, n)) for n in sorted(names)}


def untracked(obj) -> SimpleNamespace:
    """``obj``'s fields as a value Snakemake hands to a job without recording it (a params value
    of a type other than the built-in ones is not part of the params it compares), so changing
    one reruns nothing; it travels to any job (standard library only)."""
    return SimpleNamespace(**{f.name: getattr(obj, f.name) for f in fields(obj)})


#: Full precision: the config's default ``dtype`` (:class:`Common`), a model trained here's master
#: weights, and the dtype a random stand-in is built in where none is given.
FULL_PRECISION = "float32"


@dataclass(frozen=True)
class Common:
    """The top-level config keys that several stages read (a rule passes the one it needs)."""

    seed: int = setting(0, "seed", "every random draw's seed")
    dtype: str = setting(FULL_PRECISION, "dtype", "the models' weights and activations")
    n_bootstrap: int = setting(2000, "stats.n_bootstrap", "every bootstrap's replicates")
    confidence: float = setting(0.95, "stats.confidence", "every interval's confidence level")


@dataclass(frozen=True)
class ReportSettings:
    """What the scorecard says of the run as a whole (rule ``scorecard``)."""

    rehearsal: bool = setting(
        False,
        "rehearsal",
        "a rehearsal on random-weight stand-ins: the scorecard carries a banner saying its "
        "numbers mean nothing",
    )


def shared(key: str, doc: str = "", **meta: Any) -> Any:
    """A settings field reading a key that :class:`Common` declares, with Common's default (a
    key's default is written once: ``tests/test_settings.py``)."""
    (field,) = [f for f in fields(Common) if f.metadata["config"] == key]
    return setting(field.default, key, doc, **meta)


@dataclass(frozen=True)
class Scheduling:
    """The config keys that choose how and where jobs run, never what they compute
    (docs/configuration.md): a rule passes them as ``params.run`` (:func:`untracked`)."""

    device: str = setting("cpu", "device", "where models run: cpu, cuda or auto")
    checkpoint_every: int = setting(
        100, "train.checkpoint_every", "updates between a trained model's checkpoints"
    )
    gram_batch_size: int = setting(
        16, "train.gram.batch_size", "sequences per forward pass of the Gram panels"
    )
    lengthgen_batch_size: int = setting(
        16, "train.lengthgen.batch_size", "sequences per forward pass of the loss by position"
    )

    @property
    def gpu(self) -> int:
        """GPUs a model job holds: 1 where models run on one (``cuda``, ``auto``), so the
        scheduler never puts two such jobs on one card; 0 on ``cpu``."""
        return 0 if self.device == "cpu" else 1
