"""causalpos.config.train: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import copy

import pytest

from causalpos.config import ConfigError, Resolved
from tests.config.configs import _overlay, resolved


def test_train_variants_have_a_canonical_order():
    variants = {"swa": {}, "rope_s1": {"positional": "rope", "seed": 1}, "nope": {}, "rope": {}}
    cfg = resolved("config.yaml", lambda c: c["train"].update(variants=variants))
    assert cfg.train_variants() == ["rope", "rope_s1", "nope", "swa"]
    assert cfg.trained_models()[1] == "resources/models/trained-rope_s1"
    assert cfg.train_variant("rope_s1")["seed"] == 1 and cfg.train_variant("rope")["seed"] == 0
    assert (
        resolved("config.yaml", lambda c: c["train"].update(enabled=False)).train_variants() == []
    )


def test_a_variant_gets_only_the_keys_its_type_reads(default):
    swa = default.train_variant("swa")
    assert list(swa)[0] == "variant" and swa["variant"] == "swa"
    assert swa["window"] == 32 and "ntk_factor" not in swa
    assert default.train_variant("ntk")[
        "ntk_factor"
    ] == 8.0 and "window" not in default.train_variant("ntk")
    rope = default.train_variant("rope")
    assert (
        "window" not in rope and "ntk_factor" not in rope and len(rope) == 20
    )  # type, 18 keys, seed
    assert (rope["hidden"], rope["context"], rope["steps"], rope["lr"], rope["min_lr_ratio"]) == (
        128,
        128,
        500,
        0.003,
        0.1,
    )
    params = default.train_variant_params("ntk")
    assert list(params) == sorted(params)


def test_training_corpus_and_heldout(smoke, default):
    assert repr(smoke.train_heldout_corpus()) == "{'books': ['Ruth', 'Mark'], 'type': 'kjv'}"
    assert (
        repr(smoke.value("train.corpus"))
        == "{'books': ['Genesis', 'Exodus', 'Ruth', 'Mark'], 'type': 'kjv'}"
    )
    assert default.train_tokenizer_dir() == "resources/tokenizers/kjv-bpe"
    assert default.gram_models() == ["trained-nope", "trained-rope"]
    assert default.model_dir("trained-nope") == "resources/models/trained-nope"


def test_comparison_inputs(default, smoke):
    d = "kjv-heldout128"
    inputs = default.compare_inputs()
    assert inputs["trained"] == [
        f"results/scores/trained-{v}/{d}/causal.zarr" for v in ("rope", "nope", "ntk", "swa")
    ]
    # the trained models' paper 2 is the overlay configs/trained-paper2.yaml's
    assert inputs["leakage"] == inputs["leakage_init"] == []
    overlay = resolved("config.yaml", lambda c: _overlay(c, "configs/trained-paper2.yaml"))
    assert overlay.compare_inputs()["leakage_init"] == [
        f"results/leakage/trained-{v}-init/{d}.zarr" for v in ("rope", "nope", "ntk", "swa")
    ]
    assert inputs["lengthgen"] == "results/stats/train_lengthgen.csv"
    # smoke: paper 2 decomposes trained-rope (and its twin) only
    assert smoke.compare_leakage_variants() == ["rope"] and smoke.compare_leakage_variants(
        "-init"
    ) == ["rope"]
    assert smoke.compare_twin_variants() == ["rope", "nope"]
    assert list(smoke.compare_plot_inputs()) == ["index", "comparison", "trained", "init"]
    no_twins = resolved(
        "configs/smoke.yaml", lambda c: c["train"]["compare"].update(init_twins=False)
    )
    assert (
        no_twins.compare_twin_variants() == [] and no_twins.compare_leakage_variants("-init") == []
    )
    assert no_twins.compare_inputs()["init"] == []
    off = resolved("configs/smoke.yaml", lambda c: c["train"]["compare"].update(dataset=""))
    assert (
        off.compare_section() is None
        and off.compare_targets() == []
        and "train_comparison" not in off.scorecard_inputs()
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["train"]["variants"].update(alibi={}),
            "train.variants.alibi: positional type 'alibi' unknown",
        ),
        (
            lambda c: c["train"]["variants"].update(rope={"window": 8}),
            "train.variants.rope.window: a rope model does not use 'window'",
        ),
        (
            lambda c: c["train"].update(warmup=50),
            r"train \(variant rope\): warmup=50 exceeds steps=20",
        ),
        (
            lambda c: c["train"]["variants"].update(swa={"window": 64}),
            r"train \(variant swa\): window=64 must be in \[1, context=32\)",
        ),
        (
            lambda c: c["train"]["gram"].update(models=["trained-ntk"]),
            "train.gram.models: 'trained-ntk' is neither trained here",
        ),
        (lambda c: c["train"]["compare"].update(dataset="ghost"), "datasets: no dataset 'ghost'"),
    ],
)
def test_bad_training_config_names_the_key(edit, message):
    with pytest.raises(ConfigError, match=message):
        resolved("configs/smoke.yaml", edit).all_targets()


def test_heldout_needs_a_kjv_corpus(smoke):
    cfg = Resolved(copy.deepcopy(smoke.config))
    cfg.config["train"]["corpus"] = {"type": "random_tokens"}  # the schema does not allow it yet
    with pytest.raises(
        ConfigError, match="train.corpus: type 'random_tokens' is not supported yet"
    ):
        cfg.train_heldout_corpus()


def test_name_lists_kept_light_here_equal_the_librarys():
    """causalpos.config stays free of torch and pandas, so it repeats a name list of a heavier
    module; this test is what keeps it a single definition in effect."""
    from causalpos.config.train import TRAIN_VARIANT_TYPES
    from causalpos.training.settings import VARIANTS

    assert tuple(TRAIN_VARIANT_TYPES) == tuple(VARIANTS)


def test_gram_panels_of_the_papers_nope_checkpoint_read_its_fineweb_draw(paper, default):
    assert paper.gram_models() == ["nope-1.5b", "trained-nope", "trained-rope"]
    assert paper.gram_inputs("nope-1.5b") == {
        "model": "resources/models/nope-1.5b",
        "data": "results/data/fineweb-first50/nope-1.5b.zarr",
    }
    draw = paper.gram_draw("nope-1.5b")
    assert (draw["seq_len"], draw["n_sequences"], draw["corpus"]["type"]) == (50, 1000, "hf")
    assert paper.gram_inputs("trained-nope") == {"model": "resources/models/trained-nope"}
    # models without a dataset: exactly the params the gram rule had before (no rerun)
    assert default.gram_draw("trained-rope") == {
        "corpus": default.train_heldout_corpus(),
        "seq_len": 50,
        "n_sequences": 60,
    }


def test_gram_of_a_configured_model_runs_without_training(paper):
    cfg = copy.deepcopy(paper.config)
    cfg["train"]["enabled"] = False
    r = Resolved(cfg)
    assert r.gram_models() == ["nope-1.5b"]
    assert "results/gram/nope-1.5b.zarr" in r.all_targets()
    cfg["train"]["gram"]["datasets"] = {"phi-4": "fineweb-first50"}
    with pytest.raises(ConfigError, match=r"train.gram.datasets.phi-4: 'phi-4' is not among"):
        Resolved(cfg).all_targets()
    cfg["train"]["gram"]["datasets"] = {"nope-1.5b": "ghost"}
    with pytest.raises(ConfigError, match=r"train.gram.datasets.nope-1.5b: no dataset 'ghost'"):
        Resolved(cfg).all_targets()
