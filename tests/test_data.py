"""Corpora (causalpos.data): their specs, documents and local files."""

from __future__ import annotations

import pytest

from causalpos.data import CorpusError, kjv_documents, load_documents, local_document_sizes


def test_kjv_documents():
    chapters = kjv_documents("chapter")
    books = kjv_documents("book")
    assert len(chapters) == 1189 and len(books) == 66
    assert chapters[0].source == "Genesis" and chapters[0].text.startswith(
        "In the beginning God created"
    )
    assert chapters[0].text.rstrip().endswith("the sixth day.")
    assert books[-1].source == "Revelation"
    # A book is exactly its chapters joined by blank lines.
    genesis = [c.text for c in chapters if c.source == "Genesis"]
    assert len(genesis) == 50 and books[0].text == "\n\n".join(genesis)
    assert sum(len(b.text) for b in books) > 4_000_000
    with pytest.raises(CorpusError, match="Genesys"):
        kjv_documents("chapter", ["Genesys"])


def test_an_undecodable_corpus_file_is_named_with_the_encoding(tmp_path):
    (tmp_path / "good.txt").write_text("In the beginning. " * 10)
    (tmp_path / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xd8")
    with pytest.raises(CorpusError, match=r"corpus file '.*image.txt' is not utf-8 text: byte "):
        load_documents({"type": "text", "path": str(tmp_path)})
    (tmp_path / "c.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "\xff\xfe"}\n')
    with pytest.raises(CorpusError, match=r"corpus file '.*c.jsonl' is not utf-8 text.*offset 25"):
        load_documents({"type": "jsonl", "path": str(tmp_path / "c.jsonl")})


def test_local_document_sizes_without_a_tokenizer(tmp_path):
    sizes = local_document_sizes({"type": "kjv", "books": ["Ruth"]})
    assert sizes == [len(d.text.encode()) for d in kjv_documents("chapter", ["Ruth"])]
    (tmp_path / "a.txt").write_text("é" * 10)
    assert local_document_sizes({"type": "text", "path": str(tmp_path)}) == [20]
    assert local_document_sizes({"type": "text", "path": str(tmp_path)}, max_bytes=5) is None
    assert local_document_sizes({"type": "hf", "dataset": "x/y"}) is None  # never touches the hub
    assert local_document_sizes({"type": "random_tokens"}) is None
