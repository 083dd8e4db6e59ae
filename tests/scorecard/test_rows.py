"""Rows and targets (causalpos.scorecard.rows): every target holds its falsification condition,
the rows' sources are the tables the config makes, the labels the library's tables use."""

from __future__ import annotations

from pathlib import Path

import pytest

from causalpos import scorecard as S


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
