"""The corpus of the models trained here, split by book into training and held-out texts
(torch-free: the tokenizer job reads it without the training code)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

HELDOUT_BOOKS: tuple[str, ...] = ("Ruth", "Ecclesiastes", "Hosea", "Mark", "Romans")


def split_documents(
    docs: Sequence, heldout_sources: Sequence[str] = HELDOUT_BOOKS
) -> tuple[list[str], list[str]]:
    """Split documents into ``(train_texts, heldout_texts)`` by source (book title).

    ``docs``: ``causalpos.data.Document`` items. Raises if a held-out source is absent, so a
    misspelt book name cannot silently hold out nothing.
    """
    wanted = {s.lower() for s in heldout_sources}
    present = {d.source.lower() for d in docs}
    missing = [s for s in heldout_sources if s.lower() not in present]
    if missing:
        raise ValueError(
            f"held-out source(s) {missing} not among the documents' sources "
            f"{sorted({d.source for d in docs})}"
        )
    train = [d.text for d in docs if d.source.lower() not in wanted]
    heldout = [d.text for d in docs if d.source.lower() in wanted]
    if not train or not heldout:
        raise ValueError(f"split by held-out sources {list(heldout_sources)} leaves a side empty")
    return train, heldout


def prepare_texts(
    corpus: Mapping[str, Any], heldout_sources: Sequence[str] = HELDOUT_BOOKS
) -> tuple[list[str], list[str]]:
    """``(train_texts, heldout_texts)`` of a corpus spec (``causalpos.data`` format) split by
    source; the analyses read the held-out sources as their own dataset."""
    from causalpos.data import load_documents

    return split_documents(load_documents(dict(corpus)), heldout_sources)
