"""Seeded sequence sampling (causalpos.sampling): the tokenizer's prefix and a fixed BOS, the draw's
modes, seeds and strata, no padding, one document set for every tokenizer, a draw's distinct
sequences (copies of one refused, duplicates and near-constant draws warned)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from causalpos.data import CorpusError, kjv_documents, load_documents
from causalpos.distinct import MIN_DISTINCT, NEAR_CONSTANT_SHARE, check_distinct, distinctness
from causalpos.io.store import open_dataset, write_dataset
from causalpos.sampling import (
    SequenceSample,
    bos_prefix,
    documents_long_enough,
    draw_sequences,
    non_special_ids,
    special_affixes,
    tokenize_texts,
)

GENESIS = {"type": "kjv", "unit": "chapter", "books": ["Genesis"]}


def test_special_affixes(tokenizer_bos, tokenizer_nobos):
    assert special_affixes(tokenizer_bos) == ([1], [])
    assert special_affixes(tokenizer_nobos) == ([], [])


@pytest.mark.parametrize("bos", [True, False])
def test_first_mode_is_the_first_tokens_of_each_document(bos, tokenizer_bos, tokenizer_nobos):
    tok = tokenizer_bos if bos else tokenizer_nobos
    ds = draw_sequences(
        tok, SequenceSample(corpus=GENESIS, seq_len=64, n_sequences=6, mode="first", seed=0)
    )
    docs = load_documents(GENESIS)
    assert ds["tokens"].dtype == np.int64 and ds["tokens"].shape == (6, 64)
    assert ds.attrs["bos"] is bos and ds.attrs["mode"] == "first" and ds.attrs["seq_len"] == 64
    assert len(set(ds["document"].values.tolist())) == 6  # without replacement
    for i in range(6):
        d = int(ds["document"][i])
        # Independent: the tokenizer with its default special tokens, cut to T.
        expected = tok(docs[d].text).input_ids[:64]
        assert ds["tokens"].values[i].tolist() == expected
        assert ds["source"].values[i] == "Genesis" and int(ds["offset"][i]) == 0
    assert (ds["tokens"].values[:, 0] == 1).all() == bos


def test_chunks_mode_consecutive_chunks_with_prefix(tokenizer_bos):
    ds = draw_sequences(
        tokenizer_bos,
        SequenceSample(corpus=GENESIS, seq_len=32, n_sequences=40, mode="chunks", seed=1),
    )
    docs = load_documents(GENESIS)
    for i in range(40):
        d, off = int(ds["document"][i]), int(ds["offset"][i])
        body = tokenizer_bos(docs[d].text, add_special_tokens=False).input_ids
        assert off % 31 == 0 and off + 31 <= len(
            body
        )  # chunks of T - 1 content tokens, in-document
        assert ds["tokens"].values[i].tolist() == [1] + body[off : off + 31]
    pairs = set(zip(ds["document"].values.tolist(), ds["offset"].values.tolist()))
    assert len(pairs) == 40


@pytest.mark.parametrize("mode, seq_len", [("first", 64), ("chunks", 32)])
@pytest.mark.parametrize("prepend_bos", [True, False])
def test_tokenize_texts_makes_the_rows_a_dataset_draws(mode, seq_len, prepend_bos, tokenizer_nobos):
    """The texts a draw picked, given to tokenize_texts in the draw's order, make the draw's
    rows (a chunk: its document's chunks in order, the drawn one among them) and record
    position 0 as the draw does; SmolLM2-style tokenizer, BOS fixed by prepend_bos."""
    sample = SequenceSample(
        corpus=GENESIS, seq_len=seq_len, n_sequences=8, mode=mode, seed=3, prepend_bos=prepend_bos
    )
    ds = draw_sequences(tokenizer_nobos, sample)
    docs = load_documents(GENESIS)
    texts = [docs[int(d)].text for d in ds["document"].values]
    got = tokenize_texts(tokenizer_nobos, texts, seq_len, mode=mode, prepend_bos=prepend_bos)
    keys = ("mode", "seq_len", "bos", "bos_id", "prefix_ids", "prepend_bos", "bos_added")
    assert {k: got.attrs[k] for k in keys} == {k: ds.attrs[k] for k in keys}
    assert (got["tokens"].values[:, 0] == tokenizer_nobos.bos_token_id).all() == prepend_bos
    for i in range(8):
        rows = got["tokens"].values[got["document"].values == i]
        offsets = got["offset"].values[got["document"].values == i]
        k = int(np.flatnonzero(offsets == int(ds["offset"][i]))[0])
        assert rows[k].tolist() == ds["tokens"].values[i].tolist()
        assert set(got["source"].values[got["document"].values == i]) == {str(i)}
    if mode == "first":
        assert got["tokens"].shape == (8, seq_len) and (got["offset"].values == 0).all()
    cut = tokenize_texts(tokenizer_nobos, texts, seq_len, mode=mode, n_sequences=3)
    assert cut.sizes["sequence"] == 3 and cut.attrs["n_sequences"] == 3


def test_tokenize_texts_refuses_what_a_dataset_would_not_hold(tokenizer_bos, tokenizer_nobos):
    with pytest.raises(CorpusError, match=r"text 1 gives 3 tokens, fewer than seq_len=8: give"):
        tokenize_texts(tokenizer_bos, ["In the beginning God created", "And God"], 8)
    with pytest.raises(CorpusError, match="no text gives a chunk of 64 tokens"):
        tokenize_texts(tokenizer_bos, ["And God said"], 64, mode="chunks")
    with pytest.raises(CorpusError, match="padding token id 3"):
        tokenize_texts(tokenizer_nobos, ["And God said <pad> let there be light. " * 4], 12)
    with pytest.raises(CorpusError, match=r"mode 'book' not in \('first', 'chunks'\)"):
        tokenize_texts(tokenizer_bos, ["x"], 4, mode="book")
    with pytest.raises(CorpusError, match="n_sequences must be >= 1"):
        tokenize_texts(tokenizer_bos, ["And God said"], 2, n_sequences=0)
    plain = tokenizer_nobos.__class__(tokenizer_object=tokenizer_nobos.backend_tokenizer)
    with pytest.raises(CorpusError, match="defines no BOS token"):
        tokenize_texts(plain, ["And God said"], 2, prepend_bos=True)


def test_sampling_is_seeded_and_prefix_stable(tokenizer_nobos):
    a = draw_sequences(
        tokenizer_nobos,
        SequenceSample(corpus=GENESIS, seq_len=16, n_sequences=10, mode="chunks", seed=5),
    )
    b = draw_sequences(
        tokenizer_nobos,
        SequenceSample(corpus=GENESIS, seq_len=16, n_sequences=10, mode="chunks", seed=5),
    )
    c = draw_sequences(
        tokenizer_nobos,
        SequenceSample(corpus=GENESIS, seq_len=16, n_sequences=10, mode="chunks", seed=6),
    )
    more = draw_sequences(
        tokenizer_nobos,
        SequenceSample(corpus=GENESIS, seq_len=16, n_sequences=25, mode="chunks", seed=5),
    )
    assert (a["tokens"].values == b["tokens"].values).all()
    assert not (a["tokens"].values == c["tokens"].values).all()
    # Growing the dataset keeps the existing sequences.
    assert (more["tokens"].values[:10] == a["tokens"].values).all()
    assert a.attrs["tokenizer_sha256"] == c.attrs["tokenizer_sha256"]


def test_random_tokens_keep_bos_and_avoid_specials(tokenizer_bos):
    ds = draw_sequences(
        tokenizer_bos,
        SequenceSample(
            corpus={"type": "random_tokens"}, seq_len=50, n_sequences=40, mode="chunks", seed=0
        ),
    )
    t = ds["tokens"].values
    assert (t[:, 0] == 1).all() and ds.attrs["bos"] is True
    allowed = set(non_special_ids(tokenizer_bos).tolist())
    assert allowed == set(range(4, 400))
    assert set(t[:, 1:].ravel().tolist()) <= allowed
    # Uniform over 396 ids: 1960 draws hit nearly all of them (expected ~391 distinct).
    assert len(set(t[:, 1:].ravel().tolist())) > 370
    assert (ds["document"].values == -1).all()


@pytest.mark.parametrize("corpus", [GENESIS, {"type": "random_tokens"}])
def test_prepend_bos_fixes_position_0_and_is_recorded(corpus, tokenizer_nobos, tokenizer_bos):
    """SmolLM2-style: the tokenizer defines a BOS (``<s>``, id 1) but never adds it."""
    kw = dict(seq_len=32, n_sequences=12, mode="chunks", seed=3)
    plain = draw_sequences(tokenizer_nobos, SequenceSample(corpus=corpus, **kw))
    fixed = draw_sequences(tokenizer_nobos, SequenceSample(corpus=corpus, prepend_bos=True, **kw))
    t = fixed["tokens"].values
    assert t.shape == (12, 32) and (t[:, 0] == 1).all()  # the BOS at position 0 of every sequence
    assert plain.attrs["bos"] is False and plain.attrs["prefix_ids"] == []
    assert (plain["tokens"].values[:, 0] != 1).any()
    a = fixed.attrs
    assert (a["bos"], a["bos_id"], a["prefix_ids"], a["bos_added"]) == (True, 1, [1], True)
    assert json.loads(a["prepend_bos"]) is True and json.loads(plain.attrs["prepend_bos"]) is False
    if corpus["type"] == "random_tokens":  # the body avoids special ids, the BOS among them
        assert 1 not in set(t[:, 1:].ravel().tolist())
    if corpus["type"] == "kjv":
        # the content after the BOS is the tokenizer's own chunks of T - 1 tokens
        docs = load_documents(GENESIS)
        for i in range(12):
            d, off = int(fixed["document"][i]), int(fixed["offset"][i])
            body = tokenizer_nobos(docs[d].text, add_special_tokens=False).input_ids
            assert t[i].tolist() == [1] + body[off : off + 31]
        # a tokenizer that adds its BOS itself gets no second one: same sequences as without
        llama = draw_sequences(tokenizer_bos, SequenceSample(corpus=corpus, prepend_bos=True, **kw))
        base = draw_sequences(tokenizer_bos, SequenceSample(corpus=corpus, **kw))
        assert (llama["tokens"].values == base["tokens"].values).all()
        assert llama.attrs["prefix_ids"] == [1] and llama.attrs["bos_added"] is False
        assert llama.attrs["bos"] is True and base.attrs["bos"] is True
    # a named token or an id: that token at position 0
    eos = draw_sequences(tokenizer_nobos, SequenceSample(corpus=corpus, prepend_bos="</s>", **kw))
    by_id = draw_sequences(tokenizer_nobos, SequenceSample(corpus=corpus, prepend_bos=2, **kw))
    assert (eos["tokens"].values[:, 0] == 2).all() and eos.attrs["bos_id"] == 2
    assert (eos["tokens"].values == by_id["tokens"].values).all()
    assert json.loads(eos.attrs["prepend_bos"]) == "</s>"


def test_prepend_bos_errors_name_the_dataset_key(tokenizer_nobos):
    import copy

    no_bos = copy.deepcopy(tokenizer_nobos)
    no_bos.bos_token = None
    assert no_bos.bos_token_id is None
    kw = dict(seq_len=16, n_sequences=2, mode="chunks", seed=0)
    key = "datasets.wiki.prepend_bos"
    with pytest.raises(
        CorpusError, match=r"datasets\.wiki\.prepend_bos: true, but tokenizer .* defines no BOS"
    ):
        draw_sequences(no_bos, SequenceSample(corpus=GENESIS, prepend_bos=True, **kw), key=key)
    with pytest.raises(CorpusError, match=r"datasets\.wiki\.prepend_bos: token '<bos>' is not in"):
        draw_sequences(
            tokenizer_nobos, SequenceSample(corpus=GENESIS, prepend_bos="<bos>", **kw), key=key
        )
    with pytest.raises(CorpusError, match=r"datasets\.wiki\.prepend_bos: id 400 outside"):
        draw_sequences(
            tokenizer_nobos, SequenceSample(corpus=GENESIS, prepend_bos=400, **kw), key=key
        )
    # off: the prefix is the tokenizer's own, with or without a BOS defined
    assert bos_prefix(no_bos, [], False) == ([], None, False)
    assert bos_prefix(tokenizer_nobos, [], 0) == ([0], 0, True)  # id 0 is not "off"


def test_stratified_chunks_balance_sources(tokenizer_nobos):
    corpus = {"type": "kjv", "unit": "chapter", "books": ["Genesis", "Ruth"], "stratify": True}
    ds = draw_sequences(
        tokenizer_nobos,
        SequenceSample(corpus=corpus, seq_len=64, n_sequences=20, mode="chunks", seed=0),
    )
    src = ds["source"].values.tolist()
    assert src.count("Genesis") == src.count("Ruth") == 10


def test_text_and_jsonl_corpora(tmp_path, tokenizer_nobos):
    (tmp_path / "a.txt").write_text("In the beginning was the word.\n\n" * 40)
    (tmp_path / "b.txt").write_text("And the earth was without form.\n\n" * 40)
    docs = load_documents({"type": "text", "path": str(tmp_path)})
    assert [d.source for d in docs] == ["a.txt", "b.txt"]
    split = load_documents({"type": "text", "path": str(tmp_path / "a.txt"), "separator": "\n\n"})
    assert len(split) == 40 and split[0].text == "In the beginning was the word."
    lines = [json.dumps({"text": "Let there be light. " * 30, "book": f"b{i}"}) for i in range(5)]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    ds = draw_sequences(
        tokenizer_nobos,
        SequenceSample(
            corpus={"type": "jsonl", "path": str(tmp_path / "c.jsonl"), "source_field": "book"},
            seq_len=20,
            n_sequences=5,
            mode="first",
            seed=0,
        ),
    )
    assert sorted(ds["source"].values.tolist()) == [f"b{i}" for i in range(5)]


def test_padding_is_refused(tmp_path, tokenizer_nobos):
    (tmp_path / "p.txt").write_text("And God said <pad> let there be light. " * 20)
    with pytest.raises(CorpusError, match="padding token id 3"):
        draw_sequences(
            tokenizer_nobos,
            SequenceSample(
                corpus={"type": "text", "path": str(tmp_path / "p.txt")},
                seq_len=30,
                n_sequences=1,
                mode="first",
                seed=0,
            ),
        )


def test_errors_say_what_to_do(tokenizer_nobos):
    with pytest.raises(CorpusError, match="fewer than n_sequences.*chunks"):
        draw_sequences(
            tokenizer_nobos,
            SequenceSample(corpus=GENESIS, seq_len=5000, n_sequences=2, mode="first", seed=0),
        )
    with pytest.raises(CorpusError, match="unknown key.*'bookz'"):
        draw_sequences(
            tokenizer_nobos,
            SequenceSample(
                corpus={"type": "kjv", "bookz": []}, seq_len=8, n_sequences=1, mode="first", seed=0
            ),
        )
    with pytest.raises(CorpusError, match="allowed"):
        draw_sequences(
            tokenizer_nobos,
            SequenceSample(corpus={"type": "wiki"}, seq_len=8, n_sequences=1, mode="first", seed=0),
        )
    # The dataset hub is never touched unless a corpus names a dataset; unreachable -> offline hint.
    with pytest.raises(CorpusError, match=r"HuggingFaceFW/fineweb-edu.*type: kjv"):
        draw_sequences(
            tokenizer_nobos,
            SequenceSample(
                corpus={"type": "hf", "dataset": "HuggingFaceFW/fineweb-edu"},
                seq_len=8,
                n_sequences=1,
                mode="first",
                seed=0,
            ),
        )


def test_sequences_roundtrip_through_store(tmp_path, tokenizer_bos):
    ds = draw_sequences(
        tokenizer_bos,
        SequenceSample(corpus=GENESIS, seq_len=16, n_sequences=4, mode="chunks", seed=0),
    )
    write_dataset(ds, tmp_path / "d.zarr")
    back = open_dataset(tmp_path / "d.zarr")
    assert (back["tokens"].values == ds["tokens"].values).all() and back["tokens"].dtype == np.int64
    assert back["source"].values.tolist() == ds["source"].values.tolist()
    assert back.attrs["bos"] is True and back.attrs["prefix_ids"] == [1]


def test_first_mode_draws_the_same_documents_for_every_tokenizer(tokenizer_bos, tokenizer_nobos):
    """The BOS tokenizer needs one token fewer of text: alone, the two draw from different
    candidate sets; each told about the other, both draw the documents long enough for both."""
    texts = [d.text for d in kjv_documents("chapter", ["Genesis"])]
    lengths = sorted(len(x) for x in tokenizer_nobos(texts, add_special_tokens=False).input_ids)
    seq_len = lengths[len(lengths) // 2] + 1  # the median chapter fits the BOS tokenizer only
    kw = dict(seq_len=seq_len, n_sequences=10, mode="first", seed=3)
    alone = draw_sequences(tokenizer_bos, SequenceSample(corpus=GENESIS, **kw))
    a = draw_sequences(
        tokenizer_bos, SequenceSample(corpus=GENESIS, **kw), also_for=[tokenizer_nobos]
    )
    b = draw_sequences(
        tokenizer_nobos, SequenceSample(corpus=GENESIS, **kw), also_for=[tokenizer_bos]
    )
    assert alone.attrs["n_candidates"] > a.attrs["n_candidates"] == b.attrs["n_candidates"]
    assert a["document"].values.tolist() == b["document"].values.tolist()
    assert a.attrs["documents_also_for"] and "documents_also_for" not in alone.attrs
    both = documents_long_enough([tokenizer_bos, tokenizer_nobos], texts, seq_len)
    assert set(a["document"].values.tolist()) <= both
    # the token sequences are each tokenizer's own: BOS first, then the document's first tokens
    assert (a["tokens"].values[:, 0] == tokenizer_bos.bos_token_id).all()
    assert (a["tokens"].values[:, 1:] == b["tokens"].values[:, :-1]).all()


def test_each_sampling_default_is_written_once():
    from tests.settings_defaults import disagreements

    assert disagreements(SequenceSample) == []


#: A boilerplate header every document of :func:`_header_corpus` starts with.
HEADER = (
    "This text is distributed under the terms of the archive's licence; keep this notice intact "
    "on every copy. "
)


def _header_corpus(tmp_path, bodies: list[str]) -> dict:
    """A text corpus, one document per body, each starting with :data:`HEADER`."""
    d = tmp_path / "corpus"
    d.mkdir(parents=True)
    for i, body in enumerate(bodies):
        (d / f"doc{i:02d}.txt").write_text(HEADER + body)
    return {"type": "text", "path": str(d)}


def _draw(tok, corpus, seq_len: int, n: int, mode: str = "first"):
    return draw_sequences(
        tok, SequenceSample(corpus=corpus, seq_len=seq_len, n_sequences=n, mode=mode, seed=0)
    )


def test_distinctness_counts_rows_and_the_positions_every_row_shares():
    tokens = np.array([[1, 5, 6, 7, 8], [1, 5, 6, 9, 8], [1, 5, 6, 7, 8]])
    n, shared = distinctness(tokens, 1)
    assert n == 2 and shared.tolist() == [True, True, False, True]
    n, shared = distinctness(tokens[:1], 0)  # one row: every position is its own
    assert n == 1 and shared.all() and shared.size == 5


def test_a_draw_records_its_distinct_sequences(tmp_path, tokenizer_bos):
    """mode 'first' on documents sharing a header: the attrs count the distinct sequences and
    the positions after the BOS at which every sequence holds one token, as an independent
    count over the token lists says."""
    bodies = [d.text for d in kjv_documents("chapter", ["Genesis"])[:6]]
    corpus = _header_corpus(tmp_path, bodies + bodies[:2])  # two documents twice
    header_len = len(tokenizer_bos(HEADER, add_special_tokens=False).input_ids)
    ds = _draw(tokenizer_bos, corpus, header_len + 12, 8)
    rows = [tuple(r) for r in ds["tokens"].values.tolist()]
    assert ds.attrs["n_distinct"] == len(set(rows)) == 6
    same = [p for p in range(1, len(rows[0])) if len({r[p] for r in rows}) == 1]
    assert ds.attrs["n_shared_positions"] == len(same) >= header_len - 1


def test_copies_of_one_sequence_are_refused_with_the_dataset_and_the_fix(tmp_path, tokenizer_bos):
    """A corpus whose documents agree on their first seq_len tokens (a shared header, mode
    'first') gives one distinct sequence: refused, naming the dataset key and the fix."""
    bodies = [d.text for d in kjv_documents("chapter", ["Genesis"])[:5]]
    corpus = _header_corpus(tmp_path, bodies)
    ds = _draw(tokenizer_bos, corpus, 16, 5)
    assert ds.attrs["n_distinct"] == 1 and ds.attrs["n_shared_positions"] == 15
    with pytest.raises(CorpusError) as err:
        check_distinct(ds, "datasets.boiler")
    msg = str(err.value)
    assert msg.startswith("datasets.boiler: its 5 sequences of 16 tokens are 1 distinct")
    assert f"at least {MIN_DISTINCT} distinct" in msg and "mode 'chunks'" in msg
    assert "strip the shared text" in msg
    # the same documents as chunks of the whole text: distinct, nothing to say
    chunks = _draw(tokenizer_bos, corpus, 16, 5, mode="chunks")
    assert chunks.attrs["n_distinct"] == 5 and check_distinct(chunks, "datasets.boiler") == []
    # one sequence is one distinct sequence: nothing to refuse (config allows it off statistics)
    assert check_distinct(_draw(tokenizer_bos, corpus, 16, 1), "datasets.one") == []


def test_duplicates_and_near_constant_draws_are_warned(tmp_path, tokenizer_bos):
    bodies = [d.text for d in kjv_documents("chapter", ["Genesis"])[:4]]
    header_len = len(tokenizer_bos(HEADER, add_special_tokens=False).input_ids)
    corpus = _header_corpus(tmp_path, bodies + bodies[:1])
    ds = _draw(tokenizer_bos, corpus, header_len + 8, 5)
    warnings = check_distinct(ds, "datasets.boiler")
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("datasets.boiler: its 5 sequences of")
    assert "are 4 distinct ones (1 repeat another token for token)" in warnings[0]
    shared = ds.attrs["n_shared_positions"]
    assert shared >= NEAR_CONSTANT_SHARE * (ds.attrs["seq_len"] - 1)
    assert f"same token at {shared} of the {ds.attrs['seq_len'] - 1} positions" in warnings[1]
    assert "positions 1-" in warnings[1]
    # the headers short against the sequences: distinct and not near-constant
    long = _draw(tokenizer_bos, _header_corpus(tmp_path / "b", bodies), 4 * header_len, 4)
    assert check_distinct(long, "datasets.boiler") == []
