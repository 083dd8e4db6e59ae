"""Schema errors in a few lines: what the Snakefile prints when a config fails the JSON schema
(workflow/schemas/config.schema.yaml). Pure: formats the error it is given."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Keys the schema no longer has -> what replaces them (said where a config still gives one).
RETIRED = {
    "leakage.plant_stream.margin": (
        "the dose series has no margin of its own: dose 0 is judged against the model's "
        "negative-control margin on logits (leakage.controls.margin.logit, or "
        "leakage.per_model.<model>.margin.logit): remove the key"
    ),
}


def _key_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def schema_error_summary(error: BaseException, schema_file: str = "") -> str:
    """A few lines on a config that fails the JSON schema (``error``: a ``ValidationError`` or
    the ``WorkflowError`` wrapping it): the key path, the value, what is wrong (for an unknown
    key, the keys allowed there), never the schema itself."""
    # snakemake's WorkflowError keeps only the text; the ValidationError is its context
    for inner in (error, error.__cause__, error.__context__, *getattr(error, "args", ())):
        if hasattr(inner, "absolute_path") and hasattr(inner, "validator"):
            error = inner
            break
    if not hasattr(error, "absolute_path"):
        return str(error)
    path = _key_path(error.absolute_path)
    lines = [f"invalid config at `{path or '(top level)'}`: {error.message}"]
    instance = error.instance
    if not isinstance(instance, (dict, list)) or len(repr(instance)) <= 120:
        text = repr(instance)
        lines.append(f"  value: {text if len(text) <= 200 else text[:200] + '...'}")
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        if allowed:
            lines.append(f"  allowed keys there: {', '.join(allowed)}")
        extra = sorted(set(instance) - set(allowed)) if isinstance(instance, dict) else []
        for key in extra:
            retired = RETIRED.get(f"{path}.{key}" if path else key)
            if retired:
                lines.append(f"  `{path}.{key}` is retired: {retired}")
    for sub in list(getattr(error, "context", None) or [])[:4]:
        lines.append(f"  - {sub.message}")
    description = " ".join(str(schema.get("description", "")).split())
    if description and error.validator != "additionalProperties":
        lines.append(f"  `{path}`: {description[:300]}")
    if schema_file:
        lines.append(f"  every key, its default and its allowed values: {schema_file}")
    return "\n".join(lines)
