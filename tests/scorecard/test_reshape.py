"""The reshapes a declarative target declares (causalpos.scorecard.reshape), alone and through
the engine (causalpos.scorecard.engine.declared_rows)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.scorecard import engine as E
from causalpos.scorecard import reshape as X


def _long(model, diff, half, init_of="", dataset="d"):
    """A baseline-comparison table's readings of one (model, dataset): saturated, linear and
    their difference, raw and corrected."""
    rows = []
    for b, est in (("saturated", 0.05), ("linear", 0.05 + diff), ("linear_minus_saturated", diff)):
        for m in ("raw", "corrected"):
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "variant": "causal",
                    "target": "logit",
                    "baseline": b,
                    "measure": m,
                    "estimate": est,
                    "lo": est - half,
                    "hi": est + half,
                    "init_of": init_of,
                }
            )
    return rows


WIDE = {"columns": ["baseline", "measure"], "values": ["estimate", "lo", "hi"]}


def test_widen_makes_one_row_per_model_and_dataset_with_each_readings_columns():
    long = pd.DataFrame(_long("b", 0.02, 0.01) + _long("a", -0.01, 0.005, dataset="e"))
    wide = X.widen(long, WIDE)
    assert list(wide["model"]) == ["b", "a"]  # first-seen order
    assert list(wide["dataset"]) == ["d", "e"]
    row = wide.iloc[0]
    assert row["linear_minus_saturated_raw"] == pytest.approx(0.02)
    assert row["linear_minus_saturated_raw_lo"] == pytest.approx(0.01)
    assert row["linear_raw_hi"] == pytest.approx(0.08)
    assert wide.iloc[1]["saturated_corrected_lo"] == pytest.approx(0.045)
    assert {"baseline", "measure", "estimate", "lo", "hi"}.isdisjoint(wide.columns)
    assert list(wide["variant"]) == ["causal", "causal"]  # the group's other cells kept
    by_model = X.widen(long, WIDE | {"by": ["model"]})
    assert len(by_model) == 2 and X.wide_columns(WIDE) == {
        "baseline",
        "measure",
        "estimate",
        "lo",
        "hi",
        "model",
        "dataset",
    }


def _claim6():
    return copy.deepcopy(S.load_targets()["targets"]["claim6_linear"])


def test_a_wide_target_judges_one_row_per_model_on_the_widened_columns():
    t = _claim6()
    long = pd.DataFrame(
        _long("up", 0.03, 0.01)
        + _long("down", -0.03, 0.01)
        + _long("wide", 0.0, 0.05)
        + _long("twin", 0.03, 0.01, init_of="up")
    )
    # another target's rows (logattn) are not selected before widening
    other = pd.DataFrame(_long("up", -0.5, 0.01)).assign(target="logattn")
    rows = E.declared_rows(pd.concat([long, other]), t)
    got = {r.target: r.verdict for r in rows}
    assert got == {
        "claim 6 (up, d)": V.REPRODUCED,
        "claim 6 (down, d)": V.DIFFERS,
        "claim 6 (wide, d)": V.INCONCLUSIVE,
        "claim 6 (twin, d)": S.MEASURED,
    }
    assert rows[0].measured == (
        "linear - saturated 0.03 [0.02, 0.04] (raw); saturated 0.05 [0.04, 0.06], linear "
        "0.08 [0.07, 0.09]; null-corrected difference 0.03 [0.02, 0.04]"
    )
    assert rows[3].note == "init weights of up: no learned offset profile for a baseline to underfit"
    # the columns the long table needs: not the widened names the templates read
    assert E.columns(t).split() == sorted(
        {"baseline", "measure", "estimate", "lo", "hi", "model", "dataset", "variant", "target"}
    )
    # finite: false: a NaN difference is judged (inconclusive), not dropped
    nan = long.assign(lo=np.where(long["model"] == "up", np.nan, long["lo"]))
    assert E.declared_rows(nan, t)[0].verdict == V.INCONCLUSIVE
    empty = E.declared_rows(long.assign(variant="bidirectional"), t)
    assert [(r.verdict, r.note) for r in empty] == [
        (S.NOT_RUN, "no logit leakage of a causal run")
    ]


@pytest.mark.parametrize(
    "wide, problem",
    [
        ({"columns": ["baseline"]}, "it lacks values"),
        ("baseline", "it is not a mapping"),
        (WIDE | {"pivot": ["x"]}, "pivot is no key of it"),
        (WIDE | {"columns": []}, r"columns must be \[column, ...\]"),
        (WIDE | {"by": "model"}, r"by must be \[column, ...\]"),
    ],
)
def test_a_malformed_wide_is_refused_at_load_naming_the_target(wide, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim6_linear"]["wide"] = wide
    with pytest.raises(ValueError, match=rf"target 'claim6_linear' has wide: .*{problem}; declare"):
        S.load_targets(spec)
