"""Paper 2's power calculations: how many prompts an inconclusive row would need to be decided
against its materiality threshold (:func:`power_note`, :func:`band_power_note`), and what the
leakage summary would cost there (:func:`summary_cost`)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

import numpy as np

from causalpos.io.jobcost import read_job_cost
from causalpos.verdicts import DIFFERS, INCONCLUSIVE, REPRODUCED

#: z of a two-sided 95 % interval and of 80 % power: the sample that would resolve an effect of
#: the estimate's size against the threshold (:func:`prompts_needed`).
Z_INTERVAL, Z_POWER = 1.959964, 0.841621


class Measured(NamedTuple):
    """One leakage summary job's cost as the job recorded it (:mod:`causalpos.io.jobcost`):
    CPU-s and peak resident memory (MiB; None in a record without it)."""

    cpu_s: float
    rss_mib: float | None = None


#: The leakage summary jobs' costs measured in the run being scored, per (model, dataset): each
#: job's own cost record (:func:`read_summary_costs`), set for one scorecard build by
#: :func:`measured_summaries`. Not Snakemake's benchmark table: it samples every 0.5 s for its
#: first 30 samples and every 30 s after, so a job of 15-45 s reads the CPU of its first ~15 s.
MEASURED: ContextVar[Mapping[tuple[str, str], Measured] | None] = ContextVar(
    "measured_summaries", default=None
)
#: The scorecard input key of a leakage job's cost record (:func:`read_summary_costs`).
SUMMARY_COST_KEY = "summary_cost/"


def read_summary_costs(inputs: Mapping[str, str]) -> dict[tuple[str, str], Measured]:
    """``{(model, dataset): Measured}`` from the inputs keyed ``summary_cost/<model>/<dataset>``:
    each leakage job's CPU time and peak memory (:func:`causalpos.io.jobcost.read_job_cost`). A
    file that is not a cost record is a ValueError naming it and the rerun."""
    out = {}
    for key, path in inputs.items():
        if not key.startswith(SUMMARY_COST_KEY):
            continue
        model, dataset = key.removeprefix(SUMMARY_COST_KEY).split("/", 1)
        try:
            out[(model, dataset)] = Measured(*read_job_cost(path))
        except ValueError as e:
            raise ValueError(
                f"{e}: the cost of the leakage job of {model} on {dataset}. Fix: rerun that job "
                "(snakemake -R leakage)"
            ) from None
    return out


@contextmanager
def measured_summaries(measured: Mapping[tuple[str, str], Measured]):
    """Within the block, :func:`summary_cost` reads the leakage summaries' measured costs
    ``measured`` (:func:`read_summary_costs`)."""
    token = MEASURED.set(dict(measured))
    try:
        yield
    finally:
        MEASURED.reset(token)


def prompts_needed(est: float, lo: float, hi: float, threshold: float, n: int) -> int | None:
    """Prompts a reading needs for its 95 % interval to clear ``threshold`` with 80 % power, if
    its estimate held: the arm towards the threshold decides (above it the lower arm, below it
    the upper); SE = arm / z₀.₉₇₅ and SE ∝ 1/√n, so
    n' = n · ((z₀.₉₇₅ + z₀.₈) · SE / |est − threshold|)². None without a finite estimate,
    interval and n, or with the estimate on the threshold."""
    if not (np.isfinite([est, lo, hi, threshold]).all() and n and est != threshold):
        return None
    arm = est - lo if est > threshold else hi - est
    if arm <= 0:
        return None
    se = arm / Z_INTERVAL
    return int(np.ceil(n * ((Z_INTERVAL + Z_POWER) * se / abs(est - threshold)) ** 2))


def resolves_as(est: float, threshold: float) -> str:
    """The verdict a reading judged by :func:`~causalpos.verdicts.positive` would reach if its
    estimate held and its interval shrank: reproduced above the threshold, differs below."""
    return REPRODUCED if est > threshold else DIFFERS


#: What one machine reaches: 16 cores (the GPU node of docs/cluster.md) for 30 days, in CPU-s;
#: a summary bound beyond it is given in CPU-years (:func:`summary_cost`).
REACH_CPU_S = 16 * 30 * 86_400
#: CPU-s in a year of one core.
CPU_YEAR_S = 365.25 * 86_400


def summary_cost(model: str, dataset: str, n: int, need: int) -> str:
    """The leakage summary's cost at ``need`` prompts, at most: its Gram terms grow as n², so
    (need / n)² times this run's; in CPU-s where :data:`MEASURED` holds the pair's measurement
    at ``n`` prompts (an upper bound: at a few dozen prompts most of its time does not grow with
    n). Its peak memory, where measured, from need / n times this run's (the per-prompt
    statistics it loads) to (need / n)² (its Grams). Beyond :data:`REACH_CPU_S`: CPU-years."""
    factor = (need / n) ** 2
    m = (MEASURED.get() or {}).get((model, dataset))
    if m is None:
        return f"its leakage summary at most ~{factor:.0f}× this run's (Gram terms grow as n²)"
    est = m.cpu_s * factor
    if m.rss_mib is None:
        measured, memory = f"{m.cpu_s:,.1f} CPU-s", ""
        measured += f" measured at {n} prompts in this run, Gram terms grow as n²"
    else:
        gib = m.rss_mib / 1024
        measured = f"{m.cpu_s:,.1f} CPU-s and {gib:,.1f} GiB measured at {n} prompts in this run"
        measured += ", Gram terms grow as n², the runs' statistics as n"
        memory = f" and ~{gib * need / n:,.0f}–{gib * factor:,.0f} GiB of memory"
    if est > REACH_CPU_S:
        return (
            f"its leakage summary not within reach of one machine there (16 cores for 30 days): "
            f"at most ~{est / CPU_YEAR_S:,.0f} CPU-years{memory} ({measured})"
        )
    return f"its leakage summary at most ~{est:,.0f} CPU-s{memory} there ({measured})"


def power_note(
    verdict: str, vals, threshold: float, n: int, where: tuple[str, str] = ("", "")
) -> str:
    """An inconclusive row's power calculation (:func:`prompts_needed`): the prompts, the
    verdict they would reach if the estimate held (:func:`resolves_as`) and the summary's cost
    there (:func:`summary_cost`, ``where`` = (model, dataset)); empty for any other verdict."""
    if verdict != INCONCLUSIVE:
        return ""
    need = prompts_needed(*vals, threshold, n)
    if need is None:
        return ""
    return _power_text(need, n, resolves_as(vals[0], threshold), where)


def _power_text(need: int, n: int, direction: str, where: tuple[str, str], arm: str = "") -> str:
    return (
        f"about {need} prompts would resolve it at 80 % power ({n} here{arm}): it would resolve "
        f"{direction} if the estimate held; {summary_cost(*where, n, need)}"
    )


def band_power_note(
    verdict: str, vals, band: tuple[float, float], n: int, where: tuple[str, str] = ("", "")
) -> str:
    """An inconclusive equivalence row's power calculation against ``band`` = (low edge, high
    edge): with the estimate inside the band both arms must clear their edge (the larger count;
    it would resolve reproduced), outside it the arm towards the band the nearer edge (it would
    resolve differs). Empty for any other verdict or an estimate on an edge."""
    if verdict != INCONCLUSIVE or not np.isfinite(vals[0]):
        return ""
    est, (a, b) = float(vals[0]), band
    if a < est < b:
        arms = [
            ("lower", a, prompts_needed(*vals, a, n)),
            ("upper", b, prompts_needed(*vals, b, n)),
        ]
        direction = REPRODUCED
    else:
        edge, arm = (a, "upper") if est < a else (b, "lower")
        arms, direction = [(arm, edge, prompts_needed(*vals, edge, n))], DIFFERS
    if any(need is None for *_, need in arms):
        return ""
    arm, edge, need = max(arms, key=lambda x: x[2])
    return _power_text(need, n, direction, where, f"; its {arm} arm must clear {edge:.2f}")


def prompts_of(*rows) -> int:
    """The prompts behind a comparison of table rows (their ``n_sequences``; the fewest where
    they differ, 0 where a row has none): the n that :func:`power_note` scales from."""
    ns = []
    for r in rows:
        try:
            x = float(getattr(r, "n_sequences", "nan"))
        except (TypeError, ValueError):
            x = float("nan")
        ns.append(int(x) if np.isfinite(x) else 0)
    return min(ns) if ns else 0
