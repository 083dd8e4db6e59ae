"""The reshapes, premises and cell formats a declarative target declares
(causalpos.scorecard.reshape), alone and through the engine (causalpos.scorecard.engine)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.scorecard import engine as E
from causalpos.scorecard import paper2_kinds as K
from causalpos.scorecard import reshape as X
from tests.scorecard_tables import baseline_rows, probe_row


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


# --- premises and cell formats


def test_a_null_premise_matches_an_absent_nan_or_empty_cell_and_nothing_else():
    assert all(X.is_null(v) for v in (None, np.nan, "", "nan", float("inf")))
    assert not any(X.is_null(v) for v in (0, 0.0, "x", False))
    assert X.cell_matches(np.nan, None) and not X.cell_matches(0.0, None)
    assert X.cell_matches(1.0, 1) and not X.cell_matches(0.0, 1) and not X.cell_matches(np.nan, 1)
    assert X.cell_matches(1, True) and not X.cell_matches(np.nan, False)  # empty: neither
    assert X.cell_matches("trained-swa", "*swa") and not X.cell_matches("swa-x", "*swa")
    assert X.cell_matches("measured", "measured") and not X.cell_matches("skipped", "measured")


def test_the_first_matching_premise_decides_and_a_missing_column_reads_empty():
    t = {"premises": [{"if": {"a": None}, "why": "first"}, {"if": {"a": 1}, "why": "second"}]}
    assert X.premise(pd.Series({"b": 1}), t)["why"] == "first"
    assert X.premise(pd.Series({"a": np.nan}), t)["why"] == "first"
    assert X.premise(pd.Series({"a": 1.0}), t)["why"] == "second"
    assert X.premise(pd.Series({"a": 0.0}), t) is None


def test_format_specs_give_digits_texts_and_pythons_number_formats():
    r = pd.Series({"x": 0.123456, "x_lo": 0.1, "x_hi": 0.15, "note": np.nan, "n": 89.0})
    assert X.spec_text(r, "x", "ci2") == "0.12 [0.1, 0.15]"
    assert X.spec_text(r, "x", "2") == "0.12"
    assert X.spec_text(r, "n", "3") == "89"
    assert X.spec_text(r, "note", "text") == ""
    assert X.spec_text(pd.Series({"note": "why"}), "note", "text") == "why"
    assert X.spec_text(r, "x", ".2e") == "1.23e-01"
    assert X.spec_text(pd.Series({"k": "sliding512 minus global"}), "k", "word") == "sliding512"


def _probe(model, acc, lo, hi, null=0.2, fixed=0, **kw):
    return probe_row(model, acc, lo, hi, null=null, fixed=fixed, **kw)


def test_premises_decide_the_rows_they_match_and_the_rest_are_judged_on_the_shifted_interval():
    t = copy.deepcopy(S.load_targets()["targets"]["claim8_content"])
    table = pd.DataFrame(
        [
            _probe("null-level", 0.2, 0.18, 0.25),  # minus null: [-0.02, 0.05] <= 0.1
            _probe("decodes", 0.7, 0.52, 0.83),  # [0.32, 0.63] > 0.1: differs
            _probe("few", 0.2, 0.09, 0.37),  # [-0.11, 0.17]: inconclusive
            _probe("bos", 0.2, 0.09, 0.37, fixed=1),
            _probe("unsaid", 0.2, 0.09, 0.37, fixed=np.nan),
            _probe(
                "refused",
                np.nan,
                np.nan,
                np.nan,
                probe_note="1 label class",
                best_layer_accuracy=np.nan,
            ),
        ]
    )
    rows = {r.target.split("(")[1].split(",")[0]: r for r in E.declared_rows(table, t)}
    verdicts = {k: r.verdict for k, r in rows.items()}
    assert verdicts == {
        "null-level": V.REPRODUCED,
        "decodes": V.DIFFERS,
        "few": V.INCONCLUSIVE,
        "bos": S.NOT_APPLICABLE,
        "unsaid": S.NOT_RUN,
        "refused": S.NOT_RUN,
    }
    assert rows["decodes"].measured == (
        "sink-value probe 0.7 [0.52, 0.83] vs null mean 0.2 (p = 0.5, chance 0.2; 3 heads); "
        "position 0 best layer L2 0.3 (p = 0.2); token-0 embedding 0.3 (p = 0.2); "
        "32 prompts, 5 classes"
    )
    assert "by construction" in rows["bos"].note and rows["bos"].measured  # kept
    assert rows["unsaid"].note == "the table does not say whether token 0 is fixed"
    # a part whose cell is not finite is left out; a not-run row shows no measurement
    refused = rows["refused"]
    assert (refused.note, refused.measured) == (
        "no sink-value probe: 1 label class (3 sink heads)",
        "",
    )
    parts = E.measured_text(table.iloc[5], t)
    assert parts == "token-0 embedding 0.3 (p = 0.2); 32 prompts, 5 classes"


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"premises": [{"if": {"a": 1}, "verdict": "skipped", "why": "x"}]}, "has premise"),
        ({"premises": [{"if": {}, "verdict": "not run", "why": "x"}]}, "has premise"),
        ({"premises": {"if": {"a": 1}, "verdict": "not run", "why": "x"}}, "has premise"),
        ({"measured": ["a {x}", {"text": "b", "if": "x"}]}, "has measured part"),
    ],
)
def test_a_malformed_premise_or_measured_part_is_refused_at_load(fields, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim8_content"] |= fields
    with pytest.raises(ValueError, match=rf"target 'claim8_content' {problem}"):
        S.load_targets(spec)


def _head(variant, x, d=np.nan, model="m", window="all"):
    return {
        "model": model,
        "dataset": "d",
        "variant": variant,
        "window": window,
        "target": "logattn",
        "leakage": x,
        "leakage_lo": x - 0.01,
        "leakage_hi": x + 0.01,
        "local_minus_whole": d,
        "local_minus_whole_lo": d - 0.005,
        "local_minus_whole_hi": d + 0.005,
        "init_of": "",
    }


def test_measured_parts_join_with_measured_sep_and_a_joined_part_needs_its_match():
    t = copy.deepcopy(S.load_targets()["targets"]["additivity_ablation"])
    head = pd.DataFrame(
        [
            _head("bidirectional", 0.02),
            _head("bidirectional", 0.9, window="w16"),  # another window: not the match
            _head("layer_bidirectional", 0.05, 0.03),
            _head("layer_bidirectional", 0.04, 0.01, model="alone"),  # no whole-forward run
        ]
    )
    rows = E.declared_rows(head, t)
    assert [(r.target, r.verdict, r.measured) for r in rows] == [
        (
            "Eq. 5 additivity, layer-local vs whole-forward (m, d)",
            S.MEASURED,
            "layer-local - whole-forward 0.03 [0.025, 0.035]; layer-local 0.05 [0.04, 0.06], "
            "whole-forward 0.02 [0.01, 0.03] (window all)",
        ),
        (
            "Eq. 5 additivity, layer-local vs whole-forward (alone, d)",
            S.MEASURED,
            "layer-local - whole-forward 0.01 [0.005, 0.015]; layer-local 0.04 [0.03, 0.05] "
            "(window all)",
        ),
    ]
    assert rows[0].note == "a measurement: the paper assumes 0"
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["additivity_ablation"]["measured_sep"] = 0
    with pytest.raises(ValueError, match="target 'additivity_ablation' has measured_sep: 0"):
        S.load_targets(spec)


def test_a_reason_premise_decides_with_its_text_and_unless_spares_the_rows_it_matches():
    t = {
        "premises": [
            {"reason": "ring_missing", "verdict": S.NOT_RUN},
            {"if": {"free": "*"}, "unless": {"free": "measured"}, "verdict": "x", "why": "{free}"},
        ]
    }
    no_ring = pd.Series({"ring_run": "", "status": "not run: no 'ring' run", "free": "measured"})
    p = X.premise(no_ring, t)
    assert p["verdict"] == S.NOT_RUN and p["why_text"].startswith("no 'ring' run: the residual")
    assert X.premise(pd.Series({"ring_run": "rope+ring", "free": "measured"}), t) is None
    assert (
        X.premise(pd.Series({"ring_run": "rope+ring", "free": "by symmetry"}), t)["why"] == "{free}"
    )
    assert X.premise(pd.Series({"ring_run": "rope+ring", "free": np.nan}), t) is None
    assert X.matches(pd.Series({"k": "global"}), {"k": ["sliding", "global"]})


def _kind(model, kind, e, n=16, **kw):
    return {
        "model": model,
        "dataset": "d",
        "condition": "rope",
        "landmark": "modelled",
        "window": "all",
        "layer_kind": kind,
        "residual_stream": e,
        "residual_stream_lo": e - 0.004,
        "residual_stream_hi": e + 0.004,
        "total": 0.02,
        "total_lo": 0.01,
        "total_hi": 0.03,
        "n_layers": 3,
        "init_of": "",
        "n_sequences": n,
        "ring_run": "rope+ring",
        "mask_free_status": "measured",
    } | kw


def test_exclude_several_and_power_select_the_kinds_and_say_what_would_decide():
    t = copy.deepcopy(S.load_targets()["targets"]["claim2_kinds"]) | {"threshold": 0.002}
    table = pd.DataFrame(
        [
            _kind("gemma", "sliding512", 0.003),  # [-0.001, 0.007]: inconclusive
            _kind("gemma", "global", 0.01),  # reproduced
            _kind("gemma", "sliding512 minus global", -0.007),  # excluded: not a kind
            _kind("gemma", "global", 0.5, landmark="counted"),  # not selected
            _kind("smol", "global", 0.01),  # one kind only (its contrast excluded)
            _kind("smol", "global minus global", 0.0),
            _kind("ringless", "sliding512", 0.01, ring_run=""),
            _kind("ringless", "global", 0.01, mask_free_status="reads 0 by symmetry"),
        ]
    )
    rows = E.declared_rows(table, t)
    got = [(r.target, r.verdict) for r in rows]
    assert got == [
        ("claim 2 (per layer kind) (gemma, d, sliding512: 3 layers)", V.INCONCLUSIVE),
        ("claim 2 (per layer kind) (gemma, d, global: 3 layers)", V.REPRODUCED),
        ("claim 2 (per layer kind) (ringless, d, sliding512: 3 layers)", S.NOT_RUN),
        ("claim 2 (per layer kind) (ringless, d, global: 3 layers)", S.NOT_APPLICABLE),
    ]
    need = K.prompts_needed(0.003, -0.001, 0.007, 0.002, 16)
    assert rows[0].note.startswith(f"about {need} prompts would resolve it at 80 % power (16 here)")
    assert rows[1].note == "" and rows[3].note == "reads 0 by symmetry"
    assert "ring run's logits" in rows[2].note


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"premises": [{"reason": "no_reason", "verdict": "not run"}]}, "has premise"),
        ({"several": {"by": ["model"]}}, "has several: .*it lacks of"),
        ({"exclude": ["layer_kind"]}, "has exclude: .*set it to"),
        ({"keep": "* minus global"}, "has keep: .*set it to {column: value}"),
        ({"decided_note": "prompts"}, "has decided_note: 'prompts'; set it to a template"),
        ({"measured": [{"text": "{total}", "when": "total", "else": 1}]}, "has measured part"),
        ({"several": {"of": "layer_kind", "ignore": []}}, "has several: .*ignore must be"),
        ({"power": 1}, "has power: 1; set it to true or false"),
    ],
)
def test_a_malformed_reason_several_exclude_keep_or_power_is_refused_at_load(fields, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim2_kinds"] |= fields
    with pytest.raises(ValueError, match=rf"target 'claim2_kinds' {problem}"):
        S.load_targets(spec)


def test_a_table_without_a_required_column_says_so_apart_from_an_absent_table(tmp_path):
    from tests.scorecard_tables import _card, _one

    pr = pd.DataFrame([_probe("a", 0.2, 0.18, 0.25)])
    absent = _one(_card(tmp_path), "claim 8")
    assert (absent["verdict"], absent["note"]) == (
        S.NOT_RUN,
        "the config has no position-0 experiment",
    )
    # requires: token0_fixed (a premise's column) must be in the table
    old = _one(_card(tmp_path, position0_probes=pr.drop(columns="token0_fixed")), "claim 8")
    assert old["verdict"] == S.NOT_RUN and old["note"].startswith(
        "the probe table has no token0_fixed"
    )
    t = S.load_targets()["targets"]["claim8_content"]
    assert "token0_fixed" in E.columns(t).split()
    assert E.declared_rows(None, t, raw=pr)[0].note.startswith("the probe table has no")
    assert E.declared_rows(None, t)[0].note == "the config has no position-0 experiment"
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim8_content"]["requires"] = "token0_fixed"
    with pytest.raises(ValueError, match="target 'claim8_content' has requires: 'token0_fixed'"):
        S.load_targets(spec)


def test_a_reason_premises_unless_spares_its_rows_and_a_premise_states_its_own_falsified_if():
    t = copy.deepcopy(S.load_targets()["targets"]["claim1_logit"]) | {"threshold": 0.002}
    base = {"dataset": "d", "variant": "causal", "window": "all", "target": "logit"}
    leak = {"leakage": 0.01, "leakage_lo": 0.005, "leakage_hi": 0.015, "init_of": ""}
    head = pd.DataFrame(
        [
            base | leak | {"model": "nope", "positional": "nope"},
            base | leak | {"model": "open", "data_mode": "first"},
            base | leak | {"model": "twin", "data_mode": "first", "init_of": "open"},
            base
            | leak
            | {"model": "rope", "per_prompt": 0.2}
            | {"per_prompt_lo": 0.1, "per_prompt_hi": 0.3},
        ]
    )
    rows = {r.target: r for r in E.declared_rows(head, t)}
    nope = rows["claim 1 (nope, d)"]
    assert (nope.verdict, nope.measured) == (S.NOT_APPLICABLE, "0.01 [0.005, 0.015]")
    assert nope.falsified_if == (
        "none: not applicable (the claim's premise, a RoPE decoder, does not hold)"
    )
    assert nope.note.startswith("a NoPE model: the claim is about RoPE-trained decoders")
    opened = rows["claim 1 (open, d)"]
    assert opened.verdict == S.NOT_RUN and opened.note.startswith("the prompts are document")
    assert opened.falsified_if == "the CI of the model's logit leakage lies at or below 0.002"
    # unless: a twin is measured, whatever its prompts (the reason premise spares it)
    twin = rows["claim 1 (twin, d)"]
    assert (twin.verdict, twin.note) == (
        S.MEASURED,
        "init weights of open: a baseline, not a trained model",
    )
    # measured_judged: after the own control's text on a judged row, absent from the others
    assert rows["claim 1 (rope, d)"].measured == (
        "0.01 [0.005, 0.015]; no negative control of this model on these prompts; "
        "per-prompt reading 0.2 [0.1, 0.3]"
    )
    assert twin.measured == "0.01 [0.005, 0.015]"
    no_pp = E.declared_rows(head.drop(columns=["per_prompt"]), t)[-1]
    assert no_pp.measured.endswith("; no per-prompt reading")


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"measured_judged": "a {x}"}, "has measured_judged: 'a {x}'; set it to a list"),
        (
            {"premises": [{"reason": "openings", "verdict": "not run", "why": "x"}]},
            "has premise",
        ),
    ],
)
def test_a_malformed_measured_judged_or_reason_premise_is_refused_at_load(fields, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim1_logit"] |= fields
    with pytest.raises(ValueError, match=rf"target 'claim1_logit' {problem}"):
        S.load_targets(spec)
