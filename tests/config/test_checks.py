"""causalpos.config.checks: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import copy
import json

import pytest

from causalpos.config import ConfigError, Resolved
from tests.config.configs import load, resolved


def _fake_sizes(sizes):
    """A corpus reader giving ``sizes`` for the corpus {type: kjv, books: [Jonah]} only."""
    calls = []

    def read(corpus):
        calls.append(corpus)
        return sizes if corpus.get("books") == ["Jonah"] else None

    return read, calls


def test_tiny_random_init_context_kept_here_equals_the_librarys():
    from causalpos.config.shapes import TINY_MAX_POSITIONS
    from causalpos.models.architectures import ARCHITECTURES, tiny_config_kwargs

    for arch in ARCHITECTURES:
        assert tiny_config_kwargs(arch)["max_position_embeddings"] == TINY_MAX_POSITIONS


def test_the_shipped_configs_pass_every_check_without_warnings(default, smoke, paper):
    for cfg in (default, paper):
        assert cfg.check() == []
    # the tests' run says what its scorecard cannot decide (causalpos.config.claims)
    assert smoke.check() == smoke.claims_warnings() and len(smoke.check()) == 2


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["paper1_llm"].update(variants=["causal", "bidirectoinal"]),
            r"paper1_llm.variants: variant 'bidirectoinal' unknown; allowed: "
            r"\['causal', 'bidirectional', 'identity_rope'",
        ),
        (
            lambda c: c["leakage"].update(permutation_variants=["casual"]),
            r"leakage.permutation_variants: variant 'casual' unknown; allowed",
        ),
    ],
)
def test_unknown_variant_names_its_key_value_and_the_allowed_values(edit, message):
    with pytest.raises(ConfigError, match=message):
        resolved("configs/smoke.yaml", edit).check()


def test_unknown_variant_in_an_experiment_names_it_even_past_the_schema(smoke):
    cfg = copy.deepcopy(smoke.config)  # the schema's enum catches it first; the resolver too
    cfg["leakage"]["experiments"]["smoke"]["variants"] = ["causal", "bidirectional_rope"]
    with pytest.raises(
        ConfigError,
        match=r"leakage.experiments.smoke.variants: variant 'bidirectional_rope' unknown",
    ):
        Resolved(cfg).check()


def test_dataset_the_corpus_cannot_supply_fails_naming_the_key_and_values(smoke):
    read, calls = _fake_sizes([30] * 20)  # 20 documents of 30 bytes
    cfg = copy.deepcopy(smoke.config)
    cfg["datasets"]["kjv-first24"]["corpus"] = {"type": "kjv", "books": ["Jonah"]}
    cfg["datasets"]["kjv-first24"]["n_sequences"] = 21
    with pytest.raises(
        ConfigError,
        match=r"datasets.kjv-first24: n_sequences=21, seq_len=24: mode 'first' needs 21 "
        r"documents .* 20 documents, of which at most 20",
    ):
        Resolved(cfg, document_sizes=read).check()
    cfg["datasets"]["kjv-first24"].update(n_sequences=12, seq_len=40)
    with pytest.raises(ConfigError, match=r"n_sequences=12, seq_len=40: .* at most 0 can hold"):
        Resolved(cfg, document_sizes=read).check()
    cfg["datasets"]["kjv-first24"].update(seq_len=12, mode="chunks", n_sequences=61)  # 31 // 10
    with pytest.raises(ConfigError, match=r"mode 'chunks' needs 61 chunks .* gives at most 60"):
        Resolved(cfg, document_sizes=read).check()
    cfg["datasets"]["kjv-first24"].update(n_sequences=60)
    calls.clear()
    assert Resolved(cfg, document_sizes=read).check() == smoke.decomposition_warnings()  # chunks
    # each corpus is read once however many checks ask for it
    assert len(calls) == len({json.dumps(c, sort_keys=True) for c in calls})


def test_dataset_check_on_the_real_kjv_and_hub_corpora_skipped(smoke, paper):
    cfg = copy.deepcopy(smoke.config)
    cfg["datasets"]["kjv-first24"]["n_sequences"] = 1000  # Ruth + Mark have 20 chapters
    with pytest.raises(ConfigError, match=r"datasets.kjv-first24: n_sequences=1000.*20 documents"):
        Resolved(cfg).check()
    cfg = copy.deepcopy(paper.config)
    cfg["datasets"]["fineweb-first1024"]["n_sequences"] = 10**9  # hub corpus: not read here
    assert Resolved(cfg).check() == []


def test_local_text_corpus_checked_and_a_binary_file_named(tmp_path, smoke):
    (tmp_path / "a.txt").write_text("word " * 100)
    cfg = copy.deepcopy(smoke.config)
    cfg["datasets"]["local"] = {
        "corpus": {"type": "text", "path": str(tmp_path)},
        "seq_len": 16,
        "n_sequences": 2,
    }
    with pytest.raises(ConfigError, match=r"datasets.local: n_sequences=2.*1 documents"):
        Resolved(cfg).check()
    (tmp_path / "b.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 10)
    with pytest.raises(
        ConfigError, match=r"datasets.local.corpus: corpus file '.*b.txt' is not utf-8"
    ):
        Resolved(cfg).check()


def test_the_papers_gram_draw_on_heldout_chapters_was_refused_before_any_job(paper):
    cfg = copy.deepcopy(paper.config)
    cfg["train"]["gram"]["n_sequences"] = 1000  # what configs/paper.yaml had: 62 chapters
    with pytest.raises(
        ConfigError, match=r"train.gram: n_sequences=1000, seq_len=50: .* 62 documents"
    ):
        Resolved(cfg).check()


def test_seq_len_past_a_models_context(smoke, tmp_path):
    cfg = copy.deepcopy(smoke.config)
    # RoPE models run past their context: a warning naming dataset, seq_len and model
    cfg["models"]["tiny-random"]["config"]["max_position_embeddings"] = 16
    warnings = Resolved(cfg).check()
    assert any(
        "datasets.kjv-first24.seq_len with model 'tiny-random': seq_len=24 exceeds the model's "
        "context of 16 tokens (a RoPE model runs past it" in w
        for w in warnings
    ), warnings
    # the models trained here: their training context (smoke: 32)
    cfg = copy.deepcopy(smoke.config)
    cfg["datasets"]["kjv-first24"]["seq_len"] = 40
    warnings = Resolved(cfg).check()
    assert any(
        "model 'trained-nope': seq_len=40" in w and "without positional" in w for w in warnings
    )
    assert any("model 'trained-rope': seq_len=40" in w for w in warnings)
    # learned absolute positions cannot: an error
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 16}))
    cfg = copy.deepcopy(smoke.config)
    cfg["models"]["gpt2-local"] = {"source": "local", "path": str(gpt2)}
    cfg["paper1_llm"]["models"].append("gpt2-local")
    with pytest.raises(
        ConfigError,
        match=r"datasets.kjv-first24.seq_len with model 'gpt2-local': seq_len=24 exceeds the "
        r"model's 16 learned absolute positions",
    ):
        Resolved(cfg).check()
    # a hub model's context is not known here: checked when the model is loaded
    assert Resolved(copy.deepcopy(smoke.config)).model_context("trained-rope") == (32, "rope")
    assert Resolved(load("configs/paper.yaml")).model_context("llama-3.1-8b") is None
