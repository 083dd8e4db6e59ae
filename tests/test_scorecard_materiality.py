"""Paper 2's materiality thresholds (causalpos.scorecard.materiality): declared once per claim in
the config, the same default in the dataclass, the schema and config.yaml, each at least the
negative controls' margin on its reading, named by exactly one target, and what decides."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from settings_defaults import CONFIG, disagreements

from causalpos import scorecard as S
from causalpos.config import Resolved
from causalpos.config.common import ConfigError
from causalpos.config.leakage import MATERIALITY_READINGS
from causalpos.scorecard.materiality import Materiality


def test_each_default_is_written_once():
    assert disagreements(Materiality) == []
    keys = [f.metadata["config"] for f in dataclasses.fields(Materiality)]
    assert all(k.startswith("leakage.materiality.") for k in keys) and len(keys) == 5


def test_each_threshold_is_named_by_its_claims_targets_and_given_to_them():
    """Every threshold is used, and only by targets of its own claim (a claim's per-kind rows
    share the claim's threshold)."""
    T = S.load_targets()["targets"]
    named = {
        k: t["materiality"] for k, t in T.items() if isinstance(t, dict) and "materiality" in t
    }
    assert set(named.values()) == {f.name for f in dataclasses.fields(Materiality)}
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


def test_a_threshold_below_the_controls_margin_is_refused_before_any_job():
    from snakemake.utils import validate
    from wfutil import REPO

    cfg = copy.deepcopy(CONFIG)
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    got = Resolved(cfg).leakage_materiality()
    assert got == dataclasses.asdict(Materiality(**got))
    assert set(MATERIALITY_READINGS) == set(got)
    for claim, reading in MATERIALITY_READINGS.items():
        if reading is None:
            continue
        bad = copy.deepcopy(cfg)
        bad["leakage"]["materiality"][claim] = 0.5 * cfg["leakage"]["controls"]["margin"][reading]
        with pytest.raises(
            ConfigError,
            match=rf"leakage.materiality.{claim} = .* is below "
            rf"leakage.controls.margin.{reading}",
        ):
            Resolved(bad).leakage_materiality()
    # claim 3's NTK threshold is in share points: no control's unit
    ok = copy.deepcopy(cfg)
    ok["leakage"]["materiality"]["claim3_ntk"] = 0.0001
    assert Resolved(ok).leakage_materiality()["claim3_ntk"] == 0.0001
