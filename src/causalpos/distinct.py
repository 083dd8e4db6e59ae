"""The distinct sequences of a draw (:func:`causalpos.sampling.draw_sequences`), their record in
the data store, and the judgement of a draw by them (copies of one sequence refused, duplicates
and near-constant draws warned)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from causalpos.data import CorpusError

if TYPE_CHECKING:
    import xarray as xr

#: The fewest distinct sequences the statistics over a dataset's sequences need (a spread, a
#: permutation, a fold): the config refuses a dataset that feeds them with fewer ``n_sequences``
#: (``causalpos.config.checks``), :func:`check_distinct` a draw with fewer distinct sequences.
MIN_DISTINCT = 2
#: A draw is *near-constant* where its shared positions (:func:`distinctness`: every sequence
#: holds the same token there) make up at least this share of the positions after the prefix.
NEAR_CONSTANT_SHARE = 0.5


def distinctness(tokens: np.ndarray, n_prefix: int) -> tuple[int, np.ndarray]:
    """``(n_distinct, shared)`` of the sequences ``tokens`` (sequence, position): how many are
    distinct token for token, and which positions after the first ``n_prefix`` (the prefix, the
    same everywhere by construction) hold the same token in every sequence (bool over them)."""
    tokens = np.asarray(tokens)
    if tokens.shape[0] == 0:
        return 0, np.zeros(max(tokens.shape[1] - n_prefix, 0), dtype=bool)
    content = tokens[:, n_prefix:]
    return int(np.unique(tokens, axis=0).shape[0]), np.all(content == content[:1], axis=0)


def distinct_attrs(tokens: np.ndarray, n_prefix: int) -> dict[str, int]:
    """A draw's record of :func:`distinctness`: ``n_distinct`` and ``n_shared_positions`` (the
    count of shared positions), judged by :func:`check_distinct`."""
    n_distinct, shared = distinctness(tokens, n_prefix)
    return {"n_distinct": n_distinct, "n_shared_positions": int(shared.sum())}


def check_distinct(ds: xr.Dataset, key: str) -> list[str]:
    """Judge a draw by its distinct sequences; ``key`` names the dataset in messages.

    Refused (:class:`CorpusError`): 2 or more sequences of which fewer than :data:`MIN_DISTINCT`
    are distinct (every statistic over copies reads an interval of width 0). Warned (the returned
    messages): duplicates (their intervals are narrower than the distinct prompts warrant), and a
    near-constant draw (shared positions at least :data:`NEAR_CONSTANT_SHARE` of those after the
    prefix).
    """
    tokens = np.asarray(ds["tokens"].values)
    n, seq_len = tokens.shape
    n_prefix = len(ds.attrs.get("prefix_ids", []))
    n_distinct, shared = distinctness(tokens, n_prefix)
    what = f"{key}: its {n} sequences of {seq_len} tokens"
    fix = _distinct_fix(ds.attrs.get("mode", ""), ds.attrs.get("corpus_type", ""))
    if n >= 2 and n_distinct < min(MIN_DISTINCT, n):
        raise CorpusError(
            f"{what} are {n_distinct} distinct sequence (equal token for token): the statistics "
            f"over sequences need at least {MIN_DISTINCT} distinct ones, and copies of one "
            f"prompt give intervals of width 0 (corpus {ds.attrs.get('corpus', '?')}). {fix}"
        )
    warnings = []
    if n_distinct < n:
        warnings.append(
            f"{what} are {n_distinct} distinct ones ({n - n_distinct} repeat another token for "
            "token): the statistics count every copy as a prompt, so their intervals are "
            f"narrower than {n_distinct} distinct prompts warrant. {fix}"
        )
    if n >= 2 and shared.size and shared.sum() >= NEAR_CONSTANT_SHARE * shared.size:
        at = _positions(np.flatnonzero(shared) + n_prefix)
        warnings.append(
            f"{what} are near-constant: every sequence holds the same token at {int(shared.sum())} "
            f"of the {shared.size} positions after the prefix ({at}), so the prompts differ at "
            f"the other {int(shared.size - shared.sum())} alone. {fix}"
        )
    return warnings


def _distinct_fix(mode: str, corpus_type: str) -> str:
    """What makes a draw's sequences differ, by how they were drawn."""
    if corpus_type == "random_tokens":
        return "Fix: raise seq_len (random tokens of a vocabulary this small repeat)"
    if mode == "first":
        return (
            "In mode 'first' each sequence is a document's first tokens, so the documents share "
            "them (a header or boilerplate every document starts with?). Fix: strip the shared "
            "text from the documents, or use mode 'chunks'"
        )
    return "Fix: remove the repeated documents (or repeated text) from the corpus"


def _positions(pos: np.ndarray) -> str:
    """Positions as ranges: ``1-40, 45``."""
    runs, start = [], None
    for i, p in enumerate(pos):
        if start is None:
            start = p
        if i + 1 == len(pos) or pos[i + 1] != p + 1:
            runs.append(f"{start}" if start == p else f"{start}-{p}")
            start = None
    return "positions " + ", ".join(runs)
