"""Rerun guarantees for edits of the library and bad configs, dry-run against the session's
smoke run (tests/conftest.py: this worker's own copy). A module of its own so that these dry
runs can go to the other worker than tests/workflow/test_smoke.py's.
"""

from __future__ import annotations

import re
import shutil
import time

import pytest
import yaml

from causalpos.io.fingerprint import import_closure
from tests.wfutil import SMOKE, planned_jobs, planned_reasons, rule_counts, snakemake

pytestmark = pytest.mark.slow


def test_editing_a_library_module_reruns_only_its_stages(smoke_pipeline):
    module = smoke_pipeline / "src" / "causalpos" / "figures" / "paper1.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit\n")
        counts = rule_counts(planned_jobs(smoke_pipeline, "--configfile", SMOKE))
        assert counts == {
            "plot_fig1": 1,
            "plot_simulation": 1,  # one job per family of figures
            "plot_llm_fig5": 1,
            "plot_llm_appendix": 1,
        }, counts
    finally:
        module.write_text(original)
    assert planned_jobs(smoke_pipeline, "--configfile", SMOKE) == []


@pytest.mark.parametrize(
    "edit, names",
    [
        (lambda c: c["simulate"].update(n_sampels=5), "n_sampels"),
        (lambda c: c["simulate"]["settings"]["l2_a000"].update(norm="rms"), "norm"),
        (lambda c: c.update(device="tpu"), "device"),
        (lambda c: c["figures"]["simulation"]["fig2"].update(settings=["nope"]), "nope"),
    ],
)
def test_bad_config_fails_before_any_job_naming_the_key(smoke_pipeline, tmp_path, edit, names):
    cfg = yaml.safe_load((smoke_pipeline / SMOKE).read_text())
    edit(cfg)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = snakemake(smoke_pipeline, "-n", "--configfile", str(bad), check=False)
    assert proc.returncode != 0
    assert names in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "module",
    [
        "paper1/diagonal.py",
        "paper2/tables/assemble.py",
        "training/loop.py",
        "io/store.py",
        "stats.py",
    ],
)
def test_a_module_edit_reruns_exactly_the_rules_whose_scripts_import_it(smoke_pipeline, module):
    """The jobs a dry run reruns because their code changed are exactly those of the rules whose
    script's import closure holds the module; every other planned job only follows an input."""
    path = smoke_pipeline / "src" / "causalpos" / module
    package = smoke_pipeline / "src" / "causalpos"
    importers = {
        s.stem
        for s in (smoke_pipeline / "workflow" / "scripts").glob("*.py")
        if path.resolve() in import_closure(s, package)
    }
    # A rule made by `use rule A as B` runs A's script (extract_scores_shard: extract_scores').
    for smk in (smoke_pipeline / "workflow" / "rules").glob("*.smk"):
        for base, alias in re.findall(r"^use rule (\w+) as (\w+)", smk.read_text(), re.M):
            if base in importers:
                importers.add(alias)
    in_run = {
        rule for rule, _ in planned_reasons(smoke_pipeline, "--forceall", "--configfile", SMOKE)
    }
    original = path.read_text()
    try:
        path.write_text(original + "\n# an edit\n")
        planned = planned_reasons(smoke_pipeline, "--configfile", SMOKE)
    finally:
        path.write_text(original)
    # Snakemake names one reason per job: a job whose input is rebuilt upstream reads "updated by
    # another job" even when its own code changed too. So: no job reruns for its code unless its
    # script imports the module; every importer reruns; everything else only follows an input.
    rules = {rule for rule, _ in planned}
    changed = {rule for rule, reason in planned if "Params have changed" in reason}
    assert changed <= importers, (module, sorted(changed - importers))
    assert importers & in_run <= rules, (module, sorted((importers & in_run) - rules))
    others = {reason for rule, reason in planned if rule not in importers}
    assert all("updated by another job" in r for r in others), others


def test_retraining_a_model_does_not_resample_its_prompts(smoke_pipeline, tmp_path):
    """The trained models' prompts come from the trained tokenizer (one store for them all),
    so a new training run reruns that model's jobs but never ``sample_sequences``."""
    cfg = yaml.safe_load((smoke_pipeline / SMOKE).read_text())
    steps = cfg["train"]["steps"]
    cfg["train"]["variants"]["rope"] = {
        **(cfg["train"]["variants"]["rope"] or {}),
        "steps": steps + 1,
    }
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(smoke_pipeline, "--configfile", str(edited))
    counts = rule_counts(jobs)
    assert counts["train_model"] == 1 and ("train_model", "variant=rope") in jobs, counts
    assert counts["extract_scores_shard"] >= 1, counts  # the retrained model's scores follow
    assert "sample_sequences" not in counts and "train_tokenizer" not in counts, counts


def test_memory_fraction_without_auto_batch_and_the_device_rerun_nothing(smoke_pipeline, tmp_path):
    """Where the model runs and the memory share of an auto batch (the batch is fixed here)
    cannot change a score: neither is a param of extraction, so changing them plans no job."""
    cfg = yaml.safe_load((smoke_pipeline / SMOKE).read_text())
    assert cfg["extract"]["batch_size"] != "auto" and cfg["device"] == "cpu"
    cfg["extract"]["memory_fraction"] = 0.5
    cfg["device"] = "auto"
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg))
    assert planned_jobs(smoke_pipeline, "--configfile", str(edited)) == []


def test_editing_a_corpus_file_or_a_model_file_reruns_exactly_what_reads_it(
    smoke_pipeline, tmp_path
):
    """A ``text`` corpus and a ``local`` model named by path are inputs of the rules that read
    them: built once, an in-place edit of one file reruns that rule's job and nothing else."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"doc{i}.txt").write_text(f"document {i} " + "word " * 200)
    local = tmp_path / "local-model"
    shutil.copytree(smoke_pipeline / "resources" / "models" / "tiny-random", local)
    cfg = yaml.safe_load((smoke_pipeline / SMOKE).read_text())
    cfg["datasets"]["mytext"] = {
        "corpus": {"type": "text", "path": str(corpus)},
        "seq_len": 16,
        "n_sequences": 3,
    }
    cfg["models"]["mylocal"] = {"source": "local", "path": str(local)}
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg))
    data = "results/data/mytext/mylocal.zarr"
    args = (data, "--configfile", str(edited))
    snakemake(smoke_pipeline, "--cores", "1", *args)
    assert planned_jobs(smoke_pipeline, *args) == []
    time.sleep(1.1)  # a later mtime on every file system (Snakemake also compares checksums)
    (corpus / "doc1.txt").write_text("an edited document " + "word " * 200)
    assert planned_jobs(smoke_pipeline, *args) == [
        ("sample_sequences", "dataset=mytext, tokenizer=mylocal")
    ]
    snakemake(smoke_pipeline, "--cores", "1", *args)
    weights = sorted(local.glob("*.safetensors"))[0]
    data = bytearray(weights.read_bytes())
    data[-4:] = b"\x00\x00\x00\x40"  # edited in place: the last float32 becomes 2.0
    weights.write_bytes(bytes(data))
    assert planned_jobs(smoke_pipeline, *args) == [
        ("prepare_model", "model=mylocal"),
        ("sample_sequences", "dataset=mytext, tokenizer=mylocal"),
    ]


#: The config keys that choose how and where jobs run, never what they compute: changing one
#: reruns nothing (docs/configuration.md lists them). Every other key reaches some output.
SCHEDULING_KEYS = {
    "device": "cuda",
    "local_rules": [],
    "extract.memory_fraction": 0.5,  # read only with batch_size "auto", which sizes a batch
    "train.checkpoint_every": 3,
    "train.gram.batch_size": 5,
    "train.lengthgen.batch_size": 5,
}


def _schema_leaves(node: dict, path: tuple[str, ...] = ()):
    """Dotted keys of the schema's leaves (containers of named entries aside)."""
    for name, sub in (node.get("properties") or {}).items():
        if sub.get("properties"):
            yield from _schema_leaves(sub, (*path, name))
        elif sub.get("type") != "object":
            yield ".".join((*path, name))


def test_a_config_key_changes_an_output_or_is_a_scheduling_key(smoke_pipeline, tmp_path):
    """Each scheduling key, changed, reruns nothing; every other key of the schema is read where
    a job's params or the DAG are made (the config resolver, the rules, the Snakefile or a
    settings object's fields), so no key is kept that nothing reads."""
    import dataclasses
    import inspect

    from causalpos import settings as common
    from causalpos.capture import settings as capture_settings
    from causalpos.paper1 import settings as paper1_settings
    from causalpos.paper2 import settings as paper2_settings
    from causalpos.paper2.extraction.reducers import LeakageReducer
    from causalpos.sampling import SequenceSample
    from causalpos.training import settings as training_settings

    schema = yaml.safe_load((smoke_pipeline / "workflow/schemas/config.schema.yaml").read_text())
    leaves = set(_schema_leaves(schema))
    assert set(SCHEDULING_KEYS) <= leaves, sorted(set(SCHEDULING_KEYS) - leaves)
    cfg = yaml.safe_load((smoke_pipeline / SMOKE).read_text())
    for key, value in SCHEDULING_KEYS.items():
        edited_cfg = yaml.safe_load(yaml.safe_dump(cfg))
        *parents, last = key.split(".")
        node = edited_cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
        edited = tmp_path / f"{key}.yaml"
        edited.write_text(yaml.safe_dump(edited_cfg))
        assert planned_jobs(smoke_pipeline, "--configfile", str(edited)) == [], key
    sources = "".join(
        p.read_text()
        for p in [
            smoke_pipeline / "Snakefile",
            *(smoke_pipeline / "workflow" / "rules").glob("*.smk"),
            *(smoke_pipeline / "src" / "causalpos" / "config").glob("*.py"),
        ]
    )
    declared = [
        f
        for mod in (capture_settings, paper1_settings, paper2_settings, training_settings, common)
        for cls in vars(mod).values()
        if dataclasses.is_dataclass(cls)
        for f in dataclasses.fields(cls)
    ]
    fields = {f.name for f in declared} | {f.name for f in dataclasses.fields(SequenceSample)}
    keys = {f.metadata.get("config") for f in declared}  # a field's key: its param's name aside
    # leakage.reducer's keys are LeakageReducer's keyword arguments, passed as they are
    fields |= set(inspect.signature(LeakageReducer).parameters)
    unread = [
        key
        for key in sorted(leaves - set(SCHEDULING_KEYS))
        if f'"{key.rsplit(".", 1)[-1]}"' not in sources
        and f'"{key}"' not in sources
        and key.rsplit(".", 1)[-1] not in fields
        and key not in keys
    ]
    assert unread == [], unread
