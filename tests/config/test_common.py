"""causalpos.config.common: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import re

import pytest

from causalpos.config import VARIANT_PATTERN, ConfigError, Resolved
from causalpos.config.common import canonical, names_pattern
from causalpos.models.variants import VARIANTS, variant_names
from causalpos.paper1.settings import BootstrapSettings
from tests.config.configs import resolved


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


def test_names_pattern_escapes_and_matches_nothing_when_empty():
    assert names_pattern(["a.b", "c-d"]) == r"a\.b|c\-d"
    assert names_pattern([]) == "(?!)"


def test_gpus_follow_the_device(default, paper):
    from causalpos.settings import Scheduling

    assert default.values(Scheduling).gpu == 0
    assert paper.values(Scheduling).gpu == 1
    auto = resolved("config.yaml", lambda c: c.update(device="auto"))
    assert auto.values(Scheduling).gpu == 1


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


def test_the_local_rules_are_the_configs_and_an_unknown_one_is_named():
    cfg = Resolved({"local_rules": ["scorecard", "gram_table"]})
    assert cfg.local_rules({"gram_table", "scorecard", "all"}) == ["scorecard", "gram_table"]
    assert Resolved({"local_rules": []}).local_rules(["all"]) == []
    with pytest.raises(ConfigError) as info:
        cfg.local_rules(r for r in ("all", "scorecard", "leakage"))
    assert str(info.value) == (
        "causalpos: local_rules names no rule of this workflow: gram_table "
        "(rules: all, leakage, scorecard). Fix: remove it from local_rules"
    )
