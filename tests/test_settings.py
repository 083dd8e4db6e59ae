"""causalpos.settings: the settings fields, the builders from the config and from a rule's params,
the scheduling keys a rule hands its job untracked, and the rule that no script reads the config
itself."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from dataclasses import dataclass

import pytest

from causalpos.paper2.settings import LeakageSettings, Position0Settings
from causalpos.settings import (
    Scheduling,
    canonical,
    check_keys,
    config_params,
    config_value,
    from_config,
    from_params,
    setting,
    untracked,
)
from causalpos.training.settings import LengthGenSettings
from tests.settings_defaults import disagreements
from tests.wfutil import REPO


@dataclass(frozen=True)
class Toy:
    name: str = setting(key="toy.name", doc="required, from the config")
    sizes: tuple[int, ...] = setting((1, 2), "toy.sizes", "a tuple field")
    words: list | None = setting(None, "toy.words", "a list field")
    chunk: int = setting(4, None, "not a choice of the config")
    each: float = setting(0.5, "toy.items.*.each", "a per-entry key")


def test_a_setting_carries_its_key_default_and_meaning():
    f = {f.name: f for f in dataclasses.fields(Toy)}
    assert f["sizes"].default == (1, 2) and f["sizes"].metadata["config"] == "toy.sizes"
    assert f["sizes"].metadata["doc"] == "a tuple field"
    assert f["name"].default is dataclasses.MISSING
    assert f["chunk"].metadata["config"] is None
    assert setting(1, "a.b", "d", only="swa").metadata == {
        "config": "a.b",
        "doc": "d",
        "only": "swa",
    }


def test_a_dict_default_is_copied_for_each_instance_and_checked_against_the_schema():
    @dataclass(frozen=True)
    class Spec:
        corpus: dict = setting({"type": "kjv"}, "train.corpus", "a mapping")

    a, b = Spec(), Spec()
    assert a.corpus == {"type": "kjv"} and a.corpus is not b.corpus
    a.corpus["books"] = ["Ruth"]
    assert Spec().corpus == {"type": "kjv"}
    assert disagreements(Spec) == []
    assert from_config(Spec, {"train": {"corpus": {"type": "kjv", "books": ["Mark"]}}}) == Spec(
        {"type": "kjv", "books": ["Mark"]}
    )


def test_from_params_refuses_an_unknown_key_and_makes_tuples_of_tuple_fields_only():
    toy = from_params(Toy, {"name": "x", "sizes": [3], "words": ["a"]})
    assert toy == Toy(name="x", sizes=(3,), words=["a"])
    with pytest.raises(ValueError, match=r"Toy has no key\(s\) \['nope'\]; allowed: \['chunk', "):
        from_params(Toy, {"name": "x", "nope": 1})
    with pytest.raises(ValueError, match=r"^here has no key\(s\) \['b'\]; allowed: \['a'\] "):
        check_keys(Toy, {"a": 1, "b": 2}, {"a"}, "here")
    # the settings classes share the builder
    assert Position0Settings.from_params({"conditions": ["causal"]}).conditions == ("causal",)
    with pytest.raises(ValueError, match=r"Position0Settings has no key\(s\) \['x'\]"):
        Position0Settings.from_params({"x": 1})


def test_from_config_reads_each_key_keeps_defaults_where_absent_and_takes_given_over_them():
    cfg = {"toy": {"name": "a", "sizes": [5, 6], "items": {"p": {"each": 9.0}}}, "other": 1}
    assert from_config(Toy, cfg) == Toy(name="a", sizes=(5, 6))  # words absent, * not read
    assert from_config(Toy, cfg, sizes=(7,), chunk=8) == Toy(name="a", sizes=(7,), chunk=8)
    assert config_value(cfg, "toy.items.p.each") == 9.0
    assert config_value(cfg, "toy.missing", 3) == 3
    with pytest.raises(KeyError, match="the config has no key toy.missing"):
        config_value(cfg, "toy.missing")
    with pytest.raises(ValueError, match=r"Toy has no key\(s\) \['bad'\]"):
        from_config(Toy, cfg, bad=1)


def test_config_params_are_the_config_fields_as_plain_sorted_values_and_rebuild_the_settings():
    toy = Toy(name="a", sizes=(5, 6), chunk=8)
    assert repr(config_params(toy)) == "{'name': 'a', 'sizes': [5, 6], 'words': None}"
    assert config_params(toy, "chunk")["chunk"] == 8
    assert from_params(Toy, config_params(toy)) == Toy(name="a", sizes=(5, 6))
    assert canonical({"b": (1, {"d": 2, "c": 3}), "a": None}) == {
        "a": None,
        "b": [1, {"c": 3, "d": 2}],
    }
    s = LeakageSettings(taus=(0.1,), perm_variants=("causal",), control_margin_logit=0.5)
    assert LeakageSettings.from_params(config_params(s)) == s
    assert "perm_chunk" not in config_params(s)  # not a choice of the config


def test_untracked_run_options_are_left_out_of_the_params_snakemake_compares():
    """A rule's ``run`` param is a SimpleNamespace: Snakemake's params trigger records the
    built-in types only, so a scheduling key reruns nothing while a settings dict does."""
    from snakemake.persistence import UNREPRESENTABLE, PersistenceBase

    run = untracked(Scheduling(device="cuda", checkpoint_every=3))
    assert (run.device, run.checkpoint_every, run.gram_batch_size) == ("cuda", 3, 16)
    serialize = PersistenceBase._serialize_param_builtin
    assert serialize(None, run) is UNREPRESENTABLE
    assert serialize(None, config_params(Scheduling())) != UNREPRESENTABLE


def test_the_scheduling_keys_defaults_are_the_schemas():
    assert disagreements(Scheduling) == []
    keys = {f.metadata["config"] for f in dataclasses.fields(Scheduling)}
    assert keys == {
        "device",
        "train.checkpoint_every",
        "train.gram.batch_size",
        "train.lengthgen.batch_size",
    }


def test_no_script_reads_the_config_and_no_module_builds_settings_of_its_own():
    """Scripts read their settings from the rule's params, never from ``snakemake.config``; the
    settings modules declare fields with :func:`setting` and build with :func:`from_params`."""
    scripts = sorted((REPO / "workflow" / "scripts").glob("*.py"))
    assert len(scripts) > 20
    assert [p.name for p in scripts if "snakemake.config" in p.read_text()] == []
    own = re.compile(r"^def (_key|_from_params)\(|has no key\(s\)", re.M)
    src = REPO / "src" / "causalpos"
    found = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if own.search(p.read_text()))
    assert found == ["settings.py"]


def test_no_rule_reads_the_config_dict():
    """The Snakefile and its rules read a setting through the resolver (``CFG.values(Common)``,
    ``CFG.settings(cls)``, ``CFG.value(key)``), never as ``config[...]``: one path from the
    config to a job, which canonicalizes what it returns."""
    files = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    raw = re.compile(r"\bconfig(\[|\.get\()")
    found = [
        f"{p.name}:{n}: {line.strip()}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if raw.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []


#: A field whose default the schema writes otherwise, with its reason.
SCHEMA_WRITES_OUT = {"TrainSettings.window = None, schema train.window = 32": "context // 4"}


def _settings_classes() -> list[type]:
    """Every dataclass of the settings modules (``causalpos/**/settings.py``) with a field the
    config sets."""
    import importlib

    src = REPO / "src"
    modules = sorted(p.relative_to(src).with_suffix("") for p in src.rglob("settings.py"))
    out = []
    for name in (".".join(m.parts) for m in modules):
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                dataclasses.is_dataclass(obj)
                and isinstance(obj, type)
                and obj.__module__ == name
                and any(f.metadata.get("config") for f in dataclasses.fields(obj))
            ):
                out.append(obj)
    return out


def test_every_settings_class_has_the_schemas_defaults():
    """Each field's default is its key's default in the schema, config.yaml agreeing; the keys
    the rules hand their jobs are among them."""
    classes = _settings_classes()
    found = [d for cls in classes for d in disagreements(cls) if d not in SCHEMA_WRITES_OUT]
    assert found == []
    keys = {f.metadata.get("config") for cls in classes for f in dataclasses.fields(cls)}
    assert {
        "train.corpus",
        "train.heldout",
        "train.tokenizer.vocab_size",
        "train.tokenizer.min_frequency",
        "train.lengthgen.smooth",
        "train.compare.dataset",
        "train.compare.map_layer",
        "theory.n_positions",
        "paper1_llm.fig5_layers",
        "leakage.bootstrap_strata",
        "rehearsal",
    } <= keys
    assert len(classes) >= 20, [c.__name__ for c in classes]


def _reads(read: str, key: str) -> bool:
    """Whether reading config key ``read`` reads declared key ``key`` (``*``: any name), or a
    section holding it."""

    return fnmatch.fnmatchcase(read, key) or key.startswith(read + ".")


def test_no_rule_reads_a_key_that_a_settings_class_declares():
    """A rule passes a setting as ``CFG.settings(cls)`` (or ``CFG.values(cls).field``), never
    as ``CFG.value("<key>")`` of a key a settings dataclass declares (its default and meaning
    are the field's); ``CFG.value`` reads only keys no dataclass holds."""
    declared = set(_declared_defaults())
    files = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    read = re.compile(r"""\bCFG\.value\(\s*(?:["']([^"']+)["'])?""")
    found = []
    for p in files:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            for m in read.finditer(line):
                key = m.group(1)
                if key is None or any(_reads(key, k) for k in declared):
                    found.append(f"{p.name}:{n}: {key or line.strip()}")
    assert found == [], (
        "pass these settings as **CFG.settings(cls) of the dataclass that declares them "
        "(a key no dataclass holds: a literal CFG.value key)"
    )
    assert _reads("train.lengthgen", "train.lengthgen.smooth")
    assert _reads("simulate.settings.l2.alpha", "simulate.settings.*.alpha")
    assert not _reads("train.heldout_extra", "train.heldout")


def test_a_config_value_is_read_as_params_hold_it():
    from causalpos.config import Resolved

    cfg = Resolved({"train": {"corpus": {"type": "kjv", "books": ("Ruth",)}, "heldout": ["Mark"]}})
    assert repr(cfg.value("train.corpus")) == "{'books': ['Ruth'], 'type': 'kjv'}"
    assert cfg.value("train.heldout") == ["Mark"]
    assert cfg.value("figures.labels", None) is None
    with pytest.raises(KeyError, match="train.tokenizer"):
        cfg.value("train.tokenizer.name")


#: The files of src/ that may spell the literal "float32": the declaration of FULL_PRECISION
#: (the models' default dtype), the table of dtype sizes (models.footprint, whose keys the torch
#: dtypes of models.device take) and the score maps' own dtype (io.shards, capture.attrs), which
#: no config key chooses.
FLOAT32_SPELLED = {
    "causalpos/settings.py": 1,
    "causalpos/models/footprint.py": 1,
    "causalpos/capture/attrs.py": 1,
    "causalpos/io/shards.py": 1,
}


def test_the_default_dtype_is_written_once():
    found = {}
    for path in sorted((REPO / "src").rglob("*.py")):
        n = len(re.findall(r"""["']float32["']""", path.read_text()))
        if n:
            found[path.relative_to(REPO / "src").as_posix()] = n
    assert found == FLOAT32_SPELLED, (
        "the models' default dtype is causalpos.settings.FULL_PRECISION: use it instead of "
        f"the literal (found {found})"
    )


def _declared_defaults() -> dict[str, list[str]]:
    """config key -> the modules whose ``setting(default, key)`` (or training's ``_hp(key,
    default)``) spells a default for it; ``shared(key)`` takes :class:`Common`'s."""
    import ast

    out: dict[str, list[str]] = {}
    for path in sorted((REPO / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            args = {"setting": node.args[1:2], "_hp": node.args[:1]}.get(node.func.id)
            keys = [k.value for k in node.keywords if k.arg == "key"] if args is not None else []
            for arg in [*(args or []), *keys]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.setdefault(arg.value, []).append(path.name)
                elif isinstance(arg, str):
                    out.setdefault(arg, []).append(path.name)
    return out


def test_each_config_keys_default_is_written_once():
    declared = _declared_defaults()
    assert declared["seed"] == ["settings.py"] and len(declared) > 60
    twice = {k: v for k, v in declared.items() if len(v) > 1}
    assert twice == {}, (
        "a key read by several settings dataclasses declares its default once (in "
        "causalpos.settings.Common) and the others read it with shared(key)"
    )


def test_common_keys_are_read_through_one_dataclass():
    from causalpos.config import Resolved
    from causalpos.settings import FULL_PRECISION, Common

    assert Resolved({"seed": 3, "dtype": "bfloat16"}).values(Common) == Common(3, "bfloat16")
    assert Resolved({}).values(Common, seed=5) == Common(5, FULL_PRECISION)
    assert Common.dtype == FULL_PRECISION == "float32"
    assert LengthGenSettings.batch_size == Scheduling.lengthgen_batch_size
    assert disagreements(Common) == []


def test_the_resolver_reads_no_declared_key_raw():
    """The resolver (``causalpos/config/``) reads a key a settings dataclass declares through
    ``values(cls)`` / ``settings(cls)``, never as ``config["a"]["b"]``: the field's default and
    meaning hold there too. A section read (``config["leakage"]``, whose keys are not all
    declared: experiments, per-model tables) is not such a read."""
    declared = set(_declared_defaults())
    chain = re.compile(r"""\bconfig((?:\[\s*["'][^"']+["']\s*\])+)""")
    part = re.compile(r"""["']([^"']+)["']""")
    found = [
        f"{p.name}:{n}: {key}"
        for p in sorted((REPO / "src" / "causalpos" / "config").glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        for key in (".".join(part.findall(m.group(1))) for m in chain.finditer(line))
        if any(fnmatch.fnmatchcase(key, k) for k in declared)
    ]
    assert found == []
