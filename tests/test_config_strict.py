"""Strict inputs (causalpos.config.strict and the checks before any job): strict configs (a key
given twice, a random_init model's `config:` keys, corpus keys per type), what a dry run refuses
that a job found late (a local directory without config.json or safetensors, a truncated GGUF, a
seq_len no machine holds, a tokenizer needing remote code), one message for a full disk, and
Snakemake's clean-up beside a symlinked output directory."""

from __future__ import annotations

import ast
import errno
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from snakemake.utils import validate

from causalpos.config import ConfigError, Resolved

REPO = Path(__file__).resolve().parents[1]
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def smoke_config(edit=None) -> dict:
    cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
    if edit is not None:
        edit(cfg)
    validate(cfg, SCHEMA)
    return cfg


def check(edit=None) -> list[str]:
    return Resolved(smoke_config(edit), document_sizes=lambda corpus: None).check()


# --- strict configs -------------------------------------------------------------------------------


def test_a_key_given_twice_is_refused_naming_it_the_file_and_both_lines(tmp_path):
    from causalpos.config.yamlfile import load_yaml_strict

    path = tmp_path / "c.yaml"
    path.write_text("seed: 0\nextract:\n  batch_size: 4\n  shard_size: 8\n  batch_size: 2\n")
    with pytest.raises(ConfigError) as info:
        load_yaml_strict(path)
    assert str(info.value) == (
        f"{path}: line 5: key 'batch_size' appears twice in one mapping (first at line 3); YAML "
        "would keep the last value silently. Fix: keep one of them"
    )
    # flow style, and the same key in two mappings is fine
    path.write_text("extract: {batch_size: 4, batch_size: 2}\n")
    with pytest.raises(ConfigError, match="key 'batch_size' appears twice"):
        load_yaml_strict(path)
    path.write_text("a: {k: 1}\nb: {k: 2}\n")
    assert load_yaml_strict(path) == {"a": {"k": 1}, "b": {"k": 2}}


@pytest.mark.slow
def test_a_dry_run_refuses_a_config_file_with_a_key_given_twice(tmp_path):
    from wfutil import SMOKE, copy_pipeline, snakemake

    work = copy_pipeline(tmp_path / "pipeline")
    text = (
        (work / SMOKE)
        .read_text()
        .replace("  batch_size: 4\n", "  batch_size: 4\n  batch_size: 2\n")
    )
    (work / "configs" / "dup.yaml").write_text(text)
    proc = snakemake(work, "-n", "--configfile", "configs/dup.yaml", check=False)
    assert proc.returncode != 0
    assert "key 'batch_size' appears twice in one mapping" in proc.stdout + proc.stderr
    assert "dup.yaml: line" in proc.stdout + proc.stderr


def test_a_misspelt_key_of_a_random_init_config_is_refused_before_any_job():
    def edit(c):
        c["models"]["tiny-random"]["config"]["num_hidden_layer"] = 3

    with pytest.raises(
        ConfigError,
        match=r"models\.tiny-random\.config: 'num_hidden_layer' is not a key of a 'llama' config "
        r"\(did you mean 'num_hidden_layers'\?\)",
    ):
        check(edit)

    # a model `like:` it inherits its architecture; a legacy RoPE key is a key
    def like(c):
        c["models"]["twin"] = {
            "source": "random_init",
            "like": "tiny-random",
            "config": {"rope_thta": 1.0},
        }

    with pytest.raises(ConfigError, match=r"models\.twin\.config: 'rope_thta'"):
        check(like)
    check(lambda c: c["models"]["tiny-random"]["config"].update(rope_theta=5e5))


def test_prepare_refuses_a_misspelt_config_key_transformers_would_keep(tmp_path):
    from causalpos.models.architectures import ModelSpecError
    from causalpos.models.load import build_model_dir

    spec = {"source": "random_init", "architecture": "qwen3", "config": {"num_hidden_layer": 3}}
    with pytest.raises(ModelSpecError, match="'num_hidden_layer' is not a key of a 'qwen3' config"):
        build_model_dir("m", spec, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_the_config_keys_read_from_source_cover_the_classes_own():
    """Every field a config class writes into its config.json is a key the check knows, and a
    misspelling is not (the keys are read from transformers' source without importing it)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from causalpos.models.architectures import ARCHITECTURES
    from causalpos.models.config_keys import config_class_keys

    for model_type in ARCHITECTURES.values():
        written = {k for k in CONFIG_MAPPING[model_type]().to_dict() if not k.startswith("_")}
        keys = config_class_keys(model_type)
        assert written - {"model_type", "transformers_version"} <= keys, model_type
        assert "num_hidden_layer" not in keys and "num_hidden_layers" in keys


def test_corpus_keys_are_checked_per_type_before_any_job():
    def edit(c):
        c["datasets"]["noise"] = {
            "corpus": {"type": "random_tokens", "books": ["Ruth"]},
            "seq_len": 8,
            "n_sequences": 2,
        }

    with pytest.raises(
        ConfigError,
        match=r"datasets\.noise\.corpus: corpus type 'random_tokens': unknown key\(s\) \['books'\]",
    ):
        check(edit)


# --- what a dry run refuses now -------------------------------------------------------------------


def _local(tmp_path: Path) -> Path:
    from conftest import _train_tokenizer, tiny_pair

    tok = _train_tokenizer(bos=True)
    model, _ = tiny_pair("llama", vocab_size=len(tok))
    src = tmp_path / "user-model"
    model.save_pretrained(src)
    tok.save_pretrained(src)
    return src


def _with_local(src: Path):
    def edit(c):
        c["models"]["loc"] = {"source": "local", "path": str(src)}

    return edit


def test_a_local_directory_without_config_json_is_refused_before_any_job(tmp_path):
    src = _local(tmp_path)
    check(_with_local(src))
    (src / "config.json").unlink()
    with pytest.raises(
        ConfigError, match=rf"models\.loc\.path: {src} has no config\.json \(not an HF-format"
    ):
        check(_with_local(src))


def test_a_folder_with_only_a_pickle_is_refused_at_config_time_and_by_prepare_model(tmp_path):
    from causalpos.models.architectures import ModelSpecError
    from causalpos.models.load import build_model_dir

    src = _local(tmp_path)
    (src / "model.safetensors").rename(src / "pytorch_model.bin")
    said = rf"{src} holds no \*\.safetensors weights \(found pytorch_model\.bin\): the pipeline loads safetensors only"
    with pytest.raises(ConfigError, match=rf"models\.loc\.path: {said}"):
        check(_with_local(src))
    with pytest.raises(ModelSpecError, match=rf"model 'loc' .*{said}"):
        build_model_dir("loc", {"source": "local", "path": str(src)}, tmp_path / "loc")
    assert not (tmp_path / "loc").exists()  # never a prepared model with `sha256: {}`


def test_a_tokenizer_that_needs_remote_code_is_refused_naming_the_model(tmp_path):
    from causalpos.models.architectures import ModelSpecError
    from causalpos.models.load import build_model_dir

    src = _local(tmp_path)
    tok_cfg = json.loads((src / "tokenizer_config.json").read_text())
    tok_cfg["auto_map"] = {"AutoTokenizer": ["tok.MyTokenizer", None]}
    (src / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    with pytest.raises(
        ConfigError, match=r"models\.loc\.path: .*tokenizer_config\.json has `auto_map`"
    ):
        check(_with_local(src))
    with pytest.raises(ModelSpecError, match=r"model 'loc' .*`auto_map`.*trust_remote_code=False"):
        build_model_dir("loc", {"source": "local", "path": str(src)}, tmp_path / "loc")


def _gguf(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_token_list(["a", "b", "c"])
    w.add_tensor("x", np.ones((16, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_truncated_gguf_is_refused_before_any_job_and_by_prepare(tmp_path):
    import gguf

    from causalpos.models.architectures import ModelSpecError
    from causalpos.models.gguf import prepare_gguf

    path = _gguf(tmp_path / "m.gguf")
    reader = gguf.GGUFReader(path)  # where gguf's own reader puts the end of the tensor data
    need = max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    del reader
    assert path.stat().st_size >= need

    def edit(c):
        c["models"]["g"] = {"source": "gguf", "path": str(path)}

    check(edit)
    data = path.read_bytes()
    path.write_bytes(data[: need - 100])
    said = (
        rf"{path} is truncated: its header declares tensor data up to byte {need:,}, the file "
        rf"has {need - 100:,} bytes \(100 missing"
    )
    with pytest.raises(ConfigError, match=rf"models\.g\.path: {said}"):
        check(edit)
    with pytest.raises(ModelSpecError, match=said):
        prepare_gguf("g", {"source": "gguf", "path": str(path)}, tmp_path / "out", tmp_path)
    path.write_bytes(data[:40])  # cut inside the header
    with pytest.raises(ConfigError, match=rf"{path} is truncated: its header ends after byte 40"):
        check(edit)
    path.write_bytes(data[: need - 1])  # a byte short of the data: still refused
    with pytest.raises(ConfigError, match="1 missing"):
        check(edit)
    path.write_bytes(data[:need])  # the data whole: accepted
    check(edit)


def test_a_seq_len_whose_statistics_no_machine_holds_is_refused_naming_the_key(monkeypatch):
    monkeypatch.delenv("CAUSALPOS_JOB_MEMORY_GB", raising=False)
    with pytest.raises(
        ConfigError,
        match=r"datasets\.kjv-first24\.seq_len: 200000; the score statistics of one layer of "
        r"model '.*' \(3 float64 maps of 4 head\(s\) x 200000 x 200000\) need 3,576\.3 GiB",
    ):
        check(lambda c: c["datasets"]["kjv-first24"].update(seq_len=200000))
    # the memory a job may use, where jobs run elsewhere: 4,000 GB hold it
    monkeypatch.setenv("CAUSALPOS_JOB_MEMORY_GB", "4000")
    check(lambda c: c["datasets"]["kjv-first24"].update(seq_len=200000))


# --- one message each ------------------------------------------------------------------------------


def test_a_full_disk_during_a_store_write_names_the_store_and_its_free_space(tmp_path, monkeypatch):
    from causalpos.io.store import write_dataset

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))

    monkeypatch.setattr(xr.Dataset, "to_zarr", full)
    out = tmp_path / "results" / "a.zarr"
    ds = xr.Dataset({"x": ("i", np.zeros(3))})
    with pytest.raises(OSError) as info:
        write_dataset(ds, out)
    said = str(info.value)
    assert type(info.value).__name__ == "DiskFullError" and info.value.errno == errno.ENOSPC
    assert said.startswith(f"the disk is full: writing store {out} failed (OSError: [Errno 28]")
    free = float(
        re.search(r"the filesystem holding it has ([\d,.]+) MiB free", said)[1].replace(",", "")
    )
    assert abs(free - shutil.disk_usage(tmp_path).free / 2**20) < 1024  # its own disk's, in MiB
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert list((tmp_path / "results").iterdir()) == []  # no temporary left
    # any other error passes unchanged
    monkeypatch.setattr(xr.Dataset, "to_zarr", lambda self, *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        write_dataset(ds, out)


def test_a_job_ends_on_a_full_disk_with_the_message_alone(tmp_path):
    """A script job (causalpos.io.runlog.logged) whose store write meets a full disk: one line on
    its stderr and in its log, no traceback."""
    log = tmp_path / "job.log"
    script = f"""
import errno, sys
sys.path.insert(0, {str(REPO / "src")!r})
import numpy as np, xarray as xr
from causalpos.io.runlog import logged
from causalpos.io.store import write_dataset
def full(self, *args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))
xr.Dataset.to_zarr = full
with logged({str(log)!r}, 1, exit_when_done=True):
    write_dataset(xr.Dataset({{"x": ("i", np.zeros(3))}}), {str(tmp_path / "a.zarr")!r})
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith(
        f"DiskFullError: the disk is full: writing store {tmp_path / 'a.zarr'} failed"
    ), proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in log.read_text()
    assert "job failed: the disk is full" in log.read_text()


@pytest.mark.slow
def test_snakemake_leaves_a_symlinked_output_directory_alone_after_a_failed_job(tmp_path):
    """Snakemake's end-of-run clean-up removes an output's empty parent with os.removedirs and
    fails on one that is a symbolic link (NotADirectoryError: the control run below); the
    workflow's replacement (causalpos.io.runlog.keep_symlinked_output_dirs) keeps it."""
    rules = (
        "rule all:\n    input: 'out/x.txt'\nrule x:\n    output: 'out/x.txt'\n    shell: 'exit 1'\n"
    )
    patch = (
        f"import sys\nsys.path.insert(0, {str(REPO / 'src')!r})\n"
        "from causalpos.io.runlog import keep_symlinked_output_dirs\n"
        "keep_symlinked_output_dirs()\n"
    )
    said = {}
    for name, head in (("snakemake", ""), ("workflow", patch)):
        elsewhere, work = tmp_path / name / "elsewhere", tmp_path / name / "wf"
        elsewhere.mkdir(parents=True)
        work.mkdir()
        (work / "out").symlink_to(elsewhere)
        (work / "Snakefile").write_text(head + rules)
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "1"],
            cwd=work,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 1
        said[name] = proc.stdout + proc.stderr
        assert (work / "out").is_symlink() and elsewhere.is_dir()
    assert "NotADirectoryError: [Errno 20] Not a directory: 'out'" in said["snakemake"]
    assert "NotADirectoryError" not in said["workflow"]
    assert "At least one job did not complete successfully" in said["workflow"]


def test_every_model_config_and_tokenizer_load_refuses_remote_code_explicitly():
    """`trust_remote_code=False` at every from_pretrained / from_config of src/ and benchmarks/:
    transformers' default (None) asks at a terminal."""
    loads = []
    files = [*(REPO / "src").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]
    for path in sorted(files):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("from_pretrained", "from_config")
            ):
                explicit = any(
                    k.arg == "trust_remote_code"
                    and isinstance(k.value, ast.Constant)
                    and k.value.value is False
                    for k in node.keywords
                )
                loads.append((f"{path.relative_to(REPO)}:{node.lineno}", explicit))
    assert len(loads) >= 10, loads
    assert [where for where, explicit in loads if not explicit] == []


# --- a random twin holding its model's weights -----------------------------------------------


def test_a_prepared_twin_holding_its_models_weights_is_refused_before_any_job(
    tmp_path, monkeypatch
):
    """A local checkpoint that was itself initialised from seed 0, and its random_init twin
    `like:` it with seed 0: the same weights bit for bit, which no config shows. Once both
    directories are prepared, their recorded sha256 say so, and the next start refuses the twin
    (the scorecard had judged one and measured the other on identical numbers)."""
    from causalpos.io.integrity import MODEL_RECORD

    def edit(c):
        c["models"]["mine"] = {"source": "hf", "id": "someone/mine"}  # not read before any job
        c["models"]["mine-random"] = {"source": "random_init", "like": "mine", "seed": 0}

    monkeypatch.chdir(tmp_path)
    assert check(edit) == check()  # nothing prepared yet: nothing to compare
    for name, sha in (("mine", "ab" * 32), ("mine-random", "ab" * 32)):
        d = tmp_path / "resources" / "models" / name
        d.mkdir(parents=True)
        record = {"name": name, "sha256": {"model.safetensors": sha}}
        (d / MODEL_RECORD).write_text(json.dumps(record))
    with pytest.raises(
        ConfigError,
        match=r"models.mine-random: random_init like: 'mine', prepared in "
        r"resources/models/mine-random, holds the weights of 'mine' bit for bit .*"
        r"\['model.safetensors'\]\): 'mine' was itself initialised from seed 0 .* Fix: give "
        r"models.mine-random another seed \(e.g. seed: 1\)",
    ):
        check(edit)
    # other weights: a twin as meant
    record = {"name": "mine-random", "sha256": {"model.safetensors": "cd" * 32}}
    (tmp_path / "resources" / "models" / "mine-random" / MODEL_RECORD).write_text(
        json.dumps(record)
    )
    assert check(edit) == check()
