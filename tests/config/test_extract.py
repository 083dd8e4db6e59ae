"""causalpos.config.extract: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import copy

import pytest

from causalpos.config import ConfigError, Resolved
from tests.config.configs import _overlay, resolved


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
