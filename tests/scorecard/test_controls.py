"""The controls' verdicts (causalpos.scorecard.controls), decided from the numbers paper 2's tables
carry: each negative control against its declared margin, the per-prompt reading against its
tolerance, the planted effects against their truth; "not run" where the numbers are absent or the
prompts cannot control the reading."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causalpos import verdicts as V
from causalpos.scorecard import controls as C


def _controls(**kw) -> pd.DataFrame:
    row = {"model": "m", "dataset": "d", "variant": "identity_rope+bidirectional"}
    row |= {"target": "logit", "fixed_bos": 0, "planted": 0.1}
    row |= {"planted_estimate_lo": 0.08, "planted_estimate_hi": 0.12}
    row |= {"per_prompt_lo": 0.3, "per_prompt_hi": 0.5, "per_prompt_margin": 0.01}
    for lm, (lo, hi) in {"modelled": (-0.001, 0.001), "counted": (0.004, 0.006)}.items():
        row |= {f"negative_{lm}_tost_lo": lo, f"negative_{lm}_tost_hi": hi}
        row |= {f"negative_{lm}_margin": 0.003}
    return pd.DataFrame([row | kw])


def test_each_control_is_judged_by_its_rule_on_the_tables_numbers():
    (r,) = C.with_verdicts("controls", _controls()).to_dict("records")
    assert r["negative_modelled_control"] == r["negative_control"] == V.PASSED
    assert r["negative_counted_control"] == V.READS_POSITION  # 0.004 > margin 0.003
    assert r["per_prompt_control"] == V.READS_POSITION  # 0.3 > its tolerance 0.01
    assert r["positive_control"] == V.RECOVERED  # [0.08, 0.12] covers 0.1, excludes 0
    wide = C.with_verdicts("controls", _controls(negative_modelled_tost_hi=0.005))
    assert wide["negative_control"][0] == V.UNDERPOWERED
    missed = C.with_verdicts("controls", _controls(planted=0.2))
    assert missed["positive_control"][0] == V.NOT_RECOVERED


def test_absent_numbers_and_a_fixed_bos_read_not_run():
    fixed = C.with_verdicts("controls", _controls(fixed_bos=1))
    assert fixed["negative_counted_control"][0] == C.NOT_RUN  # a key-0 column of any run
    assert fixed["negative_modelled_control"][0] == V.PASSED
    given = C.with_verdicts("controls", _controls(), fixed_bos=True)
    assert given["negative_counted_control"][0] == C.NOT_RUN
    bare = _controls(planted=np.nan).drop(columns=["per_prompt_margin"])
    bare = bare.drop(columns=[c for c in bare if c.startswith("negative_modelled")])
    out = C.with_verdicts("controls", bare)
    assert out["negative_control"][0] == C.NOT_RUN  # no interval in the model's units
    assert out["per_prompt_control"][0] == C.NOT_RUN and out["positive_control"][0] == C.NOT_RUN
    assert C.negative_verdict(np.nan, 0.001, 0.003) == C.NOT_RUN


def test_the_plant_in_the_model_needs_its_exact_checks_too():
    planted = {"planted_model_variant": "identity_rope+plant_query+bidirectional"}
    planted |= {"planted_model_truth": 0.5, "planted_model_lo": 0.4, "planted_model_hi": 0.6}
    out = C.with_verdicts("controls", _controls(**planted, planted_model_check=1))
    assert out["planted_model_control"][0] == V.RECOVERED
    out = C.with_verdicts("controls", _controls(**planted, planted_model_check=0))
    assert out["planted_model_control"][0] == V.NOT_RECOVERED


def test_a_causal_runs_headline_row_reads_its_position_free_runs_control():
    head = pd.DataFrame(
        {
            "variant": ["causal", "causal", "bidirectional"],
            "control_variant": ["identity_rope+bidirectional"] * 2 + [np.nan],
            "control_tost_lo": [-0.001, 0.004, np.nan],
            "control_tost_hi": [0.001, 0.005, np.nan],
            "control_margin": [0.003, 0.003, np.nan],
        }
    )
    got = C.with_verdicts("headline", head)["control_verdict"].tolist()
    assert got == [V.PASSED, V.READS_POSITION, ""]


def test_text_cells_as_the_findings_page_reads_them_give_the_same_words():
    text = _controls().astype(str)
    assert C.with_verdicts("controls", text).equals(C.with_verdicts("controls", text).astype(str))
    (r,) = C.with_verdicts("controls", text).to_dict("records")
    assert (r["negative_control"], r["positive_control"]) == (V.PASSED, V.RECOVERED)
    assert C.with_verdicts("scorecard", text) is text  # a table without controls: as given
