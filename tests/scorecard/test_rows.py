"""Rows and targets (causalpos.scorecard.rows): every target holds its falsification condition,
the rows' sources are the tables the config makes, the labels the library's tables use; a row's
rule text, rendered from the rule's function and the values it was judged with, follows the
config and the findings page that quotes it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.findings.render import Tables, render
from causalpos.scorecard.rows import docstring_text, rule_text, rules_text
from tests.scorecard_tables import _card, _lead, _one


def test_targets_file_holds_every_target_with_its_falsification_condition():
    spec = S.load_targets()
    T = spec["targets"]
    for key, t in T.items():
        if key == "unscored":
            assert all(u["falsified_if"] and u["why"] for u in t)
            continue
        assert t["paper"] in ("paper 1", "paper 2") and t["rule"] and t["why"], key
        assert t.get("section", t["paper"]) in S.SECTIONS, key
        assert any(k.startswith("falsified_if") for k in t), key
        # the positive control's bound is its own CI around the planted share; the negative
        # control's margin and paper 2's materiality thresholds are the config's
        assert {"margin", "threshold", "tolerance", "materiality"} & set(t) or key in (
            "sim_depth",
            "control_negative",
            "control_positive",
            "additivity",  # a measurement: no verdict
            "additivity_ablation",  # idem
        ), key
    # paper values keyed by the papers' own model ids
    assert T["claim4_share"]["values"]["meta-llama/Llama-3.2-1B"] == 0.82
    assert S.paper_model_id("llama-3.2-1b", spec) == "meta-llama/Llama-3.2-1B"
    assert S.paper_model_id("Llama-3.2-3B", spec) == "meta-llama/Llama-3.2-3B"
    assert S.paper_model_id("llama-3.2-1b-random", spec) is None


@pytest.mark.parametrize("config", ["config.yaml", "configs/smoke.yaml", "configs/paper.yaml"])
def test_the_sources_rows_name_are_the_tables_the_config_makes(config):
    import yaml
    from snakemake.utils import validate

    from causalpos.config import Resolved
    from causalpos.scorecard.rows import SOURCES

    repo = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((repo / config).read_text())
    validate(cfg, str(repo / "workflow" / "schemas" / "config.schema.yaml"))
    inputs = Resolved(cfg).scorecard_inputs()
    assert inputs == {k: SOURCES[k] for k in inputs}


def test_table_names_repeated_in_the_scorecard_equal_the_librarys():
    from causalpos.paper2 import labels
    from causalpos.paper2.summary import bos

    assert S.TABLE_MEASURED == labels.MEASURED
    assert S.RESIDUAL_STREAM == bos.RESIDUAL_STREAM


def test_a_rule_is_its_functions_docstring_with_its_values():
    text = rule_text(V.positive, threshold=0.0025)
    assert text.startswith("`positive` (threshold = 0.0025): An effect larger than `threshold`")
    # the verdicts as verdicts.py defines them, roles and literals as inline code
    assert "`reproduced` if lo > threshold; `differs` if hi <= threshold" in text
    assert "decides nothing: `decides`)" in text and ":func:" not in text and "``" not in text
    assert text.endswith(docstring_text(V.positive))
    assert rule_text(V.unless_control_reads).startswith("`unless_control_reads`: A test's verdict")
    assert rules_text("a.", "", "b.") == "a. Then b."


def test_claim1s_rule_text_follows_the_configs_threshold_and_the_rule_it_applies(tmp_path):
    """The row's rule names the threshold the scorecard judged it with (the config's
    leakage.materiality.claim1_logit) and the rule verdicts.py applies: raising the threshold
    changes both the text and, where the interval lies between the two, the verdict."""
    head = pd.DataFrame(
        [
            _lead("m", (0.004, 0.003, 0.005), ctl=(0.0, -0.001, 0.001)),
            _lead("n", (0.01, 0.008, 0.012)),
        ]
    )
    texts = {}
    for threshold, verdict in ((0.002, V.REPRODUCED), (0.006, V.DIFFERS)):
        card = _card(tmp_path, materiality={"claim1_logit": threshold}, headline=head)
        row = _one(card, "claim 1 (m, d)")
        assert row["verdict"] == verdict == V.positive((0.003, 0.005), threshold)
        expected = rules_text(
            rule_text(V.positive, threshold=threshold), rule_text(V.unless_control_reads)
        )
        assert row["rule"] == expected
        texts[threshold] = row["rule"]
        # without its own control the model's row states the test alone
        assert _one(card, "claim 1 (n, d)")["rule"] == rule_text(V.positive, threshold=threshold)
    assert texts[0.002] != texts[0.006] and "threshold = 0.006" in texts[0.006]
    # the rows no rule decides say none
    twin = pd.DataFrame(
        [_lead("m", (0.004, 0.003, 0.005)), _lead("r", (0.1, 0.09, 0.11)) | {"init_of": "m"}]
    )
    card = _card(tmp_path, headline=twin)
    assert _one(card, "claim 1 (r, d)")["rule"] == ""
    assert _one(card, "claim 1, trained minus init twin (m - r, d)")["rule"] == ""


def test_a_negative_controls_rule_text_states_its_declared_margin_and_alpha(tmp_path):
    row = {"model": "m", "dataset": "d", "variant": "identity_rope+ring", "target": "logit"}
    row |= {"negative": 0.0, "negative_lo": -0.1, "negative_hi": 0.1, "planted": 0.01}
    row |= {"per_prompt": 0.4, "per_prompt_lo": 0.3, "per_prompt_hi": 0.5}
    row |= {"per_prompt_margin": 0.01, "negative_tost_level": 0.8}
    row |= {"planted_estimate": 0.01, "planted_estimate_lo": 0.008, "planted_estimate_hi": 0.012}
    p = "negative_modelled_"
    row |= {f"{p}model_units": 0.0, f"{p}model_units_lo": -0.001, f"{p}model_units_hi": 0.001}
    row |= {f"{p}tost_lo": -0.0008, f"{p}tost_hi": 0.0008, f"{p}margin": 0.003}
    card = _card(tmp_path, controls=pd.DataFrame([row]))
    neg = _one(card, "negative control (m, d, identity_rope+ring, logit, landmark modelled)")
    assert neg["rule"] == rule_text(V.negative_control, margin=0.003, alpha=0.1)
    assert neg["verdict"] == V.negative_control((-0.0008, 0.0008), 0.003) == V.PASSED
    pos = _one(card, "positive control (m, d, identity_rope+ring, logit)")
    assert pos["rule"] == rule_text(V.recovered, truth=0.01)


def test_the_findings_page_quotes_the_rule_the_scorecard_applied(tmp_path):
    """A findings reference to a row's rule renders the config's value: the page's text about a
    rule changes when the config's threshold does."""
    head = pd.DataFrame([_lead("m", (0.004, 0.003, 0.005))])
    template = 'Claim 1 is scored by {{scorecard[target="claim 1 (m, d)"].rule}}\n'
    pages = []
    for threshold in (0.002, 0.003):
        card = _card(tmp_path, materiality={"claim1_logit": threshold}, headline=head)
        card.to_csv(tmp_path / "scorecard.csv", index=False)
        page = render(template, Tables({"scorecard": tmp_path / "scorecard.csv"}))
        assert page.endswith(f"Claim 1 is scored by {rule_text(V.positive, threshold=threshold)}\n")
        pages.append(page)
    assert pages[0] != pages[1]
