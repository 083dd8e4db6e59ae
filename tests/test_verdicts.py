"""The verdict rules (causalpos.verdicts): each one reaches reproduced, differs and inconclusive
(controls: passed and failed; checks: holds and fails)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scorecard_tables import (
    D,
    I,
    R,
)

from causalpos import scorecard as S
from causalpos import verdicts as V


def test_equivalent():
    assert V.equivalent((0.80, 0.84), 0.82, 0.10) == R
    assert V.equivalent((0.30, 0.35), 0.82, 0.10) == D
    assert V.equivalent((0.93, 0.99), 0.82, 0.10) == D
    assert V.equivalent((0.50, 0.90), 0.82, 0.10) == I  # straddles the band's lower edge
    assert V.equivalent((-math.inf, math.inf), 0.82, 0.10) == I
    assert V.equivalent((math.nan, 0.8), 0.82, 0.10) == I


def test_positive():
    assert V.positive((0.02, 0.05), 0.01) == R
    assert V.positive((-0.01, 0.005), 0.01) == D
    assert V.positive((0.0, 0.05), 0.01) == I
    assert V.positive((0.001, 0.002)) == R and V.positive((-0.2, 0.0)) == D
    assert V.positive((0.001, math.nan)) == I


def test_exact():
    assert V.exact(0.15352, 0.154, 0.0005) == R
    assert V.exact(0.15082, 0.150, 0.0005) == D
    assert V.exact(0.1504, 0.150, 0.0005, err=0.0003) == I  # the value's error straddles the edge
    assert V.exact(math.nan, 0.0, 1e-10) == I


def test_fraction():
    assert V.fraction(10, 0, 10, 1.0) == R
    assert V.fraction(9, 0, 10, 1.0) == D
    assert V.fraction(9, 1, 10, 1.0) == I
    assert V.fraction(6, 3, 10, 0.5) == R and V.fraction(2, 2, 10, 0.5) == D
    assert V.fraction(0, 0, 0, 0.0) == I  # nothing counted decides nothing


def test_nearly_identical_and_difference_ci():
    d, lo, hi = V.difference_ci((0.5, 0.4, 0.6), (0.2, 0.1, 0.3))
    assert d == pytest.approx(0.3) and lo == pytest.approx(0.3 - math.hypot(0.1, 0.1))
    assert hi == pytest.approx(0.3 + math.hypot(0.1, 0.1))
    assert V.nearly_identical([(0.50, 0.48, 0.52), (0.52, 0.50, 0.54)], 0.10) == R
    assert V.nearly_identical([(0.80, 0.76, 0.84), (0.50, 0.45, 0.55)], 0.10) == D
    assert V.nearly_identical([(0.50, 0.30, 0.70), (0.55, 0.35, 0.75)], 0.10) == I
    # three conditions: one far pair is enough to differ
    assert V.nearly_identical([(0.5, 0.49, 0.51), (0.5, 0.49, 0.51), (0.9, 0.89, 0.91)], 0.1) == D
    assert V.nearly_identical([(0.5, 0.49, 0.51)], 0.10) == I
    # paired differences (a joint bootstrap) replace the independent-samples combination: wide
    # shares whose difference is known tightly are nearly identical, or clearly not
    wide = [(0.50, 0.30, 0.70), (0.52, 0.32, 0.72)]
    assert V.nearly_identical(wide, 0.10) == I
    assert V.nearly_identical(wide, 0.10, [(-0.02, -0.04, 0.0)]) == R
    assert V.nearly_identical(wide, 0.10, [(-0.2, -0.25, -0.15)]) == D
    assert V.nearly_identical(wide, 0.10, [(-0.1, -0.2, 0.0)]) == I


def test_increasing():
    assert V.increasing([(1, 2), (3, 4), (5, 6)]) == R
    assert V.increasing([(3, 4), (1, 2)]) == D
    assert V.increasing([(1, 3), (2, 4)]) == I
    assert V.increasing([(1, 2)]) == I


def test_beyond_control_reads_the_model_against_the_controls_upper_limit():
    # model (est, lo, hi) and the control's upper limit, both in the model's units
    assert V.beyond_control((0.0086, 0.0050, 0.0129), 0.0026) == R  # lo above the control's hi
    assert V.beyond_control((6.2e-4, 2.9e-4, 9.2e-4), 0.0026) == D  # hi at or below it
    assert V.beyond_control((0.0026, 0.0010, 0.0026), 0.0026) == D  # at: no larger than none
    assert V.beyond_control((0.003, 0.001, 0.005), 0.0026) == I  # the intervals overlap
    assert V.beyond_control((0.003, math.nan, 0.005), 0.0026) == I
    assert V.beyond_control((0.003, 0.001, 0.005), math.nan) == I
    # the rule is the threshold rule with the control's upper limit as the threshold
    for lo, hi, c in [(0.1, 0.2, 0.05), (0.0, 0.04, 0.05), (0.0, 0.2, 0.05)]:
        assert V.beyond_control((0.5 * (lo + hi), lo, hi), c) == V.positive((lo, hi), c)


def test_controls_and_checks_have_labels_of_their_own():
    assert {V.control(v) for v in V.TESTED} == set(V.CONTROL) == {"passed", "failed"}
    assert V.control(R) == V.PASSED and V.control(D) == V.control(I) == V.FAILED
    assert V.check(R) == V.HOLDS and V.check(D) == V.check(I) == V.FAILS
    assert not set(V.CONTROL + V.CHECK) & set(V.TESTED)
    assert V.covers((0.8, 1.2), 1.0) == R and V.covers((0.5, 0.9), 1.0) == D
    assert V.covers((math.nan, 1.2), 1.0) == I
    # a section refuses a verdict it does not allow
    card = pd.DataFrame(
        {"section": ["controls", "checks"], "target": ["a", "b"], "verdict": [R, V.HOLDS]}
    )
    with pytest.raises(ValueError, match="'a': section 'controls', verdict 'reproduced'"):
        S.check_sections(card)
    S.check_sections(card.assign(verdict=[V.PASSED, V.HOLDS]))


def test_all_of():
    assert V.all_of([R, R]) == R
    assert V.all_of([R, I, D]) == D
    assert V.all_of([R, I]) == I
    assert V.all_of([]) == I


def test_at_most():
    assert V.at_most((-0.05, 0.08), 0.10) == R
    assert V.at_most((0.15, 0.40), 0.10) == D
    assert V.at_most((-0.05, 0.25), 0.10) == I
    assert V.at_most((math.nan, 0.0), 0.10) == I


def test_dose_series_and_its_placeholder_margin_rule():
    """A positive control planted as a dose series: recovered only where dose 0 lies within the
    declared margin and every step's interval lies above 0; each outcome of the placeholder
    margin rule (passed / reads position / underpowered) on its own input."""
    m = 0.003
    assert V.within_margin_placeholder((-0.001, 0.002), m) == "passed"
    assert V.within_margin_placeholder((0.004, 0.006), m) == "reads position"
    assert V.within_margin_placeholder((-0.006, -0.003), m) == "reads position"
    assert V.within_margin_placeholder((-0.001, 0.004), m) == "underpowered"
    assert V.within_margin_placeholder((-0.001, math.nan), m) == "underpowered"
    assert V.within_margin_placeholder((-0.001, 0.002), 0.0) == "underpowered"
    rising = [(0.001, 0.002), (0.005, 0.008)]
    assert V.dose_series((-0.001, 0.002), rising, m) == V.RECOVERED
    assert V.dose_series((0.004, 0.006), rising, m) == V.NOT_RECOVERED  # dose 0 reads position
    assert V.dose_series((-0.001, 0.004), rising, m) == V.NOT_RECOVERED  # underpowered
    assert V.dose_series((-0.001, 0.002), [(0.001, 0.002), (0.0, 0.008)], m) == V.NOT_RECOVERED
    assert V.dose_series((-0.001, 0.002), [(math.nan, 0.002)], m) == V.NOT_RECOVERED
    assert V.dose_series((-0.001, 0.002), [], m) == V.NOT_RECOVERED
    assert not set(V.POSITIVE_CONTROL) & set(V.TESTED + V.CONTROL + V.CHECK)
    card = pd.DataFrame({"section": ["controls"], "target": ["a"], "verdict": [V.RECOVERED]})
    S.check_sections(card)
