"""The ``claim3_factors`` table (causalpos.paper2.tables.factors): every cell a value of the
summary's factor block, the slope's change = slope × the sliding layers' span, each reading's
mapping named, and the table through paper2_tables."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos.paper2.summary import assemble as S
from causalpos.paper2.tables.assemble import paper2_tables
from causalpos.paper2.tables.factors import factors_frame
from tests.paper2_factor_runs import KINDS, SETTINGS, factor_runs


@pytest.fixture(scope="module")
def summary():
    # the stage adds each layer's kind from the stores (stages.leakage)
    return S.leakage_summary(factor_runs(0.4), SETTINGS).assign_coords(layer_kind=("layer", KINDS))


def test_the_table_copies_the_block(summary):
    df = factors_frame(summary)
    n_layers, n_levels = summary.sizes["layer"], summary.sizes["factor_level"]
    assert len(df) == 2 * 5 * 1 * (n_layers + n_levels + 1)
    r = df[(df.factor == "window") & (df.reading == "logit") & (df.level == "layer")]
    want = summary["factor_layer"].sel(factor="window", factor_reading="logit")
    np.testing.assert_array_equal(r["effect"], want.sel(window="all", stat="estimate"))
    np.testing.assert_array_equal(r["effect_hi"], want.sel(window="all", stat="hi"))
    assert r["layer_kind"].tolist() == ["sliding4"] * 4 + ["global"]
    s = df[(df.factor == "window") & (df.reading == "logit") & (df.level == "slope")].iloc[0]
    assert s.span == 3.0 and s.sliding_layers == "0 1 2 3"
    for c in ("", "_lo", "_hi"):
        assert s[f"change{c}"] == pytest.approx(3.0 * s[f"effect{c}"], rel=1e-12)
    assert s.intervention == "no_window" and s.ring_twin == "ring"
    assert s.effect_of.startswith("window kept minus removed")
    m = dict(zip(df.reading, df.mapping))
    assert m["mask_free"].startswith("ablation") and m["logit"].startswith("mechanism")
    assert bool(df["window_masks"].all()) and (df["n_sequences"] == 24).all()


def test_no_block_no_rows_and_the_table_through_paper2_tables(summary):
    assert factors_frame(summary.drop_vars(["factor_layer"])).empty
    tabs = paper2_tables({("m", "d"): summary})
    assert len(tabs["claim3_factors"]) == len(factors_frame(summary))
    assert tabs["claim3_factors"][["model", "dataset"]].drop_duplicates().values.tolist() == [
        ["m", "d"]
    ]
