"""The verdict rules (causalpos.verdicts): each one reaches reproduced, differs and inconclusive
(negative controls: passed, reads position and underpowered; positive controls: recovered and
not recovered; checks: holds and fails); an interval of width 0 or with lo > hi decides no test
or control."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from causalpos import inference
from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.paper1.diagonal import index_ci
from tests.scorecard_tables import D, I, R


def test_equivalent():
    assert V.equivalent((0.80, 0.84), 0.82, 0.10) == R
    assert V.equivalent((0.30, 0.35), 0.82, 0.10) == D
    assert V.equivalent((0.93, 0.99), 0.82, 0.10) == D
    assert V.equivalent((0.50, 0.90), 0.82, 0.10) == I  # straddles the band's lower edge
    assert V.equivalent((-math.inf, math.inf), 0.82, 0.10) == I
    assert V.equivalent((math.nan, 0.8), 0.82, 0.10) == I


def test_within_range():
    """The paper's range 0.64–0.82 ± 0.10, i.e. [0.54, 0.92], for a model the paper did not run:
    the overlay's SmolLM2 (0.87–0.93) straddles its upper edge, Gemma (0.93–0.99) lies above it."""
    assert V.within_range((0.80, 0.84), 0.64, 0.82, 0.10) == R
    assert V.within_range((0.55, 0.91), 0.64, 0.82, 0.10) == R  # wider than either paper value's
    assert (
        V.equivalent((0.55, 0.91), 0.82, 0.10) == I and V.equivalent((0.55, 0.91), 0.64, 0.1) == I
    )
    assert V.within_range((0.87, 0.93), 0.64, 0.82, 0.10) == I
    assert V.within_range((0.93, 0.99), 0.64, 0.82, 0.10) == D
    assert V.within_range((0.30, 0.50), 0.64, 0.82, 0.10) == D
    assert V.within_range((0.50, 0.60), 0.64, 0.82, 0.10) == I
    assert V.within_range((0.80, 0.84), 0.82, 0.82, 0.10) == V.equivalent((0.80, 0.84), 0.82, 0.1)
    assert V.within_range((0.7, 0.7), 0.64, 0.82, 0.10) == I  # width 0 decides nothing
    assert V.within_range((0.7, 0.8), 0.82, 0.64, 0.10) == I  # an empty range
    assert V.within_range((math.nan, 0.8), 0.64, 0.82, 0.10) == I


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


def test_negative_control_two_one_sided_tests_reach_each_outcome():
    m = 0.002
    # the (1 - 2 alpha) interval inside (-m, m): both one-sided tests reject |effect| >= m
    assert V.negative_control((-0.0012, 0.0018), m) == V.PASSED
    # wholly beyond +-m: the estimator reads an effect where there is none
    assert V.negative_control((0.0025, 0.004), m) == V.READS_POSITION
    assert V.negative_control((-0.006, -0.003), m) == V.READS_POSITION
    # neither: too wide to tell (trained-rope's logit control in the model's units, 95 %)
    assert V.negative_control((-0.00135, 0.00042), 0.0003) == V.UNDERPOWERED
    assert V.negative_control((-0.003, 0.003), m) == V.UNDERPOWERED
    # an interval wholly below 0 but inside the band is equivalent to 0: it passes, and is no
    # threshold of anything (trained-ntk's, 95 %: -0.00141 .. -0.00009)
    assert V.negative_control((-0.00141, -0.00009), m) == V.PASSED
    # the edges belong to neither side; a bound that is not finite decides nothing
    assert V.negative_control((-0.001, m), m) == V.UNDERPOWERED
    assert V.negative_control((m, 0.01), m) == V.UNDERPOWERED
    assert V.negative_control((math.nan, 0.001), m) == V.UNDERPOWERED
    # the margin is a declared setting: none, or <= 0, is an error rather than a verdict
    for bad in (0.0, -0.001, math.nan, None):
        with pytest.raises(ValueError, match="margin must be a number > 0"):
            V.negative_control((-0.001, 0.001), bad)


def test_negative_control_is_not_a_function_of_the_models_estimate():
    """The same control interval gets the same verdict whatever the model reads: the old rule
    (upper limit below half the model's estimate) passed 0.1 against a model of 0.5 and failed
    0.0004 against a model of 0.0006; the margin decides both."""
    assert V.negative_control((0.08, 0.12), 0.002) == V.READS_POSITION
    assert V.negative_control((-0.0002, 0.0004), 0.002) == V.PASSED


def test_recovered_and_its_two_outcomes():
    assert V.recovered((0.09, 0.13), 0.1) == V.RECOVERED
    assert V.recovered((0.12, 0.2), 0.1) == V.NOT_RECOVERED  # misses the planted size
    # covers the truth but reaches 0: cannot tell the plant from none (paper2_controls.csv
    # said "recovered" where the scorecard said "failed" for 0.108 [-0.009, 0.217])
    assert V.recovered((-0.009, 0.217), 0.1) == V.NOT_RECOVERED
    assert V.recovered((0.05, math.nan), 0.1) == V.NOT_RECOVERED
    # dose 0 of a dose series: recovered where the interval covers 0
    assert V.recovered((-0.01, 0.02), 0.0) == V.RECOVERED
    assert V.recovered((0.01, 0.02), 0.0) == V.NOT_RECOVERED


def test_a_test_whose_own_control_reads_position_is_not_reproduced():
    assert V.unless_control_reads(R, V.READS_POSITION) == I
    for c in (V.PASSED, V.UNDERPOWERED, ""):
        assert V.unless_control_reads(R, c) == R
    assert V.unless_control_reads(D, V.READS_POSITION) == D
    assert V.unless_control_reads(I, V.READS_POSITION) == I


def test_controls_and_checks_have_labels_of_their_own():
    assert set(V.CONTROL) == {
        "passed",
        "reads position",
        "underpowered",
        "recovered",
        "not recovered",
    }
    assert V.check(R) == V.HOLDS and V.check(D) == V.check(I) == V.FAILS
    assert not set(V.CONTROL + V.CHECK) & set(V.TESTED)
    assert len(set(V.CONTROL + V.CHECK + V.TESTED)) == len(V.CONTROL + V.CHECK + V.TESTED)
    assert V.covers((0.8, 1.2), 1.0) == R and V.covers((0.5, 0.9), 1.0) == D
    assert V.covers((math.nan, 1.2), 1.0) == I
    # a section refuses a verdict it does not allow
    card = pd.DataFrame(
        {"section": ["controls", "checks"], "target": ["a", "b"], "verdict": [R, V.HOLDS]}
    )
    with pytest.raises(ValueError, match="'a': section 'controls', verdict 'reproduced'"):
        S.check_sections(card)
    for v in V.CONTROL:
        S.check_sections(card.assign(verdict=[v, V.HOLDS]))
    with pytest.raises(ValueError, match="verdict 'failed'"):
        S.check_sections(card.assign(verdict=["failed", V.HOLDS]))


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


def test_dose_series():
    """A positive control planted as a dose series: recovered only where dose 0 passes the
    controls' two one-sided tests within the declared margin and every step's interval lies
    above 0."""
    m = 0.003
    rising = [(0.001, 0.002), (0.005, 0.008)]
    assert V.dose_series((-0.001, 0.002), rising, m) == V.RECOVERED
    assert V.dose_series((0.004, 0.006), rising, m) == V.NOT_RECOVERED  # dose 0 reads position
    assert V.dose_series((-0.001, 0.004), rising, m) == V.NOT_RECOVERED  # underpowered
    assert V.dose_series((-0.001, 0.002), [(0.001, 0.002), (0.0, 0.008)], m) == V.NOT_RECOVERED
    assert V.dose_series((-0.001, 0.002), [(math.nan, 0.002)], m) == V.NOT_RECOVERED
    assert V.dose_series((-0.001, 0.002), [], m) == V.NOT_RECOVERED
    assert set(V.POSITIVE_CONTROL) <= set(V.CONTROL) and not set(V.CONTROL) & set(V.TESTED)
    card = pd.DataFrame({"section": ["controls"], "target": ["a"], "verdict": [V.RECOVERED]})
    S.check_sections(card)


#: "0.759 [0.759, 0.759]": the upper bound one ulp below the estimate (a sample of copies of one
#: prompt: the estimate and its replicates are one number, summed in different orders).
E = 0.759
ULP_BELOW = (E, float(np.nextafter(E, 0.0)))


def test_an_interval_of_width_0_or_inverted_decides_no_test_or_control():
    zero, flat0 = (E, E), (0.0, 0.0)
    assert not V.decides(zero) and not V.decides(flat0) and not V.decides(ULP_BELOW)
    assert not V.decides((0.5, 0.4)) and not V.decides((math.nan, 1.0))
    assert V.decides((E, E + 1e-4)) and not V.decides((E, E + 1e-6)) and V.decides((-1e-30, 1e-30))
    for ci in (zero, ULP_BELOW):
        # each of these read reproduced (or passed / recovered) before: a confident verdict on
        # an interval that measured no uncertainty
        assert V.equivalent(ci, 0.76, 0.05) == I
        assert V.positive(ci, 0.5) == I and V.positive(ci, 0.9) == I
        assert V.at_most(ci, 0.9) == I and V.at_most(ci, 0.5) == I
        assert V.increasing([(0.1, 0.2), ci]) == I
        assert V.nearly_identical([(E, *ci), (0.5, 0.4, 0.6)], 0.1, [(E, *ci)]) == I
        assert V.negative_control((ci[0] - E, ci[1] - E), 0.01) == V.UNDERPOWERED
        assert V.recovered(ci, E) == V.NOT_RECOVERED
        assert V.dose_series((-0.001, 0.001), [(0.1, 0.2), ci], 0.01) == V.NOT_RECOVERED
    # genuinely inverted: beyond rounding
    assert V.equivalent((0.80, 0.70), 0.76, 0.1) == I and V.covers((1.2, 0.8), 1.0) == I
    # checks of values computed exactly decide at width 0
    assert V.exact(E, 0.76, 0.01) == R and V.exact(E, 0.80, 0.01) == D
    assert V.covers((1.0, 1.0), 1.0) == R and V.covers((0.9, 0.9), 1.0) == D


def test_a_sample_of_copies_of_one_prompt_reads_inconclusive():
    """n identical prompts through the package's own intervals (paper 2's bootstrap of a
    per-prompt mean, paper 1's noise-corrected index over groups): intervals of width 0 within
    rounding, which the rules read as undecided where they read reproduced or differs before."""
    rng = np.random.default_rng(0)
    x = np.tile(rng.normal(size=(1, 6)), (37, 1))  # 37 copies of one prompt's 6 statistics
    est, lo, hi = inference.bootstrap_ci(x, n_boot=200, seed=0)
    np.testing.assert_allclose(lo, est, rtol=1e-14) and np.testing.assert_allclose(hi, est)
    for e, a, b in zip(est, lo, hi):
        assert V.equivalent((a, b), e, 0.05) == I  # was reproduced
        assert V.positive((a, b), e - 0.5) == I and V.positive((a, b), e + 0.5) == I
        assert V.negative_control((a - e, b - e), 0.01) == V.UNDERPOWERED  # was passed
    maps = np.tril(rng.normal(size=(1, 2, 10, 10)))
    maps[..., np.triu_indices(10, 1)[0], np.triu_indices(10, 1)[1]] = np.nan
    ci = index_ci(np.repeat(maps, 8, axis=0), n_boot=200)  # 8 groups, one map
    assert (ci.noise_floor == 0).all() and (ci.debiased > 0.5).all()
    for lo, hi in zip(ci.lo, ci.hi):
        assert V.positive((lo, hi), 0.1) == I and V.equivalent((lo, hi), float(lo), 0.1) == I
