"""Config files read strictly: a key given twice in one mapping is an error naming the key, the
file and both lines (PyYAML and json, and so Snakemake's ``configfile:``, keep the last silently:
``extract: {batch_size: 4, batch_size: 2}`` would run with 2). A file is read as Snakemake reads
it (``snakemake.common.configfile``): as JSON first, whatever its name, then as YAML, so a JSON
config indented with tabs (not YAML) is read too. The Snakefile checks every config file it loads
(``config.yaml`` or each ``--configfile``) before the schema; ``causalpos verify`` loads a
store's config with :func:`load_config`."""

from __future__ import annotations

import json
import os
from json.decoder import JSONObject
from json.scanner import py_make_scanner
from pathlib import Path

import yaml

from causalpos.config.common import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key repeated within one mapping."""

    source = "<string>"


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)  # merge keys (<<) first: an override of a merged key is allowed
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: the constructor below names it
            continue
        if first is not None:
            raise ConfigError(
                f"{loader.source}: line {line}: key {key!r} appears twice in one mapping (first "
                f"at line {first}); YAML would keep the last value silently. Fix: keep one of them"
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _json_strict(text: str, source: str):
    """The JSON document ``text``; :class:`ConfigError` for a key repeated in one object (naming
    it, the file and the line the object opens on); :class:`json.JSONDecodeError` if it is not
    JSON."""
    decoder = json.JSONDecoder()

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        s, start = s_and_end
        pairs, end = JSONObject(s_and_end, strict, scan_once, None, list, memo)
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                line = s.count("\n", 0, start) + 1
                raise ConfigError(
                    f"{source}: line {line}: key {key!r} appears twice in the JSON object opened "
                    "there; JSON readers (Snakemake's among them) keep the last value silently. "
                    "Fix: keep one of them"
                )
            seen.add(key)
        return dict(pairs), end

    decoder.parse_object = parse_object
    decoder.scan_once = py_make_scanner(decoder)  # the pure-Python scanner calls parse_object
    return decoder.decode(text)


def load_config_strict(path: str | os.PathLike):
    """The config document in ``path`` read as Snakemake reads a config file: as JSON where it
    parses as JSON (whatever its name), else as YAML; :class:`ConfigError` for a key repeated in
    one mapping or object (naming it, the file and the line), or a file that is neither."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    try:
        return _json_strict(text, str(path))
    except json.JSONDecodeError:
        pass  # not JSON: YAML, as Snakemake tries next
    try:
        loader = _StrictLoader(text)  # its reader may refuse the text already
        loader.source = str(path)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{path}: not valid JSON or YAML (as YAML: {exc}). Fix: indent YAML with spaces "
            "only (tabs are not YAML); a JSON file, tabs allowed, must parse as JSON"
        ) from None


def check_config_files(paths: list[str | os.PathLike]) -> None:
    """Every config file the pipeline loads, read strictly (:func:`load_config_strict`)."""
    for path in paths:
        load_config_strict(path)


def _merge(base: dict, update: dict) -> dict:
    """``update`` merged into ``base`` as Snakemake merges several ``--configfile`` (nested
    mappings merged, other values replaced)."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


#: The config schema, relative to the pipeline directory.
SCHEMA = "workflow/schemas/config.schema.yaml"


def load_config(
    configfiles: list[str], *, pipeline: str | os.PathLike = ".", overrides: dict | None = None
) -> dict:
    """The validated config (schema defaults filled in, as the Snakefile has it) of a run given
    ``configfiles`` ([]: ``config.yaml``) relative to ``pipeline`` and its ``--config`` values
    (``overrides``, merged over the files as Snakemake merges them). :class:`LookupError` naming
    a file that is not there; :class:`ConfigError` for one that does not parse or validate."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from causalpos.config.schema import schema_error_summary

    pipeline = Path(pipeline)
    config: dict = {}
    for name in configfiles or ["config.yaml"]:
        path = pipeline / name
        if not path.is_file():
            raise LookupError(
                f"its config file {name} is not in {pipeline.resolve()} (run causalpos verify "
                "from the pipeline directory, or name the config with --configfile)"
            )
        config = _merge(config, load_config_strict(path) or {})
    config = _merge(config, dict(overrides or {}))
    try:
        validate(config, str(pipeline / SCHEMA))
    except WorkflowError as exc:
        raise ConfigError(schema_error_summary(exc, str(pipeline / SCHEMA))) from None
    return config
