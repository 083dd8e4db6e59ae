"""The declarative scorecard (causalpos.scorecard.engine): a target that names its table, rows,
estimate and interval columns and rule is judged by the engine."""

from __future__ import annotations

import copy

import pandas as pd

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.scorecard import engine as E

#: A declarative target on a synthetic table: an effect above a threshold of 0.01.
TARGET = {
    "paper": "paper 2",
    "label": "effect",
    "claim": "an effect above 0.01",
    "paper_value": "> 0.01",
    "rule": "positive",
    "threshold": 0.01,
    "falsified_if": "the CI lies at or below {threshold}",
    "table": "headline",
    "first": "window",
    "select": {"variant": "causal"},
    "estimate": "e",
    "lo": "e_lo",
    "hi": "e_hi",
    "measured": "e {e:ci} over {n:d} prompts",
    "twin": "init weights of {init_of}",
    "measured_if": {"nope": True},
    "measured_why": "a NoPE model",
    "not_run": "no table",
    "empty": "no causal run",
}


def _row(model, e, lo, hi, **kw):
    return {
        "model": model,
        "dataset": "d",
        "variant": "causal",
        "window": "all",
        "e": e,
        "e_lo": lo,
        "e_hi": hi,
        "n": 32.0,
        "init_of": "",
        "nope": False,
    } | kw


TABLE = pd.DataFrame(
    [
        _row("above", 0.05, 0.03, 0.07),  # lo > 0.01: reproduced
        _row("below", 0.0, -0.01, 0.005),  # hi <= 0.01: differs
        _row("straddles", 0.01, 0.0, 0.02),  # inconclusive
        _row("twin", 0.05, 0.03, 0.07, init_of="above"),  # a baseline: measured
        _row("nope", 0.05, 0.03, 0.07, nope=True),  # measured_if: measured
        _row("above", 0.05, 0.03, 0.07, window="w16"),  # not the first window
        _row("bidirectional", 0.05, 0.03, 0.07, variant="bidirectional"),  # not selected
        _row("nan", float("nan"), 0.03, 0.07),  # no estimate: no row
    ]
)


def test_the_rule_reaches_reproduced_differs_and_inconclusive_on_a_synthetic_table():
    rows = E.declared_rows(TABLE, TARGET)
    got = {r.target: r.verdict for r in rows}
    assert got == {
        "effect (above, d)": V.REPRODUCED,
        "effect (below, d)": V.DIFFERS,
        "effect (straddles, d)": V.INCONCLUSIVE,
        "effect (twin, d)": S.MEASURED,
        "effect (nope, d)": S.MEASURED,
    }
    by = {r.target: r for r in rows}
    assert by["effect (above, d)"].measured == "e 0.05 [0.03, 0.07] over 32 prompts"
    assert by["effect (above, d)"].falsified_if == "the CI lies at or below 0.01"
    assert by["effect (above, d)"].rule == ""  # the rule column only where declared
    assert by["effect (twin, d)"].note == "init weights of above"
    assert by["effect (nope, d)"].note == "a NoPE model"
    stated = E.declared_rows(TABLE, TARGET | {"rule_column": True})[0].rule
    assert stated.startswith("`positive` (threshold = 0.01): An effect larger than")


def test_the_rule_and_its_parameter_are_read_from_the_target():
    # the same table under "negative" (an effect below -threshold) turns the verdicts around
    rows = E.declared_rows(TABLE.assign(e=-TABLE["e"], e_lo=-TABLE["e_hi"], e_hi=-TABLE["e_lo"]),
                           TARGET | {"rule": "negative"})  # fmt: skip
    assert [r.verdict for r in rows[:3]] == [V.REPRODUCED, V.DIFFERS, V.INCONCLUSIVE]
    # a larger threshold makes the clear effect inconclusive
    assert E.declared_rows(TABLE, TARGET | {"threshold": 0.04})[0].verdict == V.INCONCLUSIVE
    # equivalence: a paper value and a margin
    equiv = TARGET | {"rule": "equivalent", "paper_value": 0.05, "margin": 0.035}
    assert [r.verdict for r in E.declared_rows(TABLE, equiv)[:3]] == [
        V.REPRODUCED,
        V.DIFFERS,
        V.INCONCLUSIVE,
    ]


def test_its_own_negative_control_reading_position_makes_a_reproduced_inconclusive():
    ctl = {"control_model_units": 0.02, "control_model_units_lo": 0.015}
    ctl |= {"control_model_units_hi": 0.025, "control_tost_lo": 0.016, "control_tost_hi": 0.024}
    reads = TABLE.assign(**ctl, control_margin=0.003)
    row = E.declared_rows(reads, TARGET | {"own_control": True})[0]
    assert row.verdict == V.INCONCLUSIVE and "reads position" in row.measured
    assert "its rule says reproduced" in row.note
    passes = reads.assign(control_tost_lo=-0.001, control_tost_hi=0.001)
    assert E.declared_rows(passes, TARGET | {"own_control": True})[0].verdict == V.REPRODUCED


def test_no_table_or_no_selected_row_reads_not_run_with_the_reason():
    (row,) = E.declared_rows(None, TARGET)
    assert (row.verdict, row.note) == (S.NOT_RUN, "no table")
    (row,) = E.declared_rows(TABLE[TABLE["variant"] != "causal"], TARGET)
    assert (row.verdict, row.note) == (S.NOT_RUN, "no causal run")


def test_the_columns_a_target_needs_are_its_declared_ones():
    cols = set(E.columns(TARGET).split())
    assert cols == {"model", "dataset", "e", "e_lo", "e_hi", "n", "variant", "nope", "window"}


def test_a_table_without_a_declared_column_gives_not_run_in_the_scorecard(tmp_path):
    spec = copy.deepcopy(S.load_targets())
    path = tmp_path / "gram_nearby.csv"
    pd.DataFrame(
        {"model": ["nope"], "panel": ["f"], "nearby": [0.4], "nearby_lo": [0.3]}
        | {"nearby_hi": [0.5], "n_samples": [8], "rope_identity": [True]}
    ).to_csv(path, index=False)
    card = S.build_scorecard({"gram_nearby": path}, targets=spec)
    row = card[card["target"].str.startswith("Fig. 3")].iloc[0]
    assert (row["target"], row["verdict"]) == ("Fig. 3 (f)/(i) (nope, panel f)", V.REPRODUCED)
    spec["targets"]["fig3_nearby"]["hi"] = "nearby_upper"  # a column the table lacks
    card = S.build_scorecard({"gram_nearby": path}, targets=spec)
    row = card[card["target"].str.startswith("Fig. 3")].iloc[0]
    assert row["verdict"] == S.NOT_RUN and "no Gram panels" in row["note"]
