"""What the models trained here see: token streams, the training batch of each update, the
held-out windows, and the unigram baselines of the held-out loss (the corpus split by book:
:mod:`causalpos.training.corpus`).

Sequences are ``[BOS] + context - 1`` corpus tokens, so position 0 is always the same BOS token.
The batch at update ``s`` is a pure function of ``(seed, s)``: every variant trained with one seed
sees the same data in the same order, and a resumed run sees what an uninterrupted one would.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def batch_at(
    ids: np.ndarray, step: int, *, batch: int, context: int, bos_id: int, seed: int
) -> torch.Tensor:
    """Training batch of update ``step``: ``(batch, context)`` int64, column 0 = BOS.

    Window starts are drawn uniformly from a generator seeded by ``(seed, step)``: the same for
    every variant trained with the same seed, independent of any other RNG.
    """
    n_free = len(ids) - (context - 1) + 1
    if n_free < 1:
        raise ValueError(
            f"token stream of {len(ids)} tokens is shorter than one window of {context - 1}"
        )
    rng = np.random.default_rng([seed, 0x5EED, step])
    starts = rng.integers(0, n_free, size=batch)
    return _windows(ids, starts, context, bos_id)


def heldout_windows(ids: np.ndarray, *, n: int, length: int, bos_id: int) -> torch.Tensor:
    """The first ``n`` non-overlapping windows of ``ids``: ``(n, length)`` int64, column 0 = BOS."""
    need = n * (length - 1)
    if len(ids) < need:
        raise ValueError(
            f"held-out stream has {len(ids)} tokens, fewer than n={n} windows of {length - 1} tokens "
            f"({need}); lower the number of held-out sequences or hold out more text"
        )
    return _windows(ids, np.arange(n) * (length - 1), length, bos_id)


def _windows(ids: np.ndarray, starts: np.ndarray, length: int, bos_id: int) -> torch.Tensor:
    idx = starts[:, None] + np.arange(length - 1)[None, :]
    body = torch.from_numpy(np.asarray(ids, dtype=np.int64)[idx])
    bos = torch.full((len(starts), 1), bos_id, dtype=torch.int64)
    return torch.cat([bos, body], dim=1)


def unigram_baselines(
    train_ids: np.ndarray, eval_tokens: torch.Tensor, vocab_size: int
) -> dict[str, float]:
    """Unigram baselines (nats/token) on the held-out targets ``eval_tokens[:, 1:]``.

    ``unigram_entropy``: plug-in entropy of the held-out targets' own frequencies — the loss of the
    best unigram model fitted to the held-out text itself, a lower bound for any unigram model.
    ``unigram_xent``: cross-entropy of the add-½ smoothed training unigram on the held-out targets.
    A model that learned anything beyond token frequencies beats both.
    """
    targets = eval_tokens[:, 1:].reshape(-1).numpy()
    counts = np.bincount(targets, minlength=vocab_size).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    train_counts = np.bincount(np.asarray(train_ids), minlength=vocab_size).astype(np.float64) + 0.5
    q = train_counts / train_counts.sum()
    return {
        "unigram_entropy": float(-(p * np.log(p)).sum()),
        "unigram_xent": float(-(counts * np.log(q)).sum() / counts.sum()),
    }


def token_stream(ids: np.ndarray, name: str) -> np.ndarray:
    """``ids``, a 1-D integer token stream, as int64; ``name`` (train | heldout) names the
    argument in the error."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or ids.size == 0:
        raise ValueError(
            f"{name}_ids must be a non-empty 1-D integer token stream (got shape {ids.shape}, dtype {ids.dtype})"
        )
    return ids.astype(np.int64, copy=False)


def data_hash(*arrays: np.ndarray) -> str:
    """16 hex digits of the SHA-256 of the token streams (recorded with the settings)."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]
