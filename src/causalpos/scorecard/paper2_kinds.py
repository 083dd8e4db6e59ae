"""Paper 2's power calculations: how many prompts an inconclusive row would need to be decided
against its materiality threshold (``leakage.materiality``; :func:`prompts_needed`,
:func:`power_note`, :func:`band_power_note`), read by the engine's ``power`` field and the row
builders. The rows per layer kind (claim 2 on each kind's layers, claim 3 within one model: the
sliding-window layers against the global ones) are the declarative targets ``claim2_kinds`` and
``claim3_kinds`` (``causalpos/targets.yaml``)."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

import numpy as np

from causalpos.verdicts import DIFFERS, INCONCLUSIVE, REPRODUCED

#: z of a two-sided 95 % interval and of 80 % power: the sample that would resolve an effect of
#: the estimate's size against the threshold (:func:`prompts_needed`).
Z_INTERVAL, Z_POWER = 1.959964, 0.841621


class Measured(NamedTuple):
    """One leakage summary job's cost as Snakemake's benchmark measured it: CPU-s and peak
    resident memory (MiB; None where the table has ``NA`` there)."""

    cpu_s: float
    rss_mib: float | None = None


#: The leakage summary jobs' costs measured in the run being scored, per (model, dataset): read
#: from Snakemake's benchmark of each ``leakage`` job (its ``cpu_time`` and ``max_rss``,
#: ``results/benchmarks/leakage/<model>/<dataset>.tsv``, the scorecard rule's declared inputs
#: ``summary_benchmark/<model>/<dataset>``: :func:`read_summary_benchmarks`) and set for one
#: scorecard build by :func:`measured_summaries`. Its Gram terms grow as n², so
#: :func:`summary_cost` scales both by (n'/n)², n the prompts the row was read at (the summary's).
MEASURED: ContextVar[Mapping[tuple[str, str], Measured] | None] = ContextVar(
    "measured_summaries", default=None
)
#: The scorecard input key of a leakage job's benchmark table (:func:`read_summary_benchmarks`).
SUMMARY_BENCHMARK_KEY = "summary_benchmark/"


def _number(cell: str) -> float | None:
    """A benchmark cell: a float, or None for ``NA`` (anything else is a ValueError)."""
    return None if cell == "NA" else float(cell)


def read_summary_benchmarks(inputs: Mapping[str, str]) -> dict[tuple[str, str], Measured]:
    """``{(model, dataset): Measured}`` from the inputs keyed ``summary_benchmark/<model>/<dataset>``:
    the ``cpu_time`` and ``max_rss`` columns of each Snakemake benchmark table (its last row:
    the job's latest run). A ``cpu_time`` of ``NA`` (a job that ended before Snakemake's first
    sample) is no measurement: the pair is left out, and its notes give the factor alone. A
    table without ``cpu_time``, or with anything but a number or ``NA`` in either column, is a
    ValueError naming the file."""
    out = {}
    for key, path in inputs.items():
        if not key.startswith(SUMMARY_BENCHMARK_KEY):
            continue
        model, dataset = key.removeprefix(SUMMARY_BENCHMARK_KEY).split("/", 1)
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        try:
            cpu = _number(rows[-1]["cpu_time"])
            rss = _number(rows[-1].get("max_rss", "NA"))
        except (IndexError, KeyError, TypeError, ValueError):
            raise ValueError(
                f"{path}: not a Snakemake benchmark table with a cpu_time (the leakage job's "
                f"benchmark of {model} on {dataset}). Fix: rerun that job (snakemake -R leakage)"
            ) from None
        if cpu is not None:
            out[(model, dataset)] = Measured(cpu, rss)
    return out


@contextmanager
def measured_summaries(measured: Mapping[tuple[str, str], Measured]):
    """Within the block, :func:`summary_cost` reads the leakage summaries' measured costs
    ``measured`` (:func:`read_summary_benchmarks`)."""
    token = MEASURED.set(dict(measured))
    try:
        yield
    finally:
        MEASURED.reset(token)


def prompts_needed(est: float, lo: float, hi: float, threshold: float, n: int) -> int | None:
    """Prompts a reading needs for its 95 % interval to clear ``threshold`` with 80 % power, if
    its estimate held. The arm that must clear it decides: above the threshold the lower arm
    (est − lo must shrink below est − threshold), below it the upper arm (hi − est below
    threshold − est); SE = arm / z₀.₉₇₅ and SE ∝ 1/√n, so
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
    (need / n)² times this run's; in CPU-s and GiB of peak memory where :data:`MEASURED` holds
    the pair's measurement (its summary read at ``n`` prompts). An upper bound: at a few dozen
    prompts most of the summary's time does not grow with n (configs/decide.yaml: measured). A
    CPU bound beyond :data:`REACH_CPU_S` says so, in CPU-years."""
    factor = (need / n) ** 2
    m = (MEASURED.get() or {}).get((model, dataset))
    if m is None:
        return f"its leakage summary at most ~{factor:.0f}× this run's (Gram terms grow as n²)"
    est = m.cpu_s * factor
    if m.rss_mib is None:
        measured, memory = f"{m.cpu_s:,.1f} CPU-s", ""
    else:
        measured = f"{m.cpu_s:,.1f} CPU-s and {m.rss_mib / 1024:,.1f} GiB"
        memory = f" and ~{m.rss_mib / 1024 * factor:,.0f} GiB of memory"
    measured += f" measured at {n} prompts in this run, Gram terms grow as n²"
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
    """An inconclusive equivalence row's power calculation (a CI judged against the band
    ``band`` = (low edge, high edge): :func:`~causalpos.verdicts.within_range`,
    :func:`~causalpos.verdicts.equivalent`), from the arm that must clear an edge
    (:func:`prompts_needed` against that edge): with the estimate inside the band both arms must
    clear theirs (the larger count; it would resolve reproduced), outside it the arm towards the
    band must clear the nearer edge (it would resolve differs); the summary's cost there
    (:func:`summary_cost`). Empty for any other verdict or an estimate on an edge."""
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
