"""claim 3's factor rows (causalpos.scorecard.paper2_factors): the window's slope over the sliding
layers and the global base's effect, from the ``claim3_factors`` table of synthetic summaries —
a planted effect reads reproduced, a null does not, the opposite sign differs; not applicable at
T ≤ W; "not run" naming the variants a factor needs."""

from __future__ import annotations

import pandas as pd
import pytest

from causalpos.paper2.summary import assemble as S
from causalpos.paper2.tables.factors import factors_frame
from causalpos.scorecard import paper2_factors as F
from causalpos.scorecard.materiality import Materiality
from causalpos.scorecard.rows import NOT_APPLICABLE, NOT_RUN, load_targets
from causalpos.verdicts import DIFFERS, INCONCLUSIVE, REPRODUCED
from tests.paper2_factor_runs import SETTINGS, factor_runs

T = Materiality().apply(dict(load_targets()["targets"]))


def frame(slope_size, base_scale=1.0, seed=5):
    df = factors_frame(S.leakage_summary(factor_runs(slope_size, seed, base_scale), SETTINGS))
    df.insert(0, "dataset", "d")
    df.insert(0, "model", "m")
    df["init_of"] = ""
    return df


def rows(df):
    return {r.target.split(" (")[0]: r for r in F.claim3_factor_rows(df, T)}


@pytest.fixture(scope="module")
def planted():
    return frame(0.4, base_scale=0.3)


def test_a_planted_slope_and_a_suppressing_base_are_reproduced(planted):
    got = rows(planted)
    w, b = got["claim 3, window"], got["claim 3, RoPE base"]
    assert w.verdict == REPRODUCED and b.verdict == REPRODUCED
    assert w.target == "claim 3, window (within one model) (m, d)"
    assert "slope" in w.measured and "change across them" in w.measured
    assert "mask-free route (ring twins) 0 [0, 0]" in b.measured
    assert "at or below 0.002" in w.falsified_if and "at or above -0.002" in b.falsified_if
    assert "mechanism mapping" in w.measured


def test_each_model_is_judged_against_its_own_threshold(planted):
    """A model's own claim3_order threshold (leakage.per_model) decides its factor rows: the
    planted slope, reproduced at the config's 0.002, differs against a threshold above its
    whole interval; another model keeps the config's."""
    own = Materiality.from_params({"per_model": {"m": {"claim3_order": 10.0}}})
    T_own = own.apply(dict(load_targets()["targets"]))
    both = pd.concat([planted, planted.assign(model="other")])
    got = {r.target: r for r in F.claim3_factor_rows(both, T_own)}
    m, other = (got[f"claim 3, window (within one model) ({k}, d)"] for k in ("m", "other"))
    assert m.verdict == DIFFERS and "at or below 10" in m.falsified_if
    assert "(threshold 10, mechanism mapping)" in m.measured
    assert other.verdict == REPRODUCED and "at or below 0.002" in other.falsified_if


def test_a_null_is_not_reproduced_and_the_opposite_sign_differs():
    null = rows(frame(0.0, base_scale=1.0, seed=7))
    # no slope planted: the window's change across depth reads no material increase
    assert null["claim 3, window"].verdict in (INCONCLUSIVE, DIFFERS)
    # base_scale 1 adds a query term on the sliding layers: the base raises the component
    assert null["claim 3, RoPE base"].verdict == DIFFERS


def test_the_verdict_flips_with_the_sign_of_the_planted_slope(planted):
    flipped = planted.copy()
    sel = flipped["factor"] == "window"
    for c in ("effect", "change"):
        lo, hi = flipped.loc[sel, f"{c}_lo"].copy(), flipped.loc[sel, f"{c}_hi"].copy()
        flipped.loc[sel, c] *= -1
        flipped.loc[sel, f"{c}_lo"], flipped.loc[sel, f"{c}_hi"] = -hi, -lo
    assert rows(flipped)["claim 3, window"].verdict == DIFFERS


def test_window_at_most_t_is_not_applicable_and_missing_factors_are_not_run(planted):
    wide = planted.assign(window_masks=False)
    assert rows(wide)["claim 3, window"].verdict == NOT_APPLICABLE
    only_window = planted[planted["factor"] == "window"]
    base = rows(only_window)["claim 3, RoPE base"]
    assert base.verdict == NOT_RUN and "global_base+ring" in base.note
    none = {r.target: r for r in F.claim3_factor_rows(None, T)}
    assert {r.verdict for r in none.values()} == {NOT_RUN}
    assert "no_window" in none["claim 3, window (within one model)"].note
    twin = rows(planted.assign(init_of="m0"))
    assert twin["claim 3, window"].verdict == "measured"


def test_negative_is_positive_of_the_negated_interval():
    assert F.negative((-0.01, -0.003), 0.002) == REPRODUCED
    assert F.negative((-0.001, 0.004), 0.002) == DIFFERS
    assert F.negative((-0.01, 0.0), 0.002) == INCONCLUSIVE
