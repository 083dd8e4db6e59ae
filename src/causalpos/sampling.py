"""Seeded sequence sampling from a corpus (:mod:`causalpos.data`).

Documents are tokenized with the model's own tokenizer and its default special tokens (the tokens
it *prepends*, a BOS for Llama, nothing for Qwen or SmolLM2, start every sequence); never padded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from causalpos.data import CorpusError, load_documents, validate_corpus
from causalpos.distinct import distinct_attrs

if TYPE_CHECKING:  # xarray (with pandas, ~0.4 CPU-s) is imported by draw_sequences alone
    import xarray as xr

MODES = ("first", "chunks")


@dataclass(frozen=True)
class SequenceSample:
    """What a dataset holds (config ``datasets.<name>``); ``mode``: ``first`` (documents' first
    tokens, paper 1) or ``chunks`` (consecutive chunks, paper 2). Each field's metadata names its
    config key, whose schema default is the field's (``tests/test_sampling.py``)."""

    corpus: Mapping[str, Any] | None = field(default=None, metadata={"config": "datasets.*.corpus"})
    seq_len: int = field(default=0, metadata={"config": "datasets.*.seq_len"})
    n_sequences: int = field(default=0, metadata={"config": "datasets.*.n_sequences"})
    mode: str = field(default="first", metadata={"config": "datasets.*.mode"})
    seed: int = field(default=0, metadata={"config": "seed"})
    prepend_bos: bool | str | int = field(
        default=False, metadata={"config": "datasets.*.prepend_bos"}
    )


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

    ``prepend_bos`` (TransformerLens' option of the same name): ``False`` -> the prefix unchanged
    (bos id None unless the tokenizer starts with its BOS); ``True`` -> its ``bos_token``; a
    string -> that token; an integer -> that id. Prepended only where the prefix does not already
    start with it; ``added`` says whether it was. Errors name ``key`` (the config key).
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
    sample: SequenceSample,
    *,
    key: str = "prepend_bos",
    also_for: Sequence[Any] = (),
) -> xr.Dataset:
    """``sample.n_sequences`` sequences of exactly ``sample.seq_len`` tokens, drawn without
    replacement: ``first`` mode, the first tokens of documents long enough; ``chunks``,
    consecutive non-overlapping chunks of each document (never crossing documents), each after
    the tokenizer's prefix; ``random_tokens``, the prefix then ids uniform over non-special ids.

    ``also_for`` (mode ``first``): other tokenizers under which a document must be long enough
    too, so that every model's draw (same seed) picks the same documents (paper 1).

    The draw is a seeded permutation: the first ``n`` sequences of a larger draw are the draw of
    ``n``. Returns ``tokens (sequence, position)`` int64, ``source`` str, ``document`` int64
    (corpus index; -1 for random tokens), ``offset`` int64 (first content token in the document)
    and attrs; ``bos``: every sequence starts with one BOS (``bos_id``; -1 if none),
    ``prepend_bos``: the setting as JSON, ``bos_added``: prepended here, not by the tokenizer.
    """
    seq_len, n_sequences, mode, seed = sample.seq_len, sample.n_sequences, sample.mode, sample.seed
    if mode not in MODES:
        raise CorpusError(f"draw_sequences: mode {mode!r} not in {MODES}")
    if seq_len < 1 or n_sequences < 1:
        raise CorpusError(
            f"draw_sequences: seq_len and n_sequences must be >= 1 (got {seq_len}, {n_sequences})"
        )
    corpus = validate_corpus(sample.corpus)
    prefix, bos_id, bos_added = bos_prefix(
        tokenizer, special_affixes(tokenizer)[0], sample.prepend_bos, key
    )
    content_len = seq_len - len(prefix)
    if content_len < 1:
        raise CorpusError(
            f"draw_sequences: seq_len {seq_len} leaves no room after the prefix {prefix}"
        )
    rng = np.random.default_rng(seed)
    n_documents, n_candidates, source_attrs = 0, -1, {}  # source_attrs: the documents' origin
    if corpus["type"] == "random_tokens":
        allowed = non_special_ids(tokenizer)
        body = allowed[rng.integers(0, allowed.size, size=(n_sequences, content_len))]
        tokens = np.concatenate(
            [np.tile(np.asarray(prefix, dtype=np.int64), (n_sequences, 1)), body], axis=1
        )
        source, chosen = ["random_tokens"] * n_sequences, [(-1, 0)] * n_sequences
    else:
        tokens, source, chosen, n_documents, n_candidates = _draw_from_documents(
            tokenizer, sample, corpus, prefix, rng, also_for, source_attrs
        )
    _refuse_padding(tokenizer, tokens, len(prefix), corpus)
    attrs = {
        "corpus": json.dumps(corpus, sort_keys=True),
        "corpus_type": corpus["type"],
        "mode": mode,
        "seq_len": int(seq_len),
        "n_sequences": int(n_sequences),
        "seed": int(seed),
        **_tokenizer_attrs(tokenizer, prefix, bos_id, bos_added, sample.prepend_bos),
        "n_documents": int(n_documents),
        "n_candidates": int(n_candidates),
        **distinct_attrs(tokens, len(prefix)),
        **source_attrs,
    }
    ds = _token_dataset(tokens, source, chosen, attrs)
    if also_for and mode == "first":
        ds.attrs["documents_also_for"] = [tokenizer_fingerprint(t) for t in also_for]
    return ds


def _tokenizer_attrs(tokenizer, prefix, bos_id, bos_added, prepend_bos) -> dict[str, Any]:
    return {
        "tokenizer": str(getattr(tokenizer, "name_or_path", "")),
        "tokenizer_sha256": tokenizer_fingerprint(tokenizer),
        "bos": bos_id is not None,
        "bos_id": -1 if bos_id is None else int(bos_id),
        "prefix_ids": [int(x) for x in prefix],
        "prepend_bos": json.dumps(
            prepend_bos.item() if isinstance(prepend_bos, np.integer) else prepend_bos
        ),
        "bos_added": bool(bos_added),
    }


def _token_dataset(tokens, source, chosen, attrs) -> xr.Dataset:
    """The token dataset of ``chosen`` (document, offset) pairs and their ``source`` labels."""
    import xarray as xr

    n_sequences, seq_len = tokens.shape
    return xr.Dataset(
        {
            "tokens": (("sequence", "position"), tokens),
            "source": (("sequence",), np.array(source, dtype=object)),
            "document": (("sequence",), np.array([d for d, _ in chosen], dtype=np.int64)),
            "offset": (("sequence",), np.array([off for _, off in chosen], dtype=np.int64)),
        },
        coords={"sequence": np.arange(n_sequences), "position": np.arange(seq_len)},
        attrs=attrs,
    )


def _token_rows(ids: Sequence[Sequence[int]], chosen, prefix, seq_len: int) -> np.ndarray:
    """``(len(chosen), seq_len)`` tokens: ``prefix``, then ``ids[document][offset:]``."""
    content_len = seq_len - len(prefix)
    tokens = np.empty((len(chosen), seq_len), dtype=np.int64)
    for i, (d, off) in enumerate(chosen):
        tokens[i, : len(prefix)] = prefix
        tokens[i, len(prefix) :] = ids[d][off : off + content_len]
    return tokens


class TooFewSequences(CorpusError):
    """The corpus gives fewer sequences than ``n_sequences``; ``available``: how many it gives."""

    def __init__(self, message: str, *, available: int):
        super().__init__(message)
        self.available = available


def _draw_from_documents(tokenizer, sample, corpus, prefix, rng, also_for, attrs):
    """(tokens, source, chosen, n_documents, n_candidates) from the corpus's documents,
    in a seeded (or source-stratified) order; ``attrs`` receives where they came from."""
    seq_len, n_sequences, mode = sample.seq_len, sample.n_sequences, sample.mode
    content_len = seq_len - len(prefix)
    docs = load_documents(corpus, attrs)
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
            (d, k * content_len) for d, x in enumerate(ids) for k in range(len(x) // content_len)
        ]
    if len(candidates) < n_sequences:
        hint = (
            "use mode 'chunks', a shorter seq_len, or longer documents (kjv: unit 'book')"
            if mode == "first"
            else "use a shorter seq_len or a larger corpus"
        )
        raise TooFewSequences(
            f"draw_sequences: corpus {corpus!r} gives {len(candidates)} {mode!r} sequences of "
            f"{seq_len} tokens, fewer than n_sequences={n_sequences}; {hint}",
            available=len(candidates),
        )
    if corpus.get("stratify", False):
        order = _stratified_order([docs[d].source for d, _ in candidates], rng)
    else:
        order = rng.permutation(len(candidates))
    chosen = [candidates[i] for i in order[:n_sequences]]
    tokens = _token_rows(ids, chosen, prefix, seq_len)
    source = [docs[d].source for d, _ in chosen]
    return tokens, source, chosen, n_documents, len(candidates)


def tokenize_texts(
    tokenizer: Any,
    texts: Sequence[str],
    seq_len: int,
    *,
    mode: str = "first",
    prepend_bos: bool | str | int = False,
    n_sequences: int | None = None,
) -> xr.Dataset:
    """Token sequences of ``seq_len`` tokens from your own ``texts`` (the notebook API), made as
    :func:`draw_sequences` makes a dataset's, in the texts' order and without a random draw.

    ``mode="first"``: each text's first ``seq_len`` tokens (a text too short is refused);
    ``"chunks"``: every consecutive chunk of each text; ``n_sequences``: at most this many, the
    first (default all). The variables and attrs are :func:`draw_sequences`' (``source`` = the
    text's index as a string, ``document`` = that index), corpus ``{"type": "texts"}``.
    """
    if mode not in MODES:
        raise CorpusError(f"tokenize_texts: mode {mode!r} not in {MODES}")
    texts = [texts] if isinstance(texts, str) else list(texts)
    if seq_len < 1 or not texts:
        raise CorpusError(f"tokenize_texts: give texts and seq_len >= 1 (got {seq_len})")
    prefix, bos_id, bos_added = bos_prefix(tokenizer, special_affixes(tokenizer)[0], prepend_bos)
    content_len = seq_len - len(prefix)
    if content_len < 1:
        raise CorpusError(f"tokenize_texts: seq_len {seq_len} leaves no room after {prefix}")
    ids = tokenizer(texts, add_special_tokens=False, verbose=False).input_ids
    if n_sequences is not None and n_sequences < 1:
        raise CorpusError(f"tokenize_texts: n_sequences must be >= 1, got {n_sequences}")
    chosen = []
    for d, x in enumerate(ids):
        if n_sequences is not None and len(chosen) >= n_sequences:
            break
        if mode == "first" and len(x) < content_len:
            raise CorpusError(
                f"tokenize_texts: text {d} gives {len(x) + len(prefix)} tokens, fewer than "
                f"seq_len={seq_len}: give a shorter seq_len, a longer text, or mode 'chunks'"
            )
        n = 1 if mode == "first" else len(x) // content_len
        chosen += [(d, k * content_len) for k in range(n)]
    if not chosen:
        raise CorpusError(
            f"tokenize_texts: no text gives a chunk of {seq_len} tokens; give a shorter seq_len"
        )
    chosen = chosen[:n_sequences]
    tokens = _token_rows(ids, chosen, prefix, seq_len)
    corpus = {"type": "texts"}
    _refuse_padding(tokenizer, tokens, len(prefix), corpus)
    attrs = {
        "corpus": json.dumps(corpus),
        "corpus_type": corpus["type"],
        "mode": mode,
        "seq_len": int(seq_len),
        "n_sequences": len(chosen),
        **_tokenizer_attrs(tokenizer, prefix, bos_id, bos_added, prepend_bos),
        "n_documents": len(texts),
    }
    return _token_dataset(tokens, [str(d) for d, _ in chosen], chosen, attrs)


def documents_long_enough(
    tokenizers: Sequence[Any], texts: Sequence[str], seq_len: int
) -> set[int]:
    """Indices of the texts that give at least ``seq_len`` tokens (prefix included) under *every*
    tokenizer."""
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
