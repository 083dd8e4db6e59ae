"""Paper 2's rows per layer kind (a model whose layers mask differently: sliding-window and global
layers, e.g. Gemma 3): claim 3 within one model — the sliding-window layers' residual-stream
component against the global layers', the same weights and prompts (paired replicates). A kind
whose window masks nothing at the run's length is *not applicable* there ("window ≥ T": its
layers see what global ones see). Claim 2 on each kind's layers is the declarative target
``claim2_kinds`` (``causalpos/targets.yaml``).

Judged against the materiality thresholds of the config (``leakage.materiality``); an
inconclusive row says how many prompts would make it conclusive (:func:`prompts_needed`,
:func:`power_note`, which the engine's ``power`` field reads too)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from causalpos.scorecard.materiality import for_model
from causalpos.scorecard.rows import (
    NOT_APPLICABLE,
    SOURCES,
    Row,
    fmt_ci,
    measured_row,
    not_run,
    ring_missing,
    target_row,
    text_column,
)
from causalpos.verdicts import DIFFERS, INCONCLUSIVE, REPRODUCED, positive

#: What the sliding-minus-global rows cannot separate (claim 3's factor rows do).
OBSERVATIONAL = (
    "observational: sliding and global layers differ in the window and also in the RoPE base, "
    "depth and role (each factor alone: the claim 3 window / RoPE base rows)"
)

#: z of a two-sided 95 % interval and of 80 % power: the sample that would resolve an effect of
#: the estimate's size against the threshold (:func:`prompts_needed`).
Z_INTERVAL, Z_POWER = 1.959964, 0.841621

#: The leakage summary job's CPU time (s) at the prompts of the default run, per (model, dataset):
#: Snakemake's benchmark of the ``leakage`` rule (``results/benchmarks/leakage/<model>/<dataset>.tsv``,
#: column ``cpu_time``) in the default run of 2026-12-01 (config.yaml at f43cbdd, 2 cores):
#: (CPU-s, prompts). Its Gram terms grow as n², so :func:`summary_cost` scales it by (n'/n)².
SUMMARY_CPU_S = {
    ("gemma3-270m", "kjv-chunks640-bos"): (61.75, 16),
    ("smollm2-135m", "kjv-chunks128-bos"): (36.52, 32),
    ("smollm2-135m", "kjv-chunks128"): (8.95, 32),
    ("smollm2-135m", "random-chunks128-bos"): (7.29, 16),
}


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


def summary_cost(model: str, dataset: str, n: int, need: int) -> str:
    """The leakage summary's cost at ``need`` prompts, at most: its Gram terms grow as n², so
    (need / n)² times this run's; in CPU-s where :data:`SUMMARY_CPU_S` holds the pair's measured
    time (scaled from the prompts it was measured at). An upper bound: at the default run's
    prompts most of the summary's time does not grow with n (configs/decide.yaml: measured)."""
    factor = (need / n) ** 2
    ref = SUMMARY_CPU_S.get((model, dataset))
    if ref is None:
        return f"its leakage summary at most ~{factor:.0f}× this run's (Gram terms grow as n²)"
    cpu, n0 = ref
    est = cpu * (need / n0) ** 2
    return (
        f"its leakage summary at most ~{est:,.0f} CPU-s there ({cpu} CPU-s measured at {n0} "
        "prompts in the default run, Gram terms grow as n²)"
    )


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


def _rows_of(bykind: pd.DataFrame) -> pd.DataFrame:
    """The headline decomposition's per-kind rows (condition rope, key 0 modelled, the first
    window) of models with more than one kind."""
    d = bykind[(bykind["condition"] == "rope") & (text_column(bykind, "landmark") == "modelled")]
    first = d.groupby(["model", "dataset"], sort=False)["window"].transform("first")
    d = d[d["window"] == first]
    kinds = d[~d["layer_kind"].str.endswith(" minus global")]
    several = kinds.groupby(["model", "dataset"])["layer_kind"].transform("nunique") > 1
    keep = kinds[several][["model", "dataset"]].drop_duplicates()
    return d.merge(keep, on=["model", "dataset"])


def claim3_kind_rows(bykind: pd.DataFrame | None, T: Mapping) -> list[Row]:
    """Claim 3 within one model: the sliding-window layers' residual-stream component minus the
    global layers' (paired: the same weights and prompts) above the materiality threshold;
    *not applicable* where the window masks nothing at the run's length."""
    t = T["claim3_kinds"]
    src = SOURCES["decomposition_components_by_kind"]
    if bykind is None or bykind.empty:
        why = "no model with sliding-window and global layers decomposed on the ring"
        return [not_run(t, t["label"], src, why)]
    d = _rows_of(bykind)
    d = d[d["layer_kind"].str.endswith(" minus global")]
    rows = []
    for r, twin, n in zip(d.itertuples(), text_column(d, "init_of"), _n_prompts(d)):
        kind = r.layer_kind.removesuffix(" minus global")
        label = f"{t['label']} ({r.model}, {r.dataset}, {kind} vs global)"
        vals = (r.residual_stream, r.residual_stream_lo, r.residual_stream_hi)
        measured = f"{kind} minus global {fmt_ci(*vals)} (residual-stream component)"
        if not bool(r.window_masks):
            why = "not applicable: window ≥ T (the sliding layers see what global ones see)"
            rows.append(target_row(t, label, measured, NOT_APPLICABLE, src, note=why))
            continue
        if ring_missing(r):
            rows.append(not_run(t, label, src, ring_missing(r)))
            continue
        if twin:
            rows.append(measured_row(t, label, measured, src, "a random-init twin: the baseline"))
            continue
        tm = for_model(t, r.model)
        thr = float(tm["threshold"])
        verdict = positive(vals[1:], thr)
        power = power_note(verdict, vals, thr, n, (r.model, r.dataset))
        note = "; ".join(x for x in (OBSERVATIONAL, power) if x)
        rows.append(target_row(tm, label, measured, verdict, src, note=note))
    return rows or [not_run(t, t["label"], src, "no model with several layer kinds")]


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


def _n_prompts(d: pd.DataFrame) -> list[int]:
    """Each row's number of prompts (the tables' ``n_sequences`` column; 0 where absent)."""
    if "n_sequences" not in d:
        return [0] * len(d)
    return [int(x) if np.isfinite(x) else 0 for x in d["n_sequences"].astype(float)]
