"""claim 3's factor effects (paper2.summary.factors): each factor's intervention against the plain
run on the same prompts, in the plain run's one unit, per layer, per layer kind and as a slope
over the sliding layers; a planted slope is found, a null is not."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos.paper2.summary import assemble as S
from causalpos.paper2.summary import factors as F
from tests.paper2_factor_runs import SETTINGS, factor_runs


@pytest.fixture(scope="module")
def planted():
    return S.leakage_summary(factor_runs(0.4), SETTINGS)


@pytest.fixture(scope="module")
def null():
    return S.leakage_summary(factor_runs(0.0), SETTINGS)


def test_the_terms_of_each_reading():
    assert F._terms("window", "no_window", "ring", "mask_free") == {}  # the same ring twice
    assert F._terms("window", "no_window", "ring", "logit") == {
        ("no_window", "logit"): -1.0,
        ("causal", "logit"): 1.0,
    }
    assert F._terms("rope_base", "global_base", "global_base+ring", "indirect") == {
        ("global_base", "logit"): 1.0,
        ("causal", "logit"): -1.0,
        ("global_base+ring", "logit"): -1.0,
        ("ring", "logit"): 1.0,
    }
    assert F._terms("rope_base", "global_base", None, "mask_free") is None
    assert F.factor_runs(["causal", "no_window"]) == {"window": ("no_window", None)}
    assert F.factor_runs(["no_window", "ring"]) == {}


def test_slope_is_least_squares():
    x = np.array([0.0, 1.0, 2.0, 4.0])
    y = np.array([[1.0, 2.0, 2.5, 7.0], [3.0, 3.0, 3.0, 3.0]])
    np.testing.assert_allclose(F.slope(x, y), [np.polyfit(x, y[0], 1)[0], 0.0], atol=1e-12)
    assert np.isnan(F.slope(np.array([1.0]), np.array([2.0])))


def test_a_planted_slope_is_found_and_the_readings_add_up(planted):
    sel = dict(window="all")
    layer = planted["factor_layer"].sel(**sel)
    est = layer.sel(stat="estimate")
    # the window's effect on the logits grows with depth over the sliding layers
    w = est.sel(factor="window", factor_reading="logit").values
    assert w[0] == pytest.approx(0.0, abs=2e-3) and (np.diff(w[:4]) > 0).all()
    s = planted["factor_slope"].sel(factor="window", factor_reading="logit", **sel)
    want = np.polyfit(np.arange(4.0), w[:4], 1)[0]
    assert float(s.sel(stat="estimate")) == pytest.approx(want, rel=1e-9)
    assert float(s.sel(stat="lo")) > 0
    assert planted.attrs["factor_sliding_layers"] == [0, 1, 2, 3]
    assert planted.attrs["factor_window_masks"] == 1
    # a query term cancels in the softmax: no effect on log-attention, so direct = −logit
    for f in ("window", "rope_base"):
        e = est.sel(factor=f)
        np.testing.assert_allclose(
            e.sel(factor_reading="direct"),
            e.sel(factor_reading="total") - e.sel(factor_reading="logit"),
            rtol=1e-9,
            atol=1e-12,
        )
        assert (
            np.abs(e.sel(factor_reading="total")).max()
            < 0.1 * np.abs(e.sel(factor_reading="logit")).max()
        )
        # the logits' route: indirect + mask-free
        np.testing.assert_allclose(
            e.sel(factor_reading="logit"),
            e.sel(factor_reading="indirect") + e.sel(factor_reading="mask_free"),
            rtol=1e-9,
            atol=1e-12,
        )
    # the window's ring twin is the plain ring: its mask-free reading is exactly 0
    assert (layer.sel(factor="window", factor_reading="mask_free") == 0).all()
    # the global base adds a query term on the sliding layers only: positive there, 0 on global
    kind = planted["factor_kind"].sel(factor="rope_base", factor_reading="logit", **sel)
    assert float(kind.sel(factor_level="sliding4", stat="lo")) > 0
    assert abs(float(kind.sel(factor_level="global", stat="estimate"))) < 2e-3
    assert list(planted["factor_level"].values) == ["sliding4", "global", "all"]


def test_a_pooled_level_is_the_ratio_of_sums_in_the_plain_runs_unit(planted):
    """One layer's kind reads its layer's value; the denominator is the plain causal run's."""
    sel = dict(window="all", factor="window", factor_reading="logit")
    g = planted["factor_kind"].sel(factor_level="global", **sel)
    np.testing.assert_allclose(g, planted["factor_layer"].sel(layer=4, **sel), rtol=1e-12)


def test_a_null_reads_no_slope(null):
    s = null["factor_slope"].sel(factor="window", factor_reading="logit", window="all")
    lo, hi = float(s.sel(stat="lo")), float(s.sel(stat="hi"))
    assert lo < 0.002 and abs(float(s.sel(stat="estimate"))) < 0.002
    est = null["factor_layer"].sel(factor="window", factor_reading="logit", stat="estimate")
    assert np.abs(est.values).max() < 5e-3
    assert hi > lo


def test_no_factor_runs_no_block():
    runs = factor_runs(0.0)
    summ = S.leakage_summary({v: runs[v] for v in ("causal", "ring")}, SETTINGS)
    assert "factor_layer" not in summ
