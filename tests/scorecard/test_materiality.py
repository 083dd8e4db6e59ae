"""Paper 2's materiality thresholds (causalpos.scorecard.materiality): declared once per claim in
the config, the same default in the dataclass, the schema and config.yaml, each at least the
negative controls' margin on its reading, named by exactly one target, and what decides."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from causalpos import scorecard as S
from causalpos.config import Resolved
from causalpos.config.common import ConfigError
from causalpos.config.leakage import MATERIALITY_READINGS
from causalpos.scorecard.materiality import Materiality, for_model
from tests.settings_defaults import CONFIG, disagreements

#: The thresholds (the fields with a config key; ``per_model`` holds each model's own).
CLAIMS = [f for f in dataclasses.fields(Materiality) if f.metadata["config"]]


def test_each_default_is_written_once():
    assert disagreements(Materiality) == []
    keys = [f.metadata["config"] for f in CLAIMS]
    assert all(k.startswith("leakage.materiality.") for k in keys) and len(keys) == 5


def test_each_threshold_is_named_by_its_claims_targets_and_given_to_them():
    """Every threshold is used, and only by targets of its own claim (a claim's per-kind rows
    share the claim's threshold)."""
    T = S.load_targets()["targets"]
    named = {
        k: t["materiality"] for k, t in T.items() if isinstance(t, dict) and "materiality" in t
    }
    assert set(named.values()) == {f.name for f in CLAIMS}
    for target, threshold in named.items():
        assert target.split("_")[0] == threshold.split("_")[0], (target, threshold)
    m = Materiality(claim1_logit=0.123)
    applied = m.apply(T)
    assert applied["claim1_logit"]["threshold"] == 0.123
    assert applied["claim6_headline"]["threshold"] == Materiality().claim6_headline
    assert "threshold" not in T["claim1_logit"]  # the targets file holds no second value
    with pytest.raises(ValueError, match="materiality 'claim9' is no threshold"):
        m.apply({"x": {"materiality": "claim9"}})
    with pytest.raises(ValueError, match=r"leakage.materiality has no key\(s\) \['claim9'\]"):
        Materiality.from_params({"claim9": 0.1})
    assert Materiality.from_params(None) == Materiality()


def test_a_threshold_below_twice_the_controls_margin_is_refused_before_any_job():
    from snakemake.utils import validate

    from tests.wfutil import REPO

    cfg = copy.deepcopy(CONFIG)
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    got = Resolved(cfg).leakage_materiality()
    assert got == {f.name: getattr(Materiality(**got), f.name) for f in CLAIMS}
    assert set(MATERIALITY_READINGS) == set(got)
    for claim, reading in MATERIALITY_READINGS.items():
        if reading is None:
            continue
        # at exactly twice the margin it passes; just below, it is refused (the old rule,
        # threshold >= margin, let a threshold of 1.5 margins through)
        margin = cfg["leakage"]["controls"]["margin"][reading]
        ok = copy.deepcopy(cfg)
        ok["leakage"]["materiality"][claim] = 2 * margin
        Resolved(ok).leakage_materiality()
        bad = copy.deepcopy(cfg)
        bad["leakage"]["materiality"][claim] = 1.5 * margin
        with pytest.raises(
            ConfigError,
            match=rf"leakage.controls.margin.{reading} = {margin} is more than half of "
            rf"leakage.materiality.{claim} = {1.5 * margin}",
        ):
            Resolved(bad).leakage_materiality()
    # claim 3's NTK threshold is in share points: no control's unit
    ok = copy.deepcopy(cfg)
    ok["leakage"]["materiality"]["claim3_ntk"] = 0.0001
    assert Resolved(ok).leakage_materiality()["claim3_ntk"] == 0.0001


def _per_model(cfg: dict, model: str, **entry) -> dict:
    """``cfg`` with ``leakage.per_model.<model>`` = ``entry``, validated (defaults filled)."""
    from snakemake.utils import validate

    from tests.wfutil import REPO

    out = copy.deepcopy(cfg)
    out["leakage"]["per_model"] = {model: entry}
    validate(out, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return out


def test_per_model_margins_and_thresholds_replace_the_sections_on_that_model_only():
    cfg = _per_model(
        CONFIG,
        "gemma3-270m",
        margin={"logit": 0.0005},
        materiality={"claim1_logit": 0.001, "claim2_component": 0.004},
    )
    res = Resolved(cfg)
    # the summary of the model's pairs reads its margins; the other model's the section's
    assert res.leakage_summary_params("gemma3-270m")["control_margin_logit"] == 0.0005
    assert res.leakage_summary_params("gemma3-270m")["control_margin_logattn"] == 0.001
    assert res.leakage_summary_params("smollm2-135m")["control_margin_logit"] == 0.001
    params = res.leakage_materiality()
    assert params["per_model"]["gemma3-270m"]["claim1_logit"] == 0.001
    assert params["per_model"]["gemma3-270m"]["claim3_order"] == 0.002  # the section's
    T = Materiality.from_params(params).apply(S.load_targets()["targets"])
    t = T["claim1_logit"]
    assert t["threshold"] == 0.002 and t["thresholds"] == {"gemma3-270m": 0.001}
    assert for_model(t, "gemma3-270m")["threshold"] == 0.001
    assert for_model(t, "smollm2-135m")["threshold"] == 0.002
    # a row comparing models reads the largest of their thresholds
    assert for_model(T["claim2_component"], "gemma3-270m", "smollm2-135m")["threshold"] == 0.004


def test_a_per_model_margin_above_half_that_models_smallest_threshold_is_refused():
    bad = _per_model(CONFIG, "gemma3-270m", materiality={"claim1_logit": 0.0015})
    with pytest.raises(
        ConfigError,
        match=r"leakage.controls.margin.logit = 0.001 is more than half of "
        r"leakage.per_model.gemma3-270m.materiality.claim1_logit = 0.0015 on model "
        r"'gemma3-270m'",
    ):
        Resolved(bad).leakage_materiality()
    bad = _per_model(CONFIG, "smollm2-135m", margin={"logattn": 0.0011})
    with pytest.raises(
        ConfigError,
        match=r"leakage.per_model.smollm2-135m.margin.logattn = 0.0011 is more than half of "
        r"leakage.materiality.claim2_component = 0.002",
    ):
        Resolved(bad).leakage_materiality()
    # a model no experiment runs is refused, naming the ones that are
    with pytest.raises(ConfigError, match=r"leakage.per_model names \['phi-4'\]"):
        Resolved(_per_model(CONFIG, "phi-4", margin={"logit": 0.0005})).leakage_materiality()
