"""Stage ``sample_sequences`` (causalpos.stages.data): a dataset's draw written with its record of
distinct sequences; a corpus of identical documents refused before any store (or statistic)
exists."""

from __future__ import annotations

import logging
import re

import pytest

from causalpos.data import CorpusError, kjv_documents
from causalpos.io.store import open_dataset
from causalpos.stages.data import sample_sequences


def _corpus(tmp_path, texts: list[str]) -> dict:
    d = tmp_path / "docs"
    d.mkdir()
    for i, text in enumerate(texts):
        (d / f"doc{i:02d}.txt").write_text(text)
    return {"type": "text", "path": str(d)}


def test_identical_documents_are_refused_before_a_store_is_written(tmp_path, tokenizer_dir):
    """The issue's trigger: documents that share their opening (here: are one text), mode
    'first'. The stage refuses naming the dataset's key; no data store exists for any later
    rule to read."""
    text = kjv_documents("chapter", ["Genesis"])[0].text
    spec = {"corpus": _corpus(tmp_path, [text] * 6), "seq_len": 24, "n_sequences": 6}
    out = tmp_path / "data.zarr"
    with pytest.raises(CorpusError, match=r"^datasets\.openings: its 6 sequences of 24 tokens"):
        sample_sequences(tokenizer_dir, spec, out, seed=0, name="openings")
    assert not out.exists()


def test_the_store_records_distinct_sequences_and_duplicates_are_logged(
    tmp_path, tokenizer_dir, caplog
):
    texts = [d.text for d in kjv_documents("chapter", ["Genesis"])[:4]]
    spec = {"corpus": _corpus(tmp_path, texts + texts[:2]), "seq_len": 24, "n_sequences": 6}
    out = tmp_path / "data.zarr"
    with caplog.at_level(logging.WARNING, logger="causalpos.stages.data"):
        sample_sequences(tokenizer_dir, spec, out, seed=0, name="dups")
    ds = open_dataset(out)
    assert ds.attrs["n_distinct"] == 4 and ds.attrs["n_sequences"] == 6
    assert 0 <= ds.attrs["n_shared_positions"] < 23
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith("datasets.dups: its 6 sequences of 24")
    assert "are 4 distinct ones (2 repeat another token for token)" in warned[0]


def test_a_corpus_too_small_for_n_sequences_is_refused_naming_the_key_and_the_count(
    tmp_path, tokenizer_dir
):
    """The tokenized corpus gives fewer chunks than asked: the refusal names the dataset's
    n_sequences key, the count the corpus gives (the largest n_sequences that samples) and the
    fix; that count samples."""
    texts = [d.text for d in kjv_documents("chapter", ["Ruth"])]
    spec = {
        "corpus": _corpus(tmp_path, texts),
        "seq_len": 64,
        "mode": "chunks",
        "n_sequences": 10**4,
    }
    out = tmp_path / "data.zarr"
    with pytest.raises(CorpusError) as info:
        sample_sequences(tokenizer_dir, spec, out, seed=0, name="held")
    msg = str(info.value)
    m = re.match(
        r"datasets\.held\.n_sequences = 10000: tokenized by \S+, the corpus gives only (\d+) ", msg
    )
    assert m and f"Fix: set datasets.held.n_sequences to at most {m.group(1)}" in msg
    assert not out.exists()
    ds = sample_sequences(
        tokenizer_dir, dict(spec, n_sequences=int(m.group(1))), out, seed=0, name="held"
    )
    assert ds.sizes["sequence"] == int(m.group(1)) > 0
