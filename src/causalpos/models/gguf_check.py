"""Whether a GGUF file is whole, without loading it (torch-free).

A GGUF cut short fails deep inside the reader (``struct.error: unpack_from requires a buffer
...``). :func:`gguf_problem` reads the header (magic, version, metadata, tensor table: a few MB),
computes where the tensor data must end (the data section starts at the next multiple of
``general.alignment`` after the table; each tensor takes ``elements / block size * bytes per
block`` of its ggml type, from the ``gguf`` package) and says "truncated" with the sizes.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

GGUF_MAGIC = b"GGUF"
#: Scalar value types of GGUF metadata: type id -> struct format (u8, i8, u16, i16, u32, i32, f32,
#: bool; u64, i64, f64).
_SCALARS = dict(zip((0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12), "BbHhIif?Qqd", strict=True))
_STRING, _ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32


class _Truncated(Exception):
    """The header ends before what it declares."""


class _Reader:
    def __init__(self, fh, size: int):
        self.fh, self.size, self.pos = fh, size, 0

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) < n:
            raise _Truncated(self.pos + len(data))
        self.pos += n
        return data

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.read(struct.calcsize("<" + fmt)))[0]

    def string(self) -> bytes:
        n = self.unpack("Q")
        if n > self.size:  # a length past the end of the file: cut short, or not a GGUF
            raise _Truncated(self.pos)
        return self.read(n)

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.unpack("I"), self.unpack("Q")
            if item in _SCALARS:  # skipped, not decoded (a vocabulary's scores: 10^5 floats)
                nbytes = struct.calcsize("<" + _SCALARS[item]) * count
                if self.pos + nbytes > self.size:
                    raise _Truncated(self.size)
                self.fh.seek(nbytes, os.SEEK_CUR)
                self.pos += nbytes
                return None
            return [self.value(item) for _ in range(count)]
        raise ValueError(f"unknown GGUF metadata value type {kind} at byte {self.pos}")


def expected_size(path: str | os.PathLike) -> tuple[int, int]:
    """``(bytes the header declares, bytes on disk)`` of the GGUF at ``path``; :class:`ValueError`
    for a file that is not a GGUF (v2 or v3) and, through :class:`_Truncated`, one whose header
    itself is cut short."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        r = _Reader(fh, size)
        if r.read(4) != GGUF_MAGIC:
            raise ValueError(f"{path} is not a GGUF file (it does not start with b'GGUF')")
        version = r.unpack("I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version}, this reader knows versions 2 and 3")
        n_tensors, n_kv = r.unpack("Q"), r.unpack("Q")
        alignment = DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            key = r.string()
            value = r.value(r.unpack("I"))
            if key == b"general.alignment" and isinstance(value, int) and value > 0:
                alignment = value
        end = 0
        for _ in range(n_tensors):
            r.string()
            dims = [r.unpack("Q") for _ in range(r.unpack("I"))]
            ggml_type, offset = r.unpack("I"), r.unpack("Q")
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
            end = max(end, offset + math.prod(dims) // block * type_size)
        start = -(-r.pos // alignment) * alignment
    return start + end, size


def gguf_problem(path: str | os.PathLike) -> str | None:
    """Why the GGUF at ``path`` cannot be whole ("truncated: ..." with the expected and actual
    sizes, or not a GGUF), or None."""
    try:
        need, size = expected_size(path)
    except _Truncated as cut:
        return (
            f"{path} is truncated: its header ends after byte {cut.args[0]:,} of "
            f"{Path(path).stat().st_size:,}, before the metadata and tensor table it declares "
            "(a download or copy cut short). Fetch or copy the file again"
        )
    except (ValueError, KeyError) as exc:
        return str(exc)
    if size < need:
        return (
            f"{path} is truncated: its header declares tensor data up to byte {need:,}, the file "
            f"has {size:,} bytes ({need - size:,} missing; a download or copy cut short). Fetch "
            "or copy the file again"
        )
    return None


def check_gguf_complete(path: str | os.PathLike) -> None:
    """:class:`ValueError` where :func:`gguf_problem` finds one."""
    if problem := gguf_problem(path):
        raise ValueError(problem)
