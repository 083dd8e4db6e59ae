"""The targets' rules (causalpos.scorecard.targets): every target's rule is a rule of
causalpos.verdicts, and a target that names an unknown rule, or a declarative one that lacks a
field or names an unknown table, is refused when the targets load, naming the target."""

from __future__ import annotations

import copy

import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.scorecard import targets as T


def test_every_packaged_target_names_a_rule_of_verdicts():
    spec = S.load_targets()
    for name, t in spec["targets"].items():
        if isinstance(t, dict):
            assert set(T.rule_names(t)) <= set(T.RULES) | {T.MEASURED_RULE}, name
    assert all(callable(getattr(V, name)) for name in T.RULES)
    declared = [n for n, t in spec["targets"].items() if isinstance(t, dict) and "table" in t]
    assert {"claim6_headline", "fig3_nearby", "additivity"} <= set(declared)
    assert {"trained_vs_init", "trained_vs_init_share"} <= set(declared)
    assert {"llm_layer1_share", "llm_first_keys", "llm_vs_random_share"} <= set(declared)
    paper2 = {"claim6_linear", "sink_heads", "claim8_content", "claim7_position0"}
    assert paper2 | {"additivity_ablation", "claim2_kinds", "claim3_kinds"} <= set(declared)
    assert {"claim3_window", "claim3_base", "claim1_logit"} <= set(declared)


def test_every_declarative_target_has_one_declared_family_and_no_row_builder_reads_it():
    from causalpos.scorecard.card import FAMILIES, Declared

    spec = S.load_targets()
    declared = sorted(n for n, t in spec["targets"].items() if isinstance(t, dict) and "table" in t)
    families = sorted(f.name for f in FAMILIES if isinstance(f, Declared))
    assert families == declared


def _spec(**fields):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["fig3_nearby"] |= fields
    return spec


def test_an_interval_rule_reads_its_estimates_lo_and_hi_columns_unless_it_names_others():
    spec = _spec()
    del spec["targets"]["fig3_nearby"]["lo"], spec["targets"]["fig3_nearby"]["hi"]
    t = S.load_targets(spec)["targets"]["fig3_nearby"]
    assert (t["lo"], t["hi"]) == ("nearby_lo", "nearby_hi")
    t = S.load_targets()["targets"]
    assert (t["claim3_base"]["lo"], t["claim3_base"]["hi"]) == (
        "logit_effect_lo",
        "logit_effect_hi",
    )
    assert not {"lo", "hi"} & set(t["claim7_position0"])  # a point rule: no interval


def test_an_unknown_rule_is_refused_at_load_naming_the_target():
    with pytest.raises(ValueError, match=r"target 'fig3_nearby'.*'bigger'.*one of equivalent"):
        S.load_targets(_spec(rule="bigger"))
    with pytest.raises(ValueError, match=r"target 'claim1_logit'.*not a rule"):
        spec = copy.deepcopy(S.load_targets())
        spec["targets"]["claim1_logit"]["rule"] = "positive, against the materiality threshold"
        S.load_targets(spec)
    spec = copy.deepcopy(S.load_targets())
    assert spec["targets"]["claim4_share"]["range"]["rule"] == "within_range"
    spec["targets"]["claim4_share"]["range"]["rule"] = "inside"
    with pytest.raises(ValueError, match=r"target 'claim4_share' has range rule 'inside'"):
        S.load_targets(spec)


def test_a_declarative_target_without_a_field_or_with_an_unknown_table_is_refused_at_load():
    spec = _spec()
    del spec["targets"]["fig3_nearby"]["estimate"]
    with pytest.raises(ValueError, match=r"target 'fig3_nearby'.*lacks estimate"):
        S.load_targets(spec)
    with pytest.raises(ValueError, match=r"target 'fig3_nearby' reads table 'gram'"):
        S.load_targets(_spec(table="gram"))
    with pytest.raises(ValueError, match=r"target 'fig3_nearby'.*the engine dispatches one of"):
        S.load_targets(_spec(rule=["positive", "fraction"]))
    with pytest.raises(ValueError, match=r"target 'fig3_nearby': rule equivalent needs"):
        S.load_targets(_spec(rule="equivalent"))
    with pytest.raises(ValueError, match=r"target 'additivity'.*lacks measured_why"):
        spec = copy.deepcopy(S.load_targets())
        del spec["targets"]["additivity"]["measured_why"]
        S.load_targets(spec)
