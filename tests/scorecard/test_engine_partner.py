"""A declarative target's rows beside another row of their table (causalpos.scorecard.engine_partner):
``required`` cells, a ``partner`` row read with a prefix, text by whether a column exists."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.scorecard import engine as E
from causalpos.scorecard import engine_partner as P

#: A model minus its twin on llm_index: one row per (model, dataset), beside the twin's own share.
TARGET = {
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


def _row(model, twin, d, s, dataset="d"):
    return {"model": model, "dataset": dataset, "twin": twin, "d": d[0], "d_lo": d[1]} | {
        "d_hi": d[2],
        "s": s,
        "s_lo": s - 0.05,
        "s_hi": s + 0.05,
    }


NAN3 = (float("nan"),) * 3
TABLE = pd.DataFrame(
    [
        _row("big", "big-random", (0.2, 0.1, 0.3), 0.4),
        _row("big-random", None, NAN3, 0.2),
        _row("less", "less-random", (-0.2, -0.3, -0.1), 0.1),  # its twin is not in the table
        _row("same", "big-random", (0.0, -0.1, 0.1), 0.2, dataset="other"),  # no twin on "other"
        _row("alone", "", NAN3, 0.3),  # an empty cell: no twin
    ]
)


def test_only_rows_with_the_required_cells_are_judged_each_beside_its_partner():
    rows = E.declared_rows(TABLE, TARGET)
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
    on_both = pd.concat([TABLE, pd.DataFrame([_row("big-random", None, NAN3, 0.9, "other")])])
    rows = E.declared_rows(on_both.assign(key0=1.0), TARGET)
    assert rows[2].measured == "0 [-0.1, 0.1]; key 0 out; 0.2 [0.15, 0.25] vs 0.9 [0.85, 0.95]"
    # no row with the required cells: not run, with the reason
    (row,) = E.declared_rows(TABLE[TABLE["model"].isin(["big-random", "alone"])], TARGET)
    assert (row.verdict, row.note) == (S.NOT_RUN, "no twins")


def test_the_partner_columns_are_not_required_of_the_table_its_key_columns_are():
    cols = set(E.columns(TARGET).split())
    assert cols == {"model", "dataset", "twin", "d", "d_lo", "d_hi", "s", "s_lo", "s_hi"}
    assert P.partner_columns({}) == set()
    # the table's first partner row, its index kept
    out = P.with_partner(TABLE.iloc[:1], TABLE, TARGET)
    assert list(out.index) == [0] and out["twin_s"].iloc[0] == 0.2


def _spec(**fields):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["llm_vs_random_share"] |= fields
    return spec


def test_a_malformed_partner_or_required_is_refused_at_load_naming_the_target():
    partner = S.load_targets()["targets"]["llm_vs_random_share"]["partner"]
    bad = {k: v for k, v in partner.items() if k != "prefix"}
    with pytest.raises(ValueError, match=r"'llm_vs_random_share' has partner .*column, prefix"):
        S.load_targets(_spec(partner=bad))
    with pytest.raises(ValueError, match=r"'llm_vs_random_share' has required 'twin'; give a list"):
        S.load_targets(_spec(required="twin"))
    with pytest.raises(ValueError, match=r"'llm_vs_random_share': column_text.key0 is"):
        S.load_targets(_spec(column_text={"key0": [", key 0 out)"]}))
