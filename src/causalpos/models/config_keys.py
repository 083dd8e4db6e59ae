"""The keys a transformers model config takes, read from transformers' source without importing it.

transformers keeps a key its config class does not know as a plain attribute (a ``random_init``
override ``num_hidden_layer: 3`` builds the default depth without a word):
:func:`unknown_config_keys` names such keys. transformers 5's config classes declare their fields
as annotated class attributes, so the keys are read from the source of the class's module
(importing it pulls in torch, ~2-6 CPU-s, too much for every Snakemake start): its annotated
fields, those of its bases in the module and of ``PreTrainedConfig``, its ``attribute_map``
aliases and :data:`LEGACY_KEYS` (tests/test_models.py checks them against ``to_dict()``).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path

#: Keywords a config accepts and converts rather than keeps under their name: the RoPE settings of
#: transformers 4 (folded into ``rope_parameters``), the dtype's older name, the label maps.
LEGACY_KEYS = frozenset(
    {
        "rope_theta",
        "rope_scaling",
        "partial_rotary_factor",
        "torch_dtype",
        "num_labels",
        "id2label",
        "label2id",
        "output_attentions",
        "tokenizer_class",
        "name_or_path",
    }
)


def _fields(tree: ast.Module) -> dict[str, tuple[set[str], list[str], str | None]]:
    """Class name -> (its annotated non-ClassVar fields and attribute_map keys, its bases'
    names, its ``model_type``) for every class of a module."""
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        keys: set[str] = set()
        model_type = None
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if "ClassVar" not in ast.unparse(stmt.annotation):
                    keys.add(stmt.target.id)
                elif stmt.target.id == "model_type" and isinstance(stmt.value, ast.Constant):
                    model_type = stmt.value.value
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                name = target.id if isinstance(target, ast.Name) else None
                if name == "attribute_map" and isinstance(stmt.value, ast.Dict):
                    keys |= {k.value for k in stmt.value.keys if isinstance(k, ast.Constant)}
                elif name == "model_type" and isinstance(stmt.value, ast.Constant):
                    model_type = stmt.value.value
        bases = [ast.unparse(b) for b in node.bases]
        out[node.name] = (keys, bases, model_type)
    return out


@functools.cache
def config_class_keys(model_type: str) -> frozenset[str] | None:
    """Every key a transformers config of ``model_type`` takes (see the module doc); None where
    its source cannot be found (then nothing is checked)."""
    spec = importlib.util.find_spec("transformers")  # a top-level package: nothing is imported
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    try:
        base = _fields(ast.parse((root / "configuration_utils.py").read_text()))
    except (OSError, SyntaxError):
        return None
    common = base.get("PreTrainedConfig", (set(), [], None))[0]
    for n in dict.fromkeys([model_type, model_type.removesuffix("_text")]):
        path = root / "models" / n / f"configuration_{n}.py"
        try:
            classes = _fields(ast.parse(path.read_text()))
        except (OSError, SyntaxError):
            continue
        for keys, bases, found in classes.values():
            if found != model_type:
                continue
            out = set(keys)
            todo = list(bases)
            while todo:  # bases defined in the same module
                b = todo.pop()
                if b in classes:
                    out |= classes[b][0]
                    todo += classes[b][1]
            return frozenset(out | common | LEGACY_KEYS)
    return None


def unknown_config_keys(model_type: str, keys: Iterable[str]) -> list[str]:
    """One sentence per key of ``keys`` that a ``model_type`` config does not take, with the
    nearest known key; [] when all are known (or the config's keys cannot be read)."""
    known = config_class_keys(model_type)
    if known is None:
        return []
    out = []
    for key in sorted(set(keys) - known):
        near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        out.append(f"{key!r} is not a key of a {model_type!r} config{hint}")
    return out
