"""Inputs that changed or vanished between runs, and the config's: names that become paths
cannot escape their parent, datasets feeding statistics have two sequences, a BOS-less tokenizer cannot prepend its BOS,
model and corpus files named by path are rule inputs, prepared models are copies whose sha256 is
checked when loaded, extraction params hold only what changes results, and training stops where
its loss stops being finite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from causalpos.config import ConfigError, Resolved, schema_error_summary

REPO = Path(__file__).resolve().parents[2]
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def smoke_config(edit=None, *, schema: bool = True) -> dict:
    cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
    validate(cfg, SCHEMA)  # defaults filled in, as the Snakefile does
    if edit is not None:
        edit(cfg)
        if schema:
            validate(cfg, SCHEMA)
    return cfg


# --- (4) names that become paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda c: c["train"]["tokenizer"].update(name=".."), "train.tokenizer.name"),
        (lambda c: c["train"]["tokenizer"].update(name="."), "train.tokenizer.name"),
        (lambda c: c["train"]["tokenizer"].update(name="a/b"), "train.tokenizer.name"),
        (lambda c: c["simulate"]["settings"].update({"..": {"alpha": 0.0}}), "simulate.settings"),
        (lambda c: c["simulate"]["settings"].update({".x": {"alpha": 0.0}}), "simulate.settings"),
        (
            lambda c: c["leakage"]["experiments"].update(
                _x={"models": ["tiny-random"], "datasets": ["kjv-first24"]}
            ),
            "leakage.experiments",
        ),
    ],
)
def test_a_name_that_is_not_a_plain_name_is_refused_at_config_time(edit, key, tmp_path):
    with pytest.raises(WorkflowError) as info:
        smoke_config(edit)
    summary = schema_error_summary(info.value)
    assert key in summary, summary
    # whatever the schema says, the resolver refuses it before any job, naming the key
    cfg = smoke_config(edit, schema=False)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Resolved(cfg, document_sizes=lambda corpus: None).check()


def test_the_tokenizer_directory_of_a_dotdot_name_is_never_formed():
    cfg = smoke_config(lambda c: c["train"]["tokenizer"].update(name=".."), schema=False)
    with pytest.raises(ConfigError, match=r"train\.tokenizer\.name: '\.\.' cannot name"):
        Resolved(cfg).train_tokenizer_dir()


# --- (5) n_sequences ------------------------------------------------------------------------------


def test_one_sequence_in_a_dataset_that_feeds_statistics_is_a_config_error_naming_the_key():
    cfg = smoke_config(lambda c: c["datasets"]["kjv-first24"].update(n_sequences=1))
    with pytest.raises(ConfigError, match=r"datasets\.kjv-first24\.n_sequences: 1;.*at least 2"):
        Resolved(cfg, document_sizes=lambda corpus: None).check()
    Resolved(smoke_config(), document_sizes=lambda corpus: None).check()  # 12 sequences pass


# --- (1) files named by path are inputs; prepared models are checked copies -----------------------


def test_model_and_corpus_files_named_by_path_are_rule_inputs(tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", ".hidden"):
        (local / name).write_text("x")
    gguf = tmp_path / "m.gguf"
    gguf.write_text("x")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("b.txt", "a.txt", "notes.md"):
        (corpus / name).write_text("some text " * 50)
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"text": "a document"}\n')

    def edit(c):
        c["models"].update(
            loc={"source": "local", "path": str(local)},
            gg={"source": "gguf", "path": str(gguf)},
            hfdir={"source": "hf", "id": str(local)},
            hub={"source": "hf", "id": "HuggingFaceTB/SmolLM2-135M"},
        )
        c["datasets"].update(
            txt={"corpus": {"type": "text", "path": str(corpus)}, "seq_len": 8, "n_sequences": 2},
            jl={"corpus": {"type": "jsonl", "path": str(jsonl)}, "seq_len": 8, "n_sequences": 2},
        )

    cfg = Resolved(smoke_config(edit))
    files = [str(local / n) for n in ("config.json", "model.safetensors", "tokenizer.json")]
    assert cfg.prepare_model_inputs("loc") == files
    assert cfg.prepare_model_inputs("hfdir") == files
    assert cfg.prepare_model_inputs("gg") == [str(gguf)]
    assert cfg.prepare_model_inputs("hub") == []  # a hub id: its revision is the param
    # a stand-in taking a trained model's tokenizer waits for the tokenizer only, not training
    assert cfg.prepare_model_inputs("tiny-random") == ["resources/tokenizers/smoke-bpe"]
    txt = cfg.sample_inputs("txt", "loc")
    assert txt["corpus"] == [str(corpus / "a.txt"), str(corpus / "b.txt")]  # the glob's files
    assert cfg.sample_inputs("jl", "loc")["corpus"] == [str(jsonl)]
    assert "corpus" not in cfg.sample_inputs("kjv-first24", "tiny-random")


def _tiny_local(tmp_path: Path) -> Path:
    """A user's HF-format directory: a tiny random Llama and its tokenizer (a directory model
    tokenizes its prompts itself, so it must hold one)."""
    from tests.conftest import _train_tokenizer, tiny_pair

    tok = _train_tokenizer(bos=True)
    model, _ = tiny_pair("llama", vocab_size=len(tok))  # a row for every id
    src = tmp_path / "user-model"
    model.save_pretrained(src)
    tok.save_pretrained(src)
    return src


def test_a_prepared_model_is_a_copy_so_editing_the_users_file_leaves_it_intact(tmp_path):
    from causalpos.models.load import build_model_dir, load_model, read_source, sha256_file

    src = _tiny_local(tmp_path)
    out = build_model_dir("m", {"source": "local", "path": str(src)}, tmp_path / "m")
    weights = out / "model.safetensors"
    assert weights.stat().st_ino != (src / "model.safetensors").stat().st_ino
    assert weights.stat().st_nlink == 1
    recorded = read_source(out)["sha256"]["model.safetensors"]
    with open(src / "model.safetensors", "r+b") as f:  # an in-place edit of the user's file
        f.seek(-4, 2)
        f.write(b"\x00\x00\x80\x7f")
    assert sha256_file(weights) == recorded
    load_model(out)  # still the model that was prepared


def test_load_model_refuses_weights_that_are_not_the_recorded_ones(tmp_path, monkeypatch):
    from causalpos.models.load import build_model_dir, load_model
    from causalpos.models.weights import ModelIntegrityError

    monkeypatch.chdir(tmp_path)
    src = _tiny_local(tmp_path)
    out = build_model_dir("m", {"source": "local", "path": str(src)}, Path("resources/models/m"))
    weights = out / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4:] = b"\x00\x00\x00\x40"  # the last float32 becomes 2.0: finite, but not the same
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError) as info:
        load_model(out)
    msg = str(info.value)
    assert "resources/models/m/model.safetensors has changed since it was prepared" in msg
    assert "snakemake --force resources/models/m" in msg


def test_load_model_names_a_tensor_that_is_not_finite(tmp_path, monkeypatch):
    import torch

    from causalpos.models.load import load_model
    from causalpos.models.weights import ModelIntegrityError
    from tests.conftest import tiny_pair

    model, _ = tiny_pair("llama")
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path / "m")
    with pytest.raises(
        ModelIntegrityError, match=r"'model\.layers\.1\.mlp\.up_proj\.weight' holds 1 non-finite"
    ):
        load_model(tmp_path / "m")


def test_the_source_record_names_the_users_files_relative_to_the_pipeline(tmp_path, monkeypatch):
    from causalpos.models.load import build_model_dir, read_source

    monkeypatch.chdir(tmp_path)
    _tiny_local(tmp_path)
    out = build_model_dir("m", {"source": "local", "path": "user-model"}, tmp_path / "m")
    assert read_source(out)["path"] == "user-model"


# --- prepend_bos on a tokenizer without a BOS -----------------------------------------------------


@pytest.mark.parametrize("bos", [None, "<s>"])
def test_prepend_bos_on_a_tokenizer_without_a_bos_is_a_config_error(tmp_path, bos):
    local = tmp_path / "qwen-like"
    local.mkdir()
    (local / "config.json").write_text("{}")
    (local / "tokenizer_config.json").write_text(json.dumps({"bos_token": bos, "eos_token": "e"}))
    # what the config-time checks ask of a local model directory: weights and a tokenizer
    (local / "model.safetensors").write_bytes(b"")
    (local / "tokenizer.json").write_text("{}")

    def edit(c):
        c["models"]["qwen-like"] = {"source": "local", "path": str(local)}
        c["paper1_llm"]["models"].append("qwen-like")

    cfg = Resolved(smoke_config(edit), document_sizes=lambda corpus: None)
    if bos is None:
        with pytest.raises(
            ConfigError,
            match=r"datasets\.kjv-first24\.prepend_bos: true, but the tokenizer of model "
            r"'qwen-like' .* defines no BOS token",
        ):
            cfg.check()
    else:
        cfg.check()


# --- weights load exactly or not at all -------------------------------------------------


def _edit_config(directory: Path, **changes) -> None:
    cfg = json.loads((directory / "config.json").read_text())
    cfg.update({k: cfg[k] + v if isinstance(v, int) else v for k, v in changes.items()})
    (directory / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "change, said",
    [
        (
            {"num_hidden_layers": 1},  # one layer too many: layer 2 would be drawn at random
            r"9 tensor\(s\) the config asks for are not in the weights files "
            r"\(model\.layers\.2\.input_layernorm\.weight, ",
        ),
        (
            {"num_hidden_layers": -1},  # one too few: layer 1's tensors would be dropped
            r"9 tensor\(s\) in the weights files have no place in the model the config describes "
            r"\(model\.layers\.1\.input_layernorm\.weight, ",
        ),
        (
            {"intermediate_size": 2},
            r"6 tensor\(s\) differ in shape \(model\.layers\.0\.mlp\.down_proj\.weight "
            r"\(file \(64, 128\), config \(64, 130\)\)",
        ),
    ],
)
def test_a_config_that_does_not_describe_the_weights_refuses_the_load(tmp_path, change, said):
    from causalpos.models.load import build_model_dir, load_model
    from causalpos.models.weights import ModelIntegrityError
    from tests.conftest import tiny_pair

    model, _ = tiny_pair("llama")
    model.save_pretrained(tmp_path / "raw")
    load_model(tmp_path / "raw")  # as saved: loads
    _edit_config(tmp_path / "raw", **change)
    with pytest.raises(ModelIntegrityError, match=said) as info:
        load_model(tmp_path / "raw")
    assert "raw: its config.json and its weights describe different models" in str(info.value)
    # a local model prepared from such a directory is refused at its first load, naming it
    src = _tiny_local(tmp_path)
    _edit_config(src, **change)
    out = build_model_dir("m", {"source": "local", "path": str(src)}, tmp_path / "m")
    with pytest.raises(ModelIntegrityError, match=said) as info:
        load_model(out)
    assert "snakemake --force" in str(info.value)


def test_a_tokenizer_with_more_ids_than_the_embedding_has_rows_refuses_the_load(tmp_path):
    from causalpos.models.load import load_model
    from causalpos.models.weights import ModelIntegrityError
    from tests.conftest import _train_tokenizer, tiny_pair

    model, _ = tiny_pair("llama", vocab_size=256)
    model.save_pretrained(tmp_path / "m")
    tok = _train_tokenizer(bos=True)
    tok.save_pretrained(tmp_path / "m")
    with pytest.raises(
        ModelIntegrityError,
        match=rf"tokenizer has {len(tok)} ids \(up to {len(tok) - 1}\), its input embedding 256 "
        "rows",
    ):
        load_model(tmp_path / "m")


# --- content decides for files named by path --------------------------------------------


def _replace_keeping_mtime(path: Path, data: bytes) -> None:
    """What `cp -p other path` (or restoring a backup) does: other content, the old mtime."""
    import os

    st = path.stat()
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def test_the_content_hash_cache_sees_a_replacement_with_the_old_mtime(tmp_path, monkeypatch):
    import hashlib

    from causalpos.io import fingerprint

    calls = []
    real = fingerprint.sha256_file
    monkeypatch.setattr(fingerprint, "sha256_file", lambda p: calls.append(str(p)) or real(p))
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"weights-1")
    b.write_bytes(b"corpus")
    cache = tmp_path / "cache.json"
    first = fingerprint.cached_sha256(cache)([str(a), str(b)])
    assert first == {
        str(a): hashlib.sha256(b"weights-1").hexdigest(),
        str(b): hashlib.sha256(b"corpus").hexdigest(),
    }
    assert len(calls) == 2
    assert fingerprint.cached_sha256(cache)([str(a), str(b)]) == first  # a new process: no read
    assert len(calls) == 2
    _replace_keeping_mtime(a, b"weights-2")
    again = fingerprint.cached_sha256(cache)([str(a), str(b)])
    assert again[str(a)] == hashlib.sha256(b"weights-2").hexdigest() and calls[2:] == [str(a)]
    assert again[str(b)] == first[str(b)]
    assert len(json.loads(cache.read_text())) == 2  # a's older entry dropped


def test_a_replaced_model_or_corpus_file_changes_its_jobs_params(tmp_path):
    src = _tiny_local(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("In the beginning. " * 200)

    def edit(c):
        c["models"]["loc"] = {"source": "local", "path": str(src)}
        c["datasets"]["txt"] = {
            "corpus": {"type": "text", "path": str(corpus)},
            "seq_len": 8,
            "n_sequences": 2,
        }

    def params():
        cfg = Resolved(smoke_config(edit))
        return cfg.model_source_sha256("loc"), cfg.corpus_sha256("txt")

    models, corpora = params()
    assert sorted(models) == [str(src / n) for n in sorted(p.name for p in src.iterdir())]
    assert list(corpora) == [str(corpus)]
    assert Resolved(smoke_config()).model_source_sha256("tiny-random") == {}  # nothing named
    weights = src / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4:] = b"\x00\x00\x00\x40"
    _replace_keeping_mtime(weights, bytes(data))
    _replace_keeping_mtime(corpus, b"In the Beginning. " * 200)  # same size
    models2, corpora2 = params()
    assert models2[str(weights)] != models[str(weights)]
    assert {k: v for k, v in models2.items() if k != str(weights)} == {
        k: v for k, v in models.items() if k != str(weights)
    }
    assert corpora2[str(corpus)] != corpora[str(corpus)]


@pytest.mark.slow
def test_a_source_replaced_with_an_older_mtime_reruns_its_jobs(tmp_path):
    """End to end on a copy of the pipeline: a local model and a text corpus prepared and sampled
    for real; `cp -p`-style replacements (same size, same mtime) rerun exactly those jobs."""
    from tests.wfutil import SMOKE, copy_pipeline, planned_reasons, snakemake

    work = copy_pipeline(tmp_path / "pipeline")
    src = _tiny_local(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("In the beginning God created the heaven and the earth. " * 40)
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        yaml.safe_dump(
            {
                "models": {"loc": {"source": "local", "path": str(src)}},
                "datasets": {
                    "txt": {
                        "corpus": {"type": "text", "path": str(corpus)},
                        "seq_len": 8,
                        "n_sequences": 2,
                        "mode": "chunks",
                    }
                },
            }
        )
    )
    args = ("--configfile", SMOKE, str(extra), "--", "results/data/txt/loc.zarr")
    snakemake(work, "--cores", "1", *args)
    assert planned_reasons(work, *args) == []
    weights = src / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4:] = b"\x00\x00\x00\x40"
    _replace_keeping_mtime(weights, bytes(data))
    planned = dict(planned_reasons(work, *args))
    assert planned.keys() == {"prepare_model", "sample_sequences"}, planned
    assert "params" in planned["prepare_model"].lower(), planned
    snakemake(work, "--cores", "1", *args)
    text = corpus.read_bytes()
    _replace_keeping_mtime(corpus, text.replace(b"heaven", b"HEAVEN"))
    planned = dict(planned_reasons(work, *args))
    assert (
        planned.keys() == {"sample_sequences"} and "params" in planned["sample_sequences"].lower()
    )


# --- out-of-range settings and a tokenizer past the embedding, at config time -----------


@pytest.mark.parametrize(
    "edit, said",
    [
        (
            lambda c: c["train"]["compare"].update(map_layer=99),
            r"train\.compare\.map_layer: 99; the models trained here have 2 layers, so it must "
            r"lie in -2 \.\. 1",
        ),
        (
            lambda c: c["train"]["compare"].update(map_layer=-3),
            r"train\.compare\.map_layer: -3; .* -2 \.\. 1",
        ),
        (
            lambda c: c["train"]["lengthgen"].update(smooth=1000),
            r"train\.lengthgen\.smooth: 1000; the loss-by-position curve has 63 positions "
            r"\(length_factor 2\.0 x context 32, less the first token\)",
        ),
        (
            lambda c: c["leakage"]["position0"].update(n_folds=99),
            r"leakage\.position0\.n_folds: 99; dataset 'kjv-first24' has 12 prompts",
        ),
    ],
)
def test_an_out_of_range_setting_is_refused_before_any_job(edit, said):
    with pytest.raises(ConfigError, match=said):
        Resolved(smoke_config(edit), document_sizes=lambda corpus: None).check()


@pytest.mark.parametrize("value", [-2, 1])
def test_the_range_checks_pass_the_ends_of_their_ranges(value):
    def edit(c):
        c["train"]["compare"].update(map_layer=value)
        c["train"]["lengthgen"].update(smooth=63)
        c["leakage"]["position0"].update(n_folds=12)

    Resolved(smoke_config(edit), document_sizes=lambda corpus: None).check()


def test_a_local_tokenizer_with_more_ids_than_the_embedding_is_a_config_error(tmp_path):
    from tests.conftest import _train_tokenizer, tiny_pair

    tok = _train_tokenizer(bos=True)
    model, _ = tiny_pair("llama", vocab_size=256)
    src = tmp_path / "m"
    model.save_pretrained(src)
    tok.save_pretrained(src)

    def edit(c):
        c["models"]["loc"] = {"source": "local", "path": str(src)}

    with pytest.raises(
        ConfigError,
        match=rf"models\.loc: the tokenizer in {src} has {len(tok)} ids \(up to {len(tok) - 1}\), "
        "its config.json a vocab_size of 256",
    ):
        Resolved(smoke_config(edit), document_sizes=lambda corpus: None).check()
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "vocab_size": len(tok)}))
    Resolved(smoke_config(edit), document_sizes=lambda corpus: None).check()  # one row per id
