"""causalpos.config.disk: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import json

import pytest

from causalpos.config.disk import capacity_bound


def test_capacity_bound_holds_for_any_tokenizer():
    # a token spans >= 1 byte (but one), at most MAX_PREFIX_TOKENS (2) tokens before the text
    assert capacity_bound([10, 100, 1000], seq_len=50, mode="first") == 2  # 100 + 1 >= 48
    assert capacity_bound([47, 46], seq_len=50, mode="first") == 1
    assert capacity_bound([10, 100, 1000], seq_len=50, mode="chunks") == 0 + 2 + 20
    assert capacity_bound([5], seq_len=2, mode="first") is None  # no bound


def test_cached_document_sizes_answer_as_the_reader_and_follow_file_edits(tmp_path, monkeypatch):
    """The Snakefile's corpus reader keeps its answers on disk: the same sizes as
    local_document_sizes, nothing read on a warm start, an edited file read again (its old answer
    dropped), errors never cached, an unreadable cache an empty one."""
    import causalpos.data as data
    from causalpos.config.disk import cached_document_sizes

    real, reads = data.local_document_sizes, []
    monkeypatch.setattr(data, "local_document_sizes", lambda c: reads.append(c) or real(c))
    cache = tmp_path / "cache" / "sizes.json"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("é" * 10)
    text, kjv = {"type": "text", "path": str(corpus)}, {"type": "kjv", "books": ["Ruth"]}
    cold = cached_document_sizes(cache)
    assert [cold(text), cold(kjv)] == [[20], real(kjv)] and len(reads) == 2
    warm = cached_document_sizes(cache)  # a new Snakemake start: a new reader, the same file
    assert [warm(text), warm(kjv), warm(text)] == [[20], real(kjv), [20]] and len(reads) == 2
    assert cached_document_sizes(cache)({"type": "random_tokens"}) is None
    (corpus / "a.txt").write_text("é" * 12 + "xx")  # another size: read again
    assert warm(text) == [26] and len(reads) == 4  # (random_tokens went to the reader too)
    assert len([k for k in json.loads(cache.read_text()) if k.startswith('{"path"')]) == 1
    (corpus / "a.txt").unlink()
    for _ in range(2):  # the reader's error each time; nothing cached for it
        with pytest.raises(ValueError, match="text: no files at"):
            warm(text)
    cache.write_text("{not json")
    assert cached_document_sizes(cache)(kjv) == real(kjv)
    assert json.loads(cache.read_text())  # rewritten whole
