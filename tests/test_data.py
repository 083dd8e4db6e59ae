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


# --- a hub corpus's revision ---------------------------------------------------------------


class _FakeHub:
    """The dataset hub as ``huggingface_hub.HfApi().dataset_info`` and ``datasets.load_dataset``
    see it (the hub is unreachable here): each revision's commit sha, and the rows streamed."""

    def __init__(self, commits: dict | None):
        self.commits, self.loaded = commits, []

    def dataset_info(self, repo_id, revision=None, **kwargs):
        import types

        if self.commits is None:
            raise ConnectionError("the hub is unreachable")
        return types.SimpleNamespace(sha=self.commits[revision])

    def load_dataset(self, dataset, name=None, *, split, revision, streaming):
        self.loaded.append({"dataset": dataset, "revision": revision, "streaming": streaming})
        return iter({"text": "In the beginning God created the heaven and the earth. " * 20}
                    for _ in range(5))  # fmt: skip


@pytest.fixture
def hub(monkeypatch):
    import sys
    import types

    import huggingface_hub

    def install(commits):
        fake = _FakeHub(commits)
        monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", fake.dataset_info)
        monkeypatch.setitem(
            sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake.load_dataset)
        )
        return fake

    return install


def test_a_hub_corpus_is_read_at_the_commit_the_hub_resolves_and_the_store_records_it(
    hub, tmp_path, tokenizer_dir
):
    """The issue's fourth case: a hub corpus (configs/paper.yaml's FineWeb-Edu) recorded no
    resolved revision in its data store."""
    from causalpos.io.store import open_dataset
    from causalpos.stages.data import sample_sequences

    sha = "3c1f" * 10
    fake = hub({None: sha, "v1.0": "9" * 40})
    corpus = {"type": "hf", "dataset": "org/edu", "max_documents": 3}
    attrs: dict = {}
    docs = load_documents(corpus, attrs)
    assert len(docs) == 3 and docs[0].source == "org/edu"
    # the stream is pinned to the commit the hub resolved, so the documents are that commit's
    assert fake.loaded == [{"dataset": "org/edu", "revision": sha, "streaming": True}]
    assert attrs == {
        "corpus_revision": sha,
        "corpus_revision_source": "the commit sha the hub resolved (its default branch)",
    }
    # through the job that samples it: in the data store
    out = tmp_path / "data.zarr"
    spec = {"corpus": {**corpus, "revision": "v1.0"}, "seq_len": 16, "n_sequences": 4}
    sample_sequences(tokenizer_dir, {**spec, "mode": "chunks"}, out, seed=0)
    stored = open_dataset(out).attrs
    assert stored["corpus_revision"] == "9" * 40
    assert stored["corpus_revision_source"] == (
        "the commit sha the hub resolved (the config's revision 'v1.0')"
    )
    assert fake.loaded[-1]["revision"] == "9" * 40


def test_a_hub_corpus_whose_commit_the_hub_does_not_report_records_why(hub):
    fake = hub(None)
    attrs: dict = {}
    load_documents({"type": "hf", "dataset": "org/edu", "revision": "v1.0"}, attrs)
    assert fake.loaded[-1]["revision"] == "v1.0"  # the config's revision, as given
    assert attrs == {
        "corpus_revision": "v1.0",
        "corpus_revision_source": "the config's revision, unresolved (the hub reported no "
        "commit: ConnectionError: the hub is unreachable)",
    }
    attrs = {}
    load_documents({"type": "hf", "dataset": "org/edu"}, attrs)
    assert attrs["corpus_revision"] == "" and attrs["corpus_revision_source"].startswith(
        "unknown: no revision pinned and the hub reported no commit (ConnectionError"
    )
