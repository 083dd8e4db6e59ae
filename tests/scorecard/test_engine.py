"""The declarative scorecard (causalpos.scorecard.engine): a target that names its table, rows,
estimate and interval columns and rule is judged by the engine; a row beside its partner."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

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


#: A target on a table without a model column (train_comparison: one row per variant).
VARIANTS = {
    **{k: TARGET[k] for k in ("paper", "label", "claim", "paper_value", "falsified_if")},
    "rule": "positive",
    "threshold": 0.0,
    "table": "train_comparison",
    "where": "trained-{variant}",
    "estimate": "d",
    "lo": "d_lo",
    "hi": "d_hi",
    "measured": "d {d:ci}",
    "not_run": "no table",
}
BY_VARIANT = pd.DataFrame(
    {
        "variant": ["nope", "rope", "nope-nan"],
        "d": [0.2, 0.2, float("nan")],
        "d_lo": [0.1, 0.1, float("nan")],
        "d_hi": [0.3, 0.3, float("nan")],
        "ratio": [4.0, float("nan"), 2.0],
    }
)


def test_a_table_without_a_model_column_is_judged_and_a_nan_estimate_kept_where_declared():
    assert "model" not in E.columns(VARIANTS).split()
    rows = E.declared_rows(BY_VARIANT, VARIANTS)
    assert [(r.target, r.verdict) for r in rows] == [
        ("effect (trained-nope)", V.REPRODUCED),
        ("effect (trained-rope)", V.REPRODUCED),
    ]
    rows = E.declared_rows(BY_VARIANT, VARIANTS | {"finite": False})
    assert (rows[2].target, rows[2].verdict) == ("effect (trained-nope-nan)", V.INCONCLUSIVE)
    assert rows[2].measured == "d nan [nan, nan]"


def test_measured_extra_is_appended_where_the_table_has_its_columns_and_a_finite_value():
    extra = VARIANTS | {"measured_extra": ["; ratio x{ratio}", "; no such {column}"]}
    rows = E.declared_rows(BY_VARIANT, extra)
    assert [r.measured for r in rows] == ["d 0.2 [0.1, 0.3]; ratio x4", "d 0.2 [0.1, 0.3]"]
    # the optional columns are not required: a table without them is still judged
    assert "ratio" not in E.columns(extra).split()


def test_judged_if_measures_the_rows_it_does_not_match_by_glob():
    t = VARIANTS | {"judged_if": {"variant": "*nope*"}, "measured_why": "a RoPE model"}
    rows = E.declared_rows(BY_VARIANT, t | {"finite": False})
    got = [(r.target, r.verdict, r.note) for r in rows]
    assert got == [
        ("effect (trained-nope)", V.REPRODUCED, ""),
        ("effect (trained-rope)", S.MEASURED, "a RoPE model"),
        ("effect (trained-nope-nan)", V.INCONCLUSIVE, ""),
    ]
    assert rows[1].paper_value == "n/a" and rows[1].falsified_if.startswith("none")


def test_a_select_glob_picks_its_rows_and_threshold_reads_each_models_own():
    """``select`` with ``*`` matches as a glob (beside exact values); ``{threshold}`` in a
    template reads the row's model's threshold, which the table need not have."""
    t = TARGET | {
        "select": {"variant": ["caus*", "bidirectional"]},
        "measured": "e {e:ci} (threshold {threshold:3})",
        "thresholds": {"straddles": 0.5},
    }
    assert "threshold" not in E.columns(t).split()
    rows = {r.target: r for r in E.declared_rows(TABLE, t)}
    assert "effect (bidirectional, d)" in rows  # the exact value still selects
    assert rows["effect (above, d)"].measured == "e 0.05 [0.03, 0.07] (threshold 0.01)"
    straddles = rows["effect (straddles, d)"]
    assert straddles.measured.endswith("(threshold 0.5)") and straddles.verdict == V.DIFFERS
    assert len(E.declared_rows(TABLE, TARGET | {"select": {"variant": "bi*"}})) == 1


def test_not_a_test_reads_measured_and_keeps_its_rules_verdict_in_the_note():
    t = VARIANTS | {"not_a_test": True, "note": "logit units"}
    rows = E.declared_rows(BY_VARIANT.assign(d_lo=[0.1, -0.1, 0.0]), t)
    assert [(r.verdict, r.note) for r in rows] == [
        (S.MEASURED, "logit units; its rule says reproduced"),
        (S.MEASURED, "logit units; its rule says inconclusive"),
    ]
    # a measurement keeps the target's paper value and falsified_if (why it cannot falsify)
    assert rows[0].paper_value == "> 0.01" and rows[0].falsified_if == "the CI lies at or below 0.0"


#: A target that reads a second table beside its own: each row's model's sink-head count.
JOINED = TARGET | {
    "join": {
        "table": "sink_heads",
        "match": ["model", "dataset"],
        "prefix": "sk_",
        "select": {"variant": "causal"},
    },
    "measured": "e {e:ci}; {sk_n_sink_heads} sink heads",
}
SINKS = pd.DataFrame(
    {
        "model": ["above", "above", "below", "twin"],
        "dataset": ["d", "d", "d", "e"],
        "variant": ["ring", "causal", "causal", "causal"],
        "n_sink_heads": [0, 7, 3, 9],
    }
)


def test_a_join_with_a_table_reads_each_rows_match_in_that_other_table():
    rows = E.declared_rows(TABLE, JOINED, TABLE, SINKS)
    by = {r.target: r for r in rows}
    assert by["effect (above, d)"].measured == "e 0.05 [0.03, 0.07]; 7 sink heads"  # causal
    assert by["effect (below, d)"].measured == "e 0 [-0.01, 0.005]; 3 sink heads"
    assert by["effect (above, d)"].verdict == V.REPRODUCED
    # its own table's columns are the unprefixed ones; the other's the prefixed, match, select
    assert set(E.columns(JOINED).split()) == {"model", "dataset", "e", "e_lo", "e_hi"} | {
        "variant",
        "nope",
        "window",
    }
    assert E.join_columns(JOINED).split() == ["dataset", "model", "n_sink_heads", "variant"]
    # a row without a match reads its missing template; an absent table: no row has one
    missing = JOINED | {"join": JOINED["join"] | {"missing": "no sink count of {model}"}}
    rows = {r.target: r for r in E.declared_rows(TABLE, missing, TABLE, SINKS)}
    assert (rows["effect (straddles, d)"].verdict, rows["effect (straddles, d)"].note) == (
        S.NOT_RUN,
        "no sink count of straddles",
    )
    absent = E.declared_rows(TABLE, missing, TABLE, None)
    assert {r.verdict for r in absent} == {S.NOT_RUN}
    assert [r.note for r in absent][:2] == ["no sink count of above", "no sink count of below"]


def test_a_declared_family_with_a_join_table_reads_that_table_as_an_input(tmp_path):
    from causalpos.scorecard.card import Declared

    spec = copy.deepcopy(S.load_targets())
    fig3 = spec["targets"]["fig3_nearby"]
    fig3["join"] = {"table": "llm_index", "match": ["model"], "prefix": "llm_"}
    fig3["measured"] = "{nearby:ci}; layer {llm_layer} index {llm_index}"
    T = S.load_targets(spec)["targets"]
    inputs = Declared("fig3_nearby").inputs_for(T)
    assert [(i.key, i.columns) for i in inputs[2:]] == [("llm_index", "index layer model")]
    nearby, index = tmp_path / "gram_nearby.csv", tmp_path / "llm_index.csv"
    pd.DataFrame(
        {"model": ["nope"], "panel": ["f"], "nearby": [0.4], "nearby_lo": [0.3]}
        | {"nearby_hi": [0.5], "n_samples": [8], "rope_identity": [True]}
    ).to_csv(nearby, index=False)
    pd.DataFrame({"model": ["nope"], "layer": [2], "index": [0.25]}).to_csv(index, index=False)
    card = S.build_scorecard({"gram_nearby": nearby, "llm_index": index}, targets=spec)
    row = card[card["target"].str.startswith("Fig. 3")].iloc[0]
    assert (row["measured"], row["verdict"]) == ("0.4 [0.3, 0.5]; layer 2 index 0.25", V.REPRODUCED)
    # the other table absent: the joined cells are empty and the row is still judged
    card = S.build_scorecard({"gram_nearby": nearby}, targets=spec)
    row = card[card["target"].str.startswith("Fig. 3")].iloc[0]
    assert row["verdict"] == V.REPRODUCED and row["measured"].endswith("index nan")


# --- a row beside its partner: required cells, a partner read with a prefix, column_text

#: A model minus its twin on llm_index: one row per (model, dataset), beside the twin's own share.
PARTNER_TARGET = {
    "paper": "paper 1",
    "label": "vs twin",
    "claim": "the model's share above its twin's",
    "paper_value": "> 0",
    "rule": "positive",
    "threshold": 0.0,
    "falsified_if": "the CI lies at or below {threshold}",
    "table": "llm_index",
    "required": ["twin"],
    "finite": False,
    "where": "{model} vs {twin}, {dataset}",
    "estimate": "d",
    "lo": "d_lo",
    "hi": "d_hi",
    "measured": "{d:ci}",
    "column_text": {"key0": ["; key 0 out", "; key 0 in"]},
    "partner": {"column": "twin", "prefix": "twin_", "measured": "; {s:ci} vs {twin_s:ci}"},
    "not_run": "no twins",
}


def _partner_row(model, twin, d, s, dataset="d"):
    return {"model": model, "dataset": dataset, "twin": twin, "d": d[0], "d_lo": d[1]} | {
        "d_hi": d[2],
        "s": s,
        "s_lo": s - 0.05,
        "s_hi": s + 0.05,
    }


NAN3 = (float("nan"),) * 3
PARTNER_TABLE = pd.DataFrame(
    [
        _partner_row("big", "big-random", (0.2, 0.1, 0.3), 0.4),
        _partner_row("big-random", None, NAN3, 0.2),
        _partner_row(
            "less", "less-random", (-0.2, -0.3, -0.1), 0.1
        ),  # its twin is not in the table
        _partner_row(
            "same", "big-random", (0.0, -0.1, 0.1), 0.2, dataset="other"
        ),  # no twin on "other"
        _partner_row("alone", "", NAN3, 0.3),  # an empty cell: no twin
    ]
)


def test_only_rows_with_the_required_cells_are_judged_each_beside_its_partner():
    rows = E.declared_rows(PARTNER_TABLE, PARTNER_TARGET)
    assert [(r.target, r.verdict) for r in rows] == [
        ("vs twin (big vs big-random, d)", V.REPRODUCED),
        ("vs twin (less vs less-random, d)", V.DIFFERS),
        ("vs twin (same vs big-random, other)", V.INCONCLUSIVE),
    ]
    # the partner's cells where it exists (same dataset), nothing where it does not
    assert rows[0].measured == "0.2 [0.1, 0.3]; key 0 in; 0.4 [0.35, 0.45] vs 0.2 [0.15, 0.25]"
    assert rows[1].measured == "-0.2 [-0.3, -0.1]; key 0 in"
    assert rows[2].measured == "0 [-0.1, 0.1]; key 0 in"
    # a partner on every dataset: the one its `on` columns share
    on_both = pd.concat(
        [PARTNER_TABLE, pd.DataFrame([_partner_row("big-random", None, NAN3, 0.9, "other")])]
    )
    rows = E.declared_rows(on_both.assign(key0=1.0), PARTNER_TARGET)
    assert rows[2].measured == "0 [-0.1, 0.1]; key 0 out; 0.2 [0.15, 0.25] vs 0.9 [0.85, 0.95]"
    # no row with the required cells: not run, with the reason
    (row,) = E.declared_rows(
        PARTNER_TABLE[PARTNER_TABLE["model"].isin(["big-random", "alone"])], PARTNER_TARGET
    )
    assert (row.verdict, row.note) == (S.NOT_RUN, "no twins")


def test_the_partner_columns_are_not_required_of_the_table_its_key_columns_are():
    cols = set(E.columns(PARTNER_TARGET).split())
    assert cols == {"model", "dataset", "twin", "d", "d_lo", "d_hi", "s", "s_lo", "s_hi"}
    assert E.partner_columns({}) == set()
    # the table's first partner row, its index kept
    out = E.with_partner(PARTNER_TABLE.iloc[:1], PARTNER_TABLE, PARTNER_TARGET)
    assert list(out.index) == [0] and out["twin_s"].iloc[0] == 0.2


def _partner_spec(**fields):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["llm_vs_random_share"] |= fields
    return spec


def test_a_malformed_partner_or_required_is_refused_at_load_naming_the_target():
    partner = S.load_targets()["targets"]["llm_vs_random_share"]["partner"]
    bad = {k: v for k, v in partner.items() if k != "prefix"}
    with pytest.raises(ValueError, match=r"'llm_vs_random_share' has partner .*column, prefix"):
        S.load_targets(_partner_spec(partner=bad))
    with pytest.raises(ValueError, match=r"'llm_vs_random_share' has required 'twin'; give a list"):
        S.load_targets(_partner_spec(required="twin"))
    with pytest.raises(ValueError, match=r"'llm_vs_random_share': column_text.key0 is"):
        S.load_targets(_partner_spec(column_text={"key0": [", key 0 out)"]}))
