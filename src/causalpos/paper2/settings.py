"""Paper 2's settings, declared once (standard library only): what the leakage summary
(:class:`LeakageSettings`) and the position-0 analysis (:class:`Position0Settings`) read from the
resolved config.

A rule hands its job a flat mapping of these fields (its ``params``); the stage builds the frozen
dataclass once (:meth:`LeakageSettings.from_params`) and passes it down. Each field's config key
and default: :mod:`causalpos.settings`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from causalpos.settings import from_params, setting, shared


@dataclass(frozen=True)
class LeakageSettings:
    """What one (model, dataset)'s leakage summary computes, beyond its stores: the per-prompt
    reading's fit, window and null correction, the resampling, the tests and the controls."""

    fit: str = setting("saturated+query", "leakage.fit", "the per-prompt reading's fit")
    window: str = setting("all", "leakage.window", "the per-prompt reading's query window")
    floor_correct: bool = setting(
        True, "leakage.floor_correct", "per-prompt ΔR² minus its permutation-null mean (§2)"
    )
    n_boot: int = shared("stats.n_bootstrap", "replicates over prompts (every interval)")
    level: float = shared("stats.confidence", "every interval's confidence level")
    n_perm: int = setting(
        1000, "leakage.n_permutations", "within-offset permutations per head (0: no test)"
    )
    perm_variants: tuple[str, ...] | None = setting(
        None, "leakage.permutation_variants", "the runs the permutation test reads (None: all)"
    )
    alpha: float = setting(0.05, "leakage.alpha", "the q-value below which a head is significant")
    taus: tuple[float, ...] = setting(
        (0.3, 0.5, 0.8), "leakage.taus", "sink-head thresholds on mean attention to key 0"
    )
    bos_windows: tuple[str, ...] = setting(
        ("early16", "early32", "early64", "late"),
        "leakage.bos_windows",
        "query windows of the per-prompt BOS-replacement effects",
    )
    planted: float = setting(
        0.01,
        "leakage.planted",
        "a statistics-level planted query effect's size, in the causal run's variance",
    )
    control_alpha: float = setting(
        0.05,
        "leakage.controls.alpha",
        "each one-sided test's level of the negative controls (their 1 - 2 alpha interval)",
    )
    control_margin_logit: float = setting(
        0.001,
        "leakage.controls.margin.logit",
        "a negative control's margin on logits, in the model's units (and the dose series' "
        "dose 0's)",
    )
    control_margin_logattn: float = setting(
        0.001,
        "leakage.controls.margin.logattn",
        "a negative control's margin on log-attention, in the model's units",
    )
    seed: int = shared("seed", "the bootstrap counts' and multipliers' seed")
    perm_chunk: int = setting(16, None, "permutations per sparse product (memory, not numbers)")

    def control_margins(self) -> dict[str, float]:
        """target -> the negative controls' margin δ on that reading (model's units)."""
        return {"logit": self.control_margin_logit, "logattn": self.control_margin_logattn}

    from_params = classmethod(from_params)


@dataclass(frozen=True)
class MaterialitySettings:
    """The materiality threshold of each of paper 2's claims, in the units of the row it judges
    (``leakage.materiality``; the scorecard's :class:`~causalpos.scorecard.materiality.Materiality`
    adds each model's own)."""

    claim1_logit: float = setting(
        0.002,
        "leakage.materiality.claim1_logit",
        "claim 1: headline logit leakage, share of the expected logit map's variance",
    )
    claim2_component: float = setting(
        0.002,
        "leakage.materiality.claim2_component",
        "claim 2: a decomposition component, share of the causal log-attention variance",
    )
    claim3_ntk: float = setting(
        0.10,
        "leakage.materiality.claim3_ntk",
        "claim 3: standard minus NTK residual-stream share, in share points",
    )
    claim3_order: float = setting(
        0.002,
        "leakage.materiality.claim3_order",
        "claim 3's ordering: a difference of residual-stream components",
    )
    claim6_headline: float = setting(
        0.002,
        "leakage.materiality.claim6_headline",
        "claim 6: linear minus saturated headline logit leakage",
    )


@dataclass(frozen=True)
class StrataSettings:
    """How the leakage summary's bootstrap resamples prompts (rule ``leakage``'s ``strata``,
    beside its ``summary``)."""

    strata: str = setting(
        "source",
        "leakage.bootstrap_strata",
        "source: prompts resampled within their source (e.g. KJV book); none: plain",
    )


@dataclass(frozen=True)
class LeakageReducerSettings:
    """What extraction's leakage reducer measures in each prompt's maps (config
    ``leakage.reducer``; :class:`causalpos.paper2.extraction.reducers.LeakageReducer` takes
    :meth:`reducer_kwargs`)."""

    fits: tuple[str, ...] = setting(
        ("saturated+query", "linear+query", "saturated+key", "saturated+both"),
        "leakage.reducer.fits",
        "<baseline>+<absolute> fits of the per-prompt reading",
    )
    windows: tuple[str, ...] = setting(
        ("all", "early16", "early32", "early64", "late"),
        "leakage.reducer.windows",
        "query windows (query_window)",
    )
    expected_stats: tuple[str, ...] = setting(
        ("all",),
        "leakage.reducer.expected_stats",
        "windows of the headline estimator's per-prompt sums (the first is the headline's; "
        "empty: no headline reading)",
    )
    pair_subsample: int | None = setting(
        None, "leakage.reducer.pair_subsample", "at most this many pairs per offset (None: all)"
    )
    mean_maps: bool = setting(
        True, "leakage.reducer.mean_maps", "sum the maps over prompts (the permutation test)"
    )

    def reducer_kwargs(self, variant: str, summary: LeakageSettings) -> dict[str, Any]:
        """The reducer's keyword arguments for ``variant``'s extraction, as the config gives
        them (:func:`keeps_mean_maps` with the summary's permutation test)."""
        return {
            "expected_stats": list(self.expected_stats),
            "fits": list(self.fits),
            "mean_maps": keeps_mean_maps(
                self.mean_maps, summary.n_perm, summary.perm_variants, self.expected_stats, variant
            ),
            "pair_subsample": self.pair_subsample,
            "windows": list(self.windows),
        }


def keeps_mean_maps(
    mean_maps: bool,
    n_perm: int,
    perm_variants: Sequence[str] | None,
    expected_stats: Sequence[str],
    variant: str,
) -> bool:
    """Whether ``variant``'s extraction sums its maps over prompts (2 x layers x heads x T²
    float64, ~280 MB for SmolLM2 at T = 256): for the variants the permutation test reads
    (``mean_maps`` on, ``n_perm`` > 0, ``variant`` among ``perm_variants``, None: all), and for
    every variant when the headline estimator runs (``expected_stats``: its denominator reads
    them)."""
    tested = mean_maps and n_perm > 0 and (perm_variants is None or variant in perm_variants)
    return bool(tested) or bool(expected_stats)


@dataclass(frozen=True)
class Position0Settings:
    """The position-0 analysis of rule ``position0``: the sink threshold and the probes."""

    conditions: tuple[str, ...] = setting(
        ("causal", "bidirectional"),
        "leakage.position0.conditions",
        "forward passes whose position-0 states extraction reads",
    )
    tau: float = setting(0.5, "leakage.position0.tau", "sink heads: mean attention to key 0 >= tau")
    n_folds: int = setting(5, "leakage.position0.n_folds", "cross-validation folds of each probe")
    ridge: float = setting(1.0, "leakage.position0.ridge", "the probes' ridge penalty")
    n_permutations: int = setting(
        200, "leakage.position0.n_permutations", "label permutations of each probe's p-value"
    )
    seed: int = shared("seed", "the folds' and permutations' seed")
    label_var: str = setting("source", None, "the data store's per-prompt labels the probes read")

    from_params = classmethod(from_params)


def query_window(name: str, seq_len: int) -> tuple[int, int]:
    """Query rows ``[lo, hi)`` of a window name.

    ``"all"`` = rows 1..T−1; ``"earlyK"`` = rows 1..K−1 (queries i < K, clipped to T);
    ``"late"`` = rows T//2..T−1 (the second half, paper 2 §4's contrast to early queries);
    ``"fullW"`` = rows W..T−1−W, the rows whose sliding window of size W is full in the causal
    pass (keys i − W < j ≤ i) and in the bidirectional one (|i − j| ≤ W), so the visible-key
    count does not depend on i there (paper2.md §2, sliding window).
    Row 0 (a single key) is never measured.
    """
    if name == "all":
        return 1, seq_len
    if name == "late":
        return max(1, seq_len // 2), seq_len
    m = re.fullmatch(r"full(\d+)", name)
    if m:
        w = int(m.group(1))
        return max(1, w), max(1, seq_len - w)
    m = re.fullmatch(r"early(\d+)", name)
    if m:
        return 1, min(int(m.group(1)), seq_len)
    raise ValueError(
        f"unknown query window {name!r}; use 'all', 'late', 'early<K>' (e.g. 'early16') or "
        "'full<W>' (rows whose sliding window W is full, e.g. 'full32')"
    )


def too_short_windows(windows, seq_len: int) -> list[tuple[str, int]]:
    """``(window, rows it keeps)`` of each of ``windows`` that keeps fewer than 2 query rows of
    prompts of ``seq_len`` tokens (:func:`query_window`): one row has no query effect to fit."""
    spans = [(w, *query_window(w, seq_len)) for w in windows]
    return [(w, max(0, hi - lo)) for w, lo, hi in spans if hi - lo < 2]
