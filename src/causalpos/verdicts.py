"""Verdict rules of the scorecard: small pure functions from a measurement to a verdict.

Every rule can return each of ``reproduced``, ``differs`` and ``inconclusive`` (tests drive each
to all three). Measurements come as intervals ``(lo, hi)`` (a CI, or ``(v - err, v + err)``), so
the verdict reads the uncertainty, never the point estimate alone. An interval that measures no
uncertainty (width 0 within rounding, e.g. a sample of copies of one prompt) decides nothing
(:func:`decides`); the checks of values computed exactly (:func:`exact`, :func:`covers`) take
one. Controls and checks get labels of their own so that no count of reproductions includes
them; a check that cannot be decided reads ``fails``. A rule's docstring is the text the
scorecard's ``rule`` column quotes (:func:`causalpos.scorecard.rows.rule_text`): edit it as
output. What each rule decides, in words: docs/findings.md ("How the scorecard decides").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from causalpos.stats import ROUNDING

REPRODUCED = "reproduced"
DIFFERS = "differs"
INCONCLUSIVE = "inconclusive"
#: The three verdicts of a test (a row that could have failed).
TESTED = (REPRODUCED, DIFFERS, INCONCLUSIVE)

PASSED = "passed"
READS_POSITION = "reads position"
UNDERPOWERED = "underpowered"
#: The verdicts of a negative control (two one-sided tests against a declared margin).
NEGATIVE_CONTROL = (PASSED, READS_POSITION, UNDERPOWERED)

RECOVERED = "recovered"
NOT_RECOVERED = "not recovered"
#: The verdicts of a positive control (a planted effect of known size read back).
POSITIVE_CONTROL = (RECOVERED, NOT_RECOVERED)

#: The verdicts of a control: never "reproduced".
CONTROL = NEGATIVE_CONTROL + POSITIVE_CONTROL

HOLDS = "holds"
FAILS = "fails"
#: The verdicts of a check (an identity that holds by construction): never "reproduced".
CHECK = (HOLDS, FAILS)

Interval = tuple[float, float]


def _finite(*xs: float) -> bool:
    return all(x is not None and math.isfinite(float(x)) for x in xs)


def decides(ci: Interval, scale: float = 0.0) -> bool:
    """Whether the interval ``(lo, hi)`` can decide a test: finite bounds with ``hi − lo`` more
    than rounding (:data:`causalpos.stats.ROUNDING` of the largest magnitude among the bounds and
    ``scale``, the size of what the rule compares them with: a threshold, a margin). An interval
    of width 0 (``0.759 [0.759, 0.759]``, or ``[−1e-16, 2e-16]`` against a margin of 0.01: a
    sample of copies of one prompt, whose replicates are all one value up to rounding) or with
    ``lo > hi`` measured no uncertainty: it decides nothing."""
    lo, hi = ci
    if not _finite(lo, hi, scale):
        return False
    lo, hi = float(lo), float(hi)
    return hi - lo > ROUNDING * max(abs(lo), abs(hi), abs(float(scale)))


def _in_band(lo: float, hi: float, low: float, high: float, margin: float) -> str:
    """The band [``low`` − margin, ``high`` + margin] read on any ordered interval, width 0
    included: inside it ``reproduced``, wholly outside ``differs``, else ``inconclusive``."""
    if lo >= low - margin and hi <= high + margin:
        return REPRODUCED
    if hi < low - margin or lo > high + margin:
        return DIFFERS
    return INCONCLUSIVE


def equivalent(ci: Interval, paper_value: float, margin: float) -> str:
    """Equivalence with the paper's value within ±``margin``.

    ``reproduced`` if the whole interval lies inside [paper − margin, paper + margin] (so a CI that
    contains the paper's value and is narrower than the margin reproduces it); ``differs`` if it
    lies entirely outside that band (hi < paper − margin or lo > paper + margin);
    ``inconclusive`` if it straddles an edge of the band (too wide, or too close, to decide),
    and for an interval that decides nothing (:func:`decides`).
    """
    return within_range(ci, paper_value, paper_value, margin)


def within_range(ci: Interval, low: float, high: float, margin: float) -> str:
    """Equivalence with a range of the paper's values (several models' values, none of them the
    measured model's own) within ±``margin``.

    ``reproduced`` if the whole interval lies inside [``low`` − margin, ``high`` + margin];
    ``differs`` if it lies entirely outside that band (hi < low − margin or
    lo > high + margin); ``inconclusive`` if it straddles an edge of the band, and for an
    interval that decides nothing (:func:`decides`). :func:`equivalent` at ``low`` = ``high``.
    """
    lo, hi = ci
    scale = max(abs(low), abs(high)) + abs(margin) if _finite(low, high, margin) else math.nan
    if not (_finite(low, high, margin) and low <= high and decides(ci, scale)):
        return INCONCLUSIVE
    return _in_band(float(lo), float(hi), low, high, margin)


def positive(ci: Interval, threshold: float = 0.0) -> str:
    """An effect larger than ``threshold`` (0: merely positive).

    ``reproduced`` if lo > threshold; ``differs`` if hi <= threshold (the interval rules out any
    effect above the threshold); ``inconclusive`` otherwise (the interval straddles it, or
    decides nothing: :func:`decides`).
    """
    lo, hi = ci
    if not (_finite(threshold) and decides(ci, threshold)):
        return INCONCLUSIVE
    if lo > threshold:
        return REPRODUCED
    if hi <= threshold:
        return DIFFERS
    return INCONCLUSIVE


def negative(ci: Interval, threshold: float = 0.0) -> str:
    """An effect below −``threshold``: :func:`positive` of the negated interval (``reproduced``
    if hi < −threshold; ``differs`` if lo >= −threshold; ``inconclusive`` otherwise)."""
    lo, hi = ci
    return positive((-hi, -lo), threshold)


def at_most(ci: Interval, threshold: float) -> str:
    """An effect no larger than ``threshold`` (e.g. "no decodable content": accuracy above the
    null at most a margin).

    ``reproduced`` if hi <= threshold (the interval rules out anything larger); ``differs`` if
    lo > threshold; ``inconclusive`` otherwise (the interval straddles it, e.g. too few prompts,
    or decides nothing: :func:`decides`).
    """
    verdict = positive(ci, threshold)  # its converse: the same interval, the verdicts swapped
    return {REPRODUCED: DIFFERS, DIFFERS: REPRODUCED}.get(verdict, verdict)


def exact(value: float, target: float, tolerance: float, err: float = 0.0) -> str:
    """An exact identity ``value == target`` up to ``tolerance``, for a value known to ±``err``.

    ``reproduced`` if |value − target| + err <= tolerance; ``differs`` if
    |value − target| − err > tolerance; ``inconclusive`` in between (the numerical error of the
    value is too large to tell). Equal to :func:`equivalent` on (value − err, value + err), and
    decided at ``err`` 0 too (a value computed exactly, not sampled).
    """
    if not _finite(value, err, target, tolerance) or err < 0:
        return INCONCLUSIVE
    return _in_band(value - err, value + err, target, target, tolerance)


def fraction(n_yes: int, n_undecided: int, n: int, threshold: float) -> str:
    """A count or fraction with a threshold: "at least ``threshold`` of the ``n`` items hold".

    ``n_yes`` items hold (decided), ``n_undecided`` cannot be decided (e.g. a CI straddling a
    margin), the rest fail; the true fraction lies in [n_yes/n, (n_yes + n_undecided)/n].
    ``reproduced`` if n_yes/n >= threshold; ``differs`` if (n_yes + n_undecided)/n < threshold;
    ``inconclusive`` otherwise, and when n == 0 (nothing to count). Exact counts have
    n_undecided = 0 and never come out inconclusive unless n == 0.
    """
    if n <= 0 or not 0 <= n_yes <= n or not 0 <= n_undecided <= n - n_yes:
        return INCONCLUSIVE
    if n_yes / n >= threshold:
        return REPRODUCED
    if (n_yes + n_undecided) / n < threshold:
        return DIFFERS
    return INCONCLUSIVE


def difference_ci(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(estimate, lo, hi) of a − b from two (estimate, lo, hi) triples of independent estimates.

    Each side's half-widths combine in quadrature (normal approximation): lo = d − √(Δa₋² + Δb₊²),
    hi = d + √(Δa₊² + Δb₋²). For positively correlated (paired) estimates this overstates the
    width, which makes both ``reproduced`` and ``differs`` harder, never easier.
    """
    ea, la, ha = (float(x) for x in a)
    eb, lb, hb = (float(x) for x in b)
    d = ea - eb
    return d, d - math.hypot(ea - la, hb - eb), d + math.hypot(ha - ea, eb - lb)


def nearly_identical(
    estimates: Sequence[Sequence[float]],
    margin: float,
    differences: Sequence[Sequence[float]] | None = None,
) -> str:
    """ "Nearly identical across conditions", judged by the CIs of the pairwise differences.

    ``estimates``: one (estimate, lo, hi) per condition. Every pairwise difference gets a CI from
    :func:`difference_ci`; the claim is :func:`equivalent` to 0 within ±``margin`` for every pair.
    ``differences``: the pairwise differences' own (estimate, lo, hi), e.g. from a bootstrap that
    resampled the prompts jointly across conditions (paired); given, they replace the
    :func:`difference_ci` intervals, which treat the conditions as independent.
    ``reproduced`` if every difference CI lies inside [−margin, margin]; ``differs`` if some
    difference CI lies entirely outside it; ``inconclusive`` otherwise, and with fewer than two
    conditions.
    """
    est = [tuple(e) for e in estimates]
    if len(est) < 2:
        return INCONCLUSIVE
    if differences is not None:
        diffs = [tuple(float(x) for x in d) for d in differences]
    else:
        diffs = [
            difference_ci(est[i], est[j]) for i in range(len(est)) for j in range(i + 1, len(est))
        ]
    return all_of(equivalent((lo, hi), 0.0, margin) for _, lo, hi in diffs)


def increasing(cis: Sequence[Interval]) -> str:
    """Strictly increasing along a sequence (e.g. layers), judged by non-overlapping CIs.

    ``reproduced`` if every step's CIs are separated upwards (lo[k+1] > hi[k]); ``differs`` if
    some step is separated downwards (hi[k+1] < lo[k]); ``inconclusive`` otherwise (overlapping
    CIs somewhere), and with fewer than two items or an interval that decides nothing.
    """
    cis = list(cis)
    if len(cis) < 2 or not all(decides(ci) for ci in cis):
        return INCONCLUSIVE
    steps = list(zip(cis[:-1], cis[1:]))
    if any(b[1] < a[0] for a, b in steps):
        return DIFFERS
    if all(b[0] > a[1] for a, b in steps):
        return REPRODUCED
    return INCONCLUSIVE


def all_of(verdicts: Iterable[str]) -> str:
    """A conjunction of claims: ``differs`` if any part differs, ``reproduced`` if every part is
    reproduced, ``inconclusive`` otherwise (and for no parts at all)."""
    vs = list(verdicts)
    if not vs:
        return INCONCLUSIVE
    if DIFFERS in vs:
        return DIFFERS
    if all(v == REPRODUCED for v in vs):
        return REPRODUCED
    return INCONCLUSIVE


def check(verdict: str) -> str:
    """A check's verdict from a rule's: ``holds`` where the rule says ``reproduced``, ``fails``
    otherwise (an identity that cannot be confirmed does not hold)."""
    return HOLDS if verdict == REPRODUCED else FAILS


def covers(ci: Interval, value: float) -> str:
    """A check that an interval contains the value a construction implies (e.g. the causal-mask
    share 1 of a run whose bidirectional twin carries no position): ``reproduced`` if
    lo <= value <= hi, ``differs`` if it lies entirely on one side, ``inconclusive`` for a
    non-finite bound or ``lo > hi`` (an interval of width 0 decides: the value may be exact)."""
    lo, hi = ci
    if not _finite(lo, hi, value) or lo - hi > ROUNDING * max(abs(lo), abs(hi), abs(value)):
        return INCONCLUSIVE
    return REPRODUCED if lo <= value <= hi else DIFFERS


def negative_control(ci: Interval, margin: float) -> str:
    """A negative control judged by two one-sided tests (TOST) against the margin ``margin`` (δ,
    declared before the run, in the units of the reading it judges).

    ``ci``: the control's (1 − 2α) interval, α the level of each one-sided test. ``passed`` if
    the interval lies strictly inside (−δ, δ) (both one-sided tests reject |effect| ≥ δ: the
    control is equivalent to 0 within δ); ``reads position`` if it lies wholly beyond ±δ
    (lo > δ or hi < −δ: the estimator reads an effect larger than δ where there is none);
    ``underpowered`` otherwise (the interval reaches past an edge of the band without lying
    beyond it: too wide to tell), and for an interval that decides nothing (:func:`decides`: a
    non-finite bound, width 0). A δ that is not a finite number > 0 is a ValueError (it is a
    declared setting, not data).
    """
    if not _finite(margin) or float(margin) <= 0:
        raise ValueError(f"a negative control's margin must be a number > 0, got {margin!r}")
    lo, hi = ci
    if not decides(ci, margin):
        return UNDERPOWERED
    if -margin < lo and hi < margin:
        return PASSED
    if lo > margin or hi < -margin:
        return READS_POSITION
    return UNDERPOWERED


def recovered(ci: Interval, truth: float) -> str:
    """A positive control: a planted effect of size ``truth`` read back with interval ``ci``.

    ``recovered`` if the interval covers the truth and, for a truth ≠ 0, excludes 0 (an interval
    that reaches 0 cannot tell the plant from none); ``not recovered`` otherwise, and for an
    interval that decides nothing (:func:`decides`). At truth 0 (dose 0 of a dose series) it is
    recovered when the interval covers 0.
    """
    lo, hi = ci
    if not (_finite(truth) and decides(ci, truth)):
        return NOT_RECOVERED
    covered = lo <= truth <= hi
    excludes_zero = truth == 0 or lo > 0 or hi < 0
    return RECOVERED if covered and excludes_zero else NOT_RECOVERED


def unless_control_reads(verdict: str, control_verdict: str) -> str:
    """A test's verdict in the light of its own negative control: ``reproduced`` becomes
    ``inconclusive`` where the control ``reads position`` (the estimator reads an effect in a
    run that has none, so the model's reading cannot be told from it); any other pair is
    unchanged. Where the control passed or is underpowered, the test's threshold, declared at
    least as large as the control's margin, decides alone."""
    if verdict == REPRODUCED and control_verdict == READS_POSITION:
        return INCONCLUSIVE
    return verdict


def dose_series(zero: Interval, steps: Sequence[Interval], margin: float) -> str:
    """A positive control planted as a dose series (paper2.md §2, Controls): ``recovered`` if dose
    0 reads ≈ 0 (:func:`negative_control` says ``passed`` for its (1 − 2α) interval ``zero``
    against the declared ``margin``) and every step from one dose to the next rises (each paired
    difference's interval in ``steps`` lies above 0); ``not recovered`` otherwise, and with no
    step or an interval that decides nothing (:func:`decides`)."""
    steps = list(steps)
    if negative_control(zero, margin) != PASSED or not steps:
        return NOT_RECOVERED
    if all(decides((lo, hi), margin) and lo > 0 for lo, hi in steps):
        return RECOVERED
    return NOT_RECOVERED
