"""Declarative targets judged over groups of rows (causalpos.scorecard.engine_groups): one row per
group (a model's layers), each item judged by one interval rule, the verdicts counted."""

from __future__ import annotations

import copy
import math

import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.scorecard import engine_groups as G

#: A grouped target on a synthetic llm_index: every layer from 2 on above a margin of 0.01.
TARGET = {
    "paper": "paper 1",
    "label": "contrast",
    "claim": "every later layer above the margin",
    "paper_value": "every layer but layer 1",
    "rule": "fraction",
    "threshold": 1.0,
    "margin": 0.01,
    "falsified_if": "some later layer's CI lies at or below {margin}",
    "table": "llm_index",
    "select": {"variant": "causal"},
    "order": "layer",
    "each": {"rule": "positive", "lo": "d_lo", "hi": "d_hi", "threshold": "margin"},
    "measured": "L1 {s:ci}; {n_yes} of {n_items} above, {n_undecided} undecided, {n_no} not; "
    "median {d:median}",
    "column_text": {"key0": ["; key 0 out", "; key 0 in"]},
    "no_items": "only one layer",
    "not_run": "no table",
    "empty": "no causal run",
}
TARGET["each"] = {**TARGET["each"], "skip_first": True}


def _run(model, diffs, variant="causal"):
    """One model's layers (given in reverse order): layer 1 has no difference, ``diffs`` the
    (estimate, lo, hi) of the layers from 2 on."""
    nan = (math.nan,) * 3
    rows = [nan, *diffs]
    return pd.DataFrame(
        {
            "model": model,
            "dataset": "d",
            "variant": variant,
            "layer": range(1, len(rows) + 1),
            "s": [0.1] * len(rows),
            "s_lo": 0.05,
            "s_hi": 0.15,
            "d": [r[0] for r in rows],
            "d_lo": [r[1] for r in rows],
            "d_hi": [r[2] for r in rows],
        }
    ).iloc[::-1]


UP, FLAT, WIDE = (0.2, 0.1, 0.3), (0.0, -0.01, 0.005), (0.01, 0.0, 0.03)
TABLE = pd.concat(
    [
        _run("good", [UP, UP, UP]),
        _run("flat", [UP, FLAT, UP]),  # one later layer at or below the margin
        _run("wide", [UP, WIDE]),  # one layer undecided
        _run("one", []),  # only layer 1: nothing to count
        _run("bidir", [FLAT], variant="bidirectional"),  # not selected
    ]
)


def test_each_group_is_one_row_whose_items_its_rule_counts():
    rows = G.grouped_rows(TABLE, TARGET)
    got = {r.target: r.verdict for r in rows}
    assert got == {
        "contrast (good, d)": V.REPRODUCED,
        "contrast (flat, d)": V.DIFFERS,
        "contrast (wide, d)": V.INCONCLUSIVE,
        "contrast (one, d)": V.INCONCLUSIVE,
    }
    by = {r.target: r for r in rows}
    # the cells are the group's first row in `order` (layer 1), the counts and median its items'
    assert by["contrast (flat, d)"].measured == (
        "L1 0.1 [0.05, 0.15]; 2 of 3 above, 0 undecided, 1 not; median 0.2; key 0 in"
    )
    assert "1 of 2 above, 1 undecided, 0 not; median 0.105" in by["contrast (wide, d)"].measured
    assert by["contrast (one, d)"].measured.endswith(
        "0 of 0 above, 0 undecided, 0 not; median nan; key 0 in"
    )
    assert by["contrast (one, d)"].note == "only one layer"
    assert by["contrast (good, d)"].note == ""
    assert by["contrast (good, d)"].falsified_if == "some later layer's CI lies at or below 0.01"
    with_key0 = G.grouped_rows(TABLE.assign(key0=1.0), TARGET)
    assert with_key0[0].measured.endswith("; key 0 out")


def test_the_items_rule_and_its_parameters_are_read_from_the_target():
    # a larger margin (the rule's parameter named by field) makes the clear layers undecided
    rows = G.grouped_rows(TABLE, TARGET | {"margin": 0.15})
    assert rows[0].verdict == V.INCONCLUSIVE and "0 of 3 above, 3 undecided" in rows[0].measured
    # a number as the parameter
    each = TARGET["each"] | {"threshold": 0.3}
    assert G.grouped_rows(TABLE, TARGET | {"each": each})[0].verdict == V.DIFFERS
    # "negative" on the negated intervals gives the same verdicts
    neg = TABLE.assign(d_lo=-TABLE["d_hi"], d_hi=-TABLE["d_lo"])
    each = TARGET["each"] | {"rule": "negative"}
    assert [r.verdict for r in G.grouped_rows(neg, TARGET | {"each": each})] == [
        r.verdict for r in G.grouped_rows(TABLE, TARGET)
    ]
    # a lower fraction reproduces the group with one layer at the margin
    assert G.grouped_rows(TABLE, TARGET | {"threshold": 0.6})[1].verdict == V.REPRODUCED
    # the items by value: layer 2 only (layer 1 too, without skip_first: its NaN is undecided)
    only2 = TARGET | {"each": {**TARGET["each"], "select": {"layer": [2]}}}
    assert [r.verdict for r in G.grouped_rows(TABLE, only2)[:3]] == [V.REPRODUCED] * 3
    with_l1 = TARGET | {"each": {k: v for k, v in TARGET["each"].items() if k != "skip_first"}}
    assert G.grouped_rows(TABLE, with_l1)[0].measured.startswith("L1 0.1 [0.05, 0.15]; 3 of 4")


def test_no_table_or_no_selected_row_reads_not_run_with_the_reason():
    (row,) = G.grouped_rows(None, TARGET)
    assert (row.verdict, row.note) == (S.NOT_RUN, "no table")
    (row,) = G.grouped_rows(TABLE[TABLE["variant"] != "causal"], TARGET)
    assert (row.verdict, row.note) == (S.NOT_RUN, "no causal run")


def test_the_columns_a_grouped_target_needs_are_its_declared_ones_not_its_counts():
    cols = set(G.group_columns(TARGET).split())
    assert cols == {
        "model",
        "dataset",
        "variant",
        "layer",
        "s",
        "s_lo",
        "s_hi",
        "d",
        "d_lo",
        "d_hi",
    }
    assert "key0" not in cols  # column_text's column is optional


def _spec(**fields):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["llm_layer1_share"] |= fields
    return spec


def test_a_malformed_grouped_target_is_refused_at_load_naming_the_target():
    assert "each" in S.load_targets()["targets"]["llm_layer1_share"]  # a grouped target
    spec = _spec()
    del spec["targets"]["llm_layer1_share"]["order"]
    with pytest.raises(ValueError, match=r"target 'llm_layer1_share'.*lacks order"):
        S.load_targets(spec)
    each = S.load_targets()["targets"]["llm_layer1_share"]["each"]
    with pytest.raises(ValueError, match=r"'llm_layer1_share'.*lacks each.hi"):
        S.load_targets(_spec(each={k: v for k, v in each.items() if k != "hi"}))
    with pytest.raises(ValueError, match=r"'llm_layer1_share'.*groups of rows has rule: fraction"):
        S.load_targets(_spec(rule="positive"))
    with pytest.raises(ValueError, match=r"'llm_layer1_share'.*each.rule one of positive"):
        S.load_targets(_spec(each=each | {"rule": "increasing"}))
    with pytest.raises(ValueError, match=r"'llm_layer1_share': each.rule positive needs threshold"):
        S.load_targets(_spec(each=each | {"threshold": "the_margin"}))
    with pytest.raises(ValueError, match=r"'llm_layer1_share' reads table 'llm'"):
        S.load_targets(_spec(table="llm"))
    with pytest.raises(ValueError, match=r"'llm_layer1_share': column_text.key0 is 'out'"):
        S.load_targets(_spec(column_text={"key0": "out"}))


#: The grouped target with its texts: each item's text, a tally about 0, optional pieces, the
#: note where items differ, and twins measured.
TEXTS = TARGET | {
    "each": {**TARGET["each"], "text": "L{layer:d} {d:ci}"},
    "tally": {"columns": ["d_lo", "d_hi"], "at": 0, "skip_first": True},
    "measured": "{keys}{each}; {tally_below} below 0, {tally_above} above, {tally_between} "
    "around of {tally_n}{extra}",
    "pieces": {"keys": "k{k:d}: ", "extra": "; first item L{first_item.layer:d} {first_item.s:ci}"},
    "differs_note": "at or below at layer(s) {differs}",
    "twin_column": "twin",
    "twin": "twin of {init_of}",
    "column_text": {},
}


def test_each_items_text_a_tally_and_pieces_where_their_columns_are():
    rows = {r.target: r for r in G.grouped_rows(TABLE, TEXTS)}
    flat = rows["contrast (flat, d)"]
    # no `k` column: no keys piece; FLAT's interval reaches both sides of 0
    assert flat.measured == (
        "L2 0.2 [0.1, 0.3]; L3 0 [-0.01, 0.005]; L4 0.2 [0.1, 0.3]; 0 below 0, 2 above, 1 around"
        " of 3; first item L2 0.1 [0.05, 0.15]"
    )
    assert flat.note == "at or below at layer(s) 3"
    one = rows["contrast (one, d)"]  # no item: no first-item piece
    assert one.measured == "; 0 below 0, 0 above, 0 around of 0" and one.note == "only one layer"
    keyed = G.grouped_rows(TABLE.assign(k=4), TEXTS)[0]
    assert keyed.measured.startswith("k4: L2 0.2 [0.1, 0.3]; L3")
    assert set(G.group_columns(TEXTS).split()) == {
        *("model", "dataset", "variant", "layer", "d", "d_lo", "d_hi"),
    }


def test_a_model_another_row_names_in_twin_column_is_measured_with_the_twin_note():
    table = pd.concat([TABLE.assign(twin=None), _run("good-random", [FLAT]).assign(twin=None)])
    table.loc[table["model"] == "good", "twin"] = "good-random"
    rows = {r.target: r for r in G.grouped_rows(table, TEXTS)}
    twin = rows["contrast (good-random, d)"]
    assert (twin.verdict, twin.note, twin.paper_value) == (S.MEASURED, "twin of good", "n/a")
    assert rows["contrast (good, d)"].verdict == V.REPRODUCED
    # without a twin column every group is judged
    assert G.grouped_rows(table.drop(columns="twin"), TEXTS)[-1].verdict == V.DIFFERS


def test_malformed_grouped_texts_are_refused_at_load_naming_the_target():
    with pytest.raises(ValueError, match=r"'llm_first_keys' has tally .*columns: \[lo, hi\]"):
        S.load_targets(_first_keys(tally={"columns": ["band_lo"], "at": 0}))
    with pytest.raises(ValueError, match=r"'llm_first_keys': pieces.keys is 'keys'"):
        S.load_targets(_first_keys(pieces={"keys": "keys"}))
    spec = _first_keys()
    del spec["targets"]["llm_first_keys"]["twin"]
    with pytest.raises(ValueError, match=r"'llm_first_keys' has twin_column 'twin' but no twin"):
        S.load_targets(spec)


def _first_keys(**fields):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["llm_first_keys"] |= fields
    return spec
