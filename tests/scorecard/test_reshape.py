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
from tests.scorecard_tables import baseline_rows


def _long(model, diff, half, init_of="", dataset="d"):
    """A baseline-comparison table's readings of one (model, dataset)."""
    return baseline_rows(model, diff, half, init_of, dataset)


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
    assert (
        rows[3].note == "init weights of up: no learned offset profile for a baseline to underfit"
    )
    # the columns the long table needs: not the widened names the templates read
    assert E.columns(t).split() == sorted(
        {"baseline", "measure", "estimate", "lo", "hi", "model", "dataset", "variant", "target"}
    )
    # finite: false: a NaN difference is judged (inconclusive), not dropped
    nan = long.assign(lo=np.where(long["model"] == "up", np.nan, long["lo"]))
    assert E.declared_rows(nan, t)[0].verdict == V.INCONCLUSIVE
    empty = E.declared_rows(long.assign(variant="bidirectional"), t)
    assert [(r.verdict, r.note) for r in empty] == [(S.NOT_RUN, "no logit leakage of a causal run")]


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


def _sink(model, n, lo, hi, init_of="", tau=0.5, dataset="d", variant="causal"):
    return {
        "model": model,
        "dataset": dataset,
        "tau": tau,
        "variant": variant,
        "n_sink_heads": n,
        "n_sink_heads_lo": lo,
        "n_sink_heads_hi": hi,
        "n_heads": 100,
        "init_of": init_of,
    }


def test_join_reads_each_rows_first_match_beside_it_and_marks_the_rows_without_one():
    table = pd.DataFrame(
        [
            _sink("a", 12, 10, 14),
            _sink("a-random", 0, 0, 0, "a"),
            _sink("a-init", 3, 2, 4, "a"),  # a second match: the first one is read
            _sink("a-random", 9, 9, 9, "a", dataset="e"),  # another dataset
            _sink("b", 5, 4, 6),
        ]
    )
    table["init_of"] = table["init_of"].replace("", np.nan)  # as a csv reads it
    j = {"match": {"model": "init_of", "dataset": "dataset"}, "prefix": "twin_"}
    trained = table[table["init_of"].isna()]
    out = X.join(trained, table, j, {})
    assert list(out["model"]) == ["a", "b"]
    assert list(out["twin_model"].fillna("")) == ["a-random", ""]
    assert list(out[X.JOINED]) == [True, False]
    assert out["twin_n_sink_heads"].iloc[0] == 0 and np.isnan(out["twin_n_sink_heads"].iloc[1])
    # a list matches the same columns; select chooses the rows a match may be
    same = X.join(
        trained, table, {"match": ["dataset"], "prefix": "o_", "select": {"model": "b"}}, {}
    )
    assert list(out.columns[: len(trained.columns)]) == list(trained.columns)
    assert list(same["o_model"]) == ["b", "b"]


def test_difference_combines_the_two_cis_as_independent_samples():
    d = pd.DataFrame([{"a": 1.0, "a_lo": 0.7, "a_hi": 1.4, "b": 0.5, "b_lo": 0.1, "b_hi": 0.8}])
    out = X.difference(d, {"name": "a_minus_b", "of": "a", "minus": "b"})
    lo, hi = 0.5 - np.hypot(0.3, 0.3), 0.5 + np.hypot(0.4, 0.4)
    assert out[["a_minus_b", "a_minus_b_lo", "a_minus_b_hi"]].iloc[0].tolist() == pytest.approx(
        [0.5, lo, hi]
    )


def test_a_twin_difference_target_judges_trained_minus_twin_at_its_own_tau():
    t = copy.deepcopy(S.load_targets()["targets"]["sink_heads"])
    table = pd.DataFrame(
        [
            _sink("a", 12, 10, 14),
            _sink("a-random", 0, 0, 0, "a"),
            _sink("a", 1, 0, 2, tau=0.8),  # another tau: not the target's
            _sink("a-random", 50, 48, 52, "a", tau=0.8),  # nor its twin
            _sink("a", 40, 40, 40, variant="ring"),  # another run
            _sink("b", 0, 0, 0),
            _sink("b-random", 1, 0, 2, "b"),  # no more than the twin: differs
            _sink("lonely", 5, 4, 6),
        ]
    )
    rows = E.declared_rows(table, t)
    assert [(r.target, r.verdict) for r in rows] == [
        ("sink-reading heads (a, d, tau 0.5)", V.REPRODUCED),
        ("sink-reading heads (b, d, tau 0.5)", V.DIFFERS),
        ("sink-reading heads (lonely, d, tau 0.5)", S.NOT_RUN),
    ]
    assert rows[0].measured == "12 [10, 14] heads; a 12 [10, 14] of 100, a-random 0 [0, 0]"
    assert rows[2].note == "no random-init / init twin of lonely on d in the table"
    # the target's own tau selects: at tau 0.8 a's twin has more heads than a
    rows = E.declared_rows(table, t | {"tau": 0.8})
    assert [(r.target, r.verdict) for r in rows] == [
        ("sink-reading heads (a, d, tau 0.8)", V.DIFFERS)
    ]
    # the columns the table needs are the unprefixed, undifferenced ones
    assert E.columns(t).split() == sorted(
        {"dataset", "init_of", "model", "n_heads", "n_sink_heads", "n_sink_heads_lo"}
        | {"n_sink_heads_hi", "tau", "variant"}
    )
    only_twins = table[table["init_of"] != ""]
    assert [r.note for r in E.declared_rows(only_twins, t)] == ["no causal run of a trained model"]


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"join": {"prefix": "twin_"}}, "has join: .*it lacks match; declare join"),
        ({"join": {"match": {"model": 3}, "prefix": "t_"}}, "has join: .*: match must be"),
        ({"difference": {"name": "d", "of": "x"}}, "has difference: .*it lacks minus"),
        ({"trained_only": "yes"}, "has trained_only: 'yes'; set it to true or false"),
        (
            {"select": {"tau": "{tau2}"}},
            "selects tau: '{tau2}', but the target has no field 'tau2'",
        ),
    ],
)
def test_a_malformed_join_difference_or_own_field_is_refused_at_load(fields, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["sink_heads"] |= fields
    with pytest.raises(ValueError, match=rf"target 'sink_heads' {problem}"):
        S.load_targets(spec)


def test_a_point_difference_shifts_the_interval_by_a_number_without_one():
    d = pd.DataFrame([{"acc": 0.5, "acc_lo": 0.4, "acc_hi": 0.7, "null": 0.2}])
    out = X.difference(d, {"name": "gain", "of": "acc", "minus": "null", "point": True})
    assert out[["gain", "gain_lo", "gain_hi"]].iloc[0].tolist() == pytest.approx([0.3, 0.2, 0.5])
    t = {"difference": {"name": "gain", "of": "acc", "minus": "null", "point": True}}
    assert X.raw_columns(t, {"gain", "gain_lo", "gain_hi", "model"}) == {
        "acc",
        "acc_lo",
        "acc_hi",
        "null",
        "model",
    }


def _layers(model, stds, fixed=1.0, condition="causal", dev=True):
    rows = [
        {"model": model, "dataset": "d", "condition": condition, "layer": i, "std": s}
        | ({"max_abs_dev": 10 * s} if dev else {})
        | ({"token0_fixed": fixed} if fixed is not None else {})
        for i, s in enumerate(stds)
    ]
    return rows


def test_reduce_aggregates_each_group_and_leaves_out_the_columns_the_table_lacks():
    table = pd.DataFrame(_layers("a", [0.0, 3e-4, 1e-5]) + _layers("b", [0.0, 0.0], fixed=np.nan))
    table.loc[3, "token0_fixed"] = 0.0  # b's first non-empty cell
    out = X.reduce(
        table, {"by": ["model", "dataset"], "max": ["std", "absent"], "first": ["token0_fixed"]}
    )
    assert list(out.columns) == ["model", "dataset", "std", "token0_fixed"]
    assert out["std"].tolist() == [3e-4, 0.0] and out["token0_fixed"].tolist() == [1.0, 0.0]


def test_several_counts_the_rows_ignore_spares_and_keep_then_keeps_the_matching_rows():
    kinds = {
        "gemma": ["sliding512", "global", "sliding512 minus global"],
        "swa": ["sliding32", "sliding32 minus global"],  # one kind and its contrast
        "smol": ["global"],
    }
    table = pd.DataFrame(
        [{"model": m, "dataset": "d", "layer_kind": k} for m, ks in kinds.items() for k in ks]
    )
    contrast = {"layer_kind": "* minus global"}
    counted = X.several(table, {"of": "layer_kind", "ignore": contrast})
    assert counted["model"].unique().tolist() == ["gemma"]
    # without ignore the contrast row counts as a kind: swa would read as two
    assert X.several(table, {"of": "layer_kind"})["model"].unique().tolist() == ["gemma", "swa"]
    t = {"several": {"of": "layer_kind", "ignore": contrast}, "keep": contrast}
    out = X.reshaped(table, t, E.select_rows)
    assert out[["model", "layer_kind"]].values.tolist() == [["gemma", "sliding512 minus global"]]


def test_a_point_rule_check_target_holds_or_fails_and_its_premises_decide_the_rest():
    t = copy.deepcopy(S.load_targets()["targets"]["claim7_position0"])
    table = pd.DataFrame(
        _layers("fixed", [0.0, 0.0, 1e-6])
        + _layers("leaky", [0.0, 0.3])
        + _layers("leaky", [9.0], condition="bos_replace_mean")  # another run: not read
        + _layers("varies", [0.3, 0.2], fixed=0.0)
    )
    rows = {r.target: r for r in E.declared_rows(table, t)}
    fixed, leaky, varies = (rows[f"claim 7 ({m}, d)"] for m in ("fixed", "leaky", "varies"))
    assert (fixed.verdict, fixed.section) == (V.HOLDS, "checks")  # 1e-6 <= 5e-5
    assert (leaky.verdict, leaky.section) == (V.FAILS, "checks")
    assert leaky.measured == "max std over layers 3.00e-01; max |deviation| 3.00e+00"
    assert (varies.verdict, varies.section) == (S.NOT_APPLICABLE, "paper 2")
    assert E.columns(t).split() == ["condition", "dataset", "model", "std"]
    old = pd.DataFrame(_layers("old", [0.0], fixed=None, dev=False))
    (row,) = E.declared_rows(old, t)
    assert (row.verdict, row.measured) == (S.NOT_RUN, "max std over layers 0.00e+00")
    assert "token0_fixed" in row.note


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"reduce": {"max": ["std"]}}, "has reduce: .*it lacks by"),
        ({"reduce": {"by": ["model"], "median": ["std"]}}, "has reduce: .*median is no key of it"),
        ({"check": "yes"}, "has check: 'yes'; set it to true or false"),
    ],
)
def test_a_malformed_reduce_or_check_is_refused_at_load(fields, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim7_position0"] |= fields
    with pytest.raises(ValueError, match=rf"target 'claim7_position0' {problem}"):
        S.load_targets(spec)


def test_a_point_rule_needs_its_parameters_and_no_interval():
    spec = copy.deepcopy(S.load_targets())
    assert not {"lo", "hi"} & set(spec["targets"]["claim7_position0"])  # loads without them
    del spec["targets"]["claim7_position0"]["value"]
    with pytest.raises(ValueError, match="target 'claim7_position0': rule exact needs value"):
        S.load_targets(spec)


def test_a_join_naming_no_scorecard_input_is_refused_at_load_naming_the_target():
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["sink_heads"]["join"] = spec["targets"]["sink_heads"]["join"] | {
        "table": "sinks"
    }
    with pytest.raises(ValueError, match=r"target 'sink_heads' has join: .*table must be a score"):
        S.load_targets(spec)
    spec["targets"]["sink_heads"]["join"]["table"] = "position0"  # a scorecard input: loads
    assert S.load_targets(spec)["targets"]["sink_heads"]["join"]["table"] == "position0"
