"""The prompts of one (model, dataset) for paper 2's summary (:class:`PromptSet`): sorted once,
every run aligned, with the draws over them that every output block of
:mod:`causalpos.paper2.summary` resamples; :func:`pool_small_strata` prepares the strata."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import xarray as xr

from causalpos import stats
from causalpos.paper2 import inference
from causalpos.paper2.estimator.replicates import rademacher
from causalpos.paper2.extraction.design import parse_fit
from causalpos.paper2.extraction.metric import null_corrected
from causalpos.paper2.settings import LeakageSettings


@dataclass(frozen=True, eq=False)
class PromptSet:
    """The prompts of one (model, dataset), sorted once, with every run's store aligned to them.

    Row k of every run's per-prompt arrays is prompt ``sequences[k]``, and the bootstrap
    replicates of any per-prompt quantity use the same resampled prompts (``counts``), which pairs
    every difference across runs. The headline's calibrated intervals
    (:func:`causalpos.paper2.estimator.expected.estimate`) share the Rademacher ``multipliers``
    the same way (iid over prompts, strata or not: :mod:`causalpos.paper2.estimator.replicates`).
    Build it with :meth:`from_stores`.
    """

    runs: dict[str, xr.Dataset]  # variant -> its store sorted by sequence id (LeakageReducer runs)
    sequences: np.ndarray  # (n,) sorted sequence ids, shared by every run
    counts: np.ndarray  # (n_boot, n) bootstrap counts over prompts (stratified when strata given)
    fit: str
    window: str
    floor_correct: bool
    level: float
    stratified: bool
    multipliers: np.ndarray  # (n_boot, n) Rademacher ±1, shared by every run

    @classmethod
    def from_stores(
        cls,
        stores: Mapping[str, xr.Dataset],
        settings: LeakageSettings | None = None,
        *,
        strata: np.ndarray | None = None,
    ) -> PromptSet:
        """The runs of ``stores`` that hold ``leak_delta``, checked to cover the same prompts and
        to hold the per-prompt reading's fit and window (``settings``: also the resampling's
        ``n_boot``, ``level`` and ``seed``; default :class:`LeakageSettings`' defaults);
        ``strata``: per-prompt source labels in sorted-id order."""
        cfg = settings or LeakageSettings()
        fit, window = cfg.fit, cfg.window
        parse_fit(fit)
        leak_vars = {v: ds for v, ds in stores.items() if "leak_delta" in ds}
        if not leak_vars:
            raise ValueError(
                "leakage_summary: no store holds leak_delta; run extraction with LeakageReducer"
            )
        seqs = None
        for v, ds in leak_vars.items():
            if fit not in ds["leak_fit"].values or window not in ds["leak_window"].values:
                raise ValueError(
                    f"variant {v!r}: fit {fit!r} / window {window!r} not in the store (fits "
                    f"{list(ds['leak_fit'].values)}, windows {list(ds['leak_window'].values)})"
                )
            s = np.sort(ds["sequence"].values)
            if seqs is None:
                seqs = s
            elif not np.array_equal(s, seqs):
                raise ValueError(
                    f"variant {v!r} covers different sequence ids than the others; the bootstrap "
                    "resamples prompts jointly across variants, so run every variant on the same "
                    "prompts"
                )
        return cls(
            runs={v: ds.sortby("sequence") for v, ds in leak_vars.items()},
            sequences=seqs,
            counts=stats.bootstrap_counts(seqs.size, cfg.n_boot, cfg.seed, strata),
            fit=fit,
            window=window,
            floor_correct=cfg.floor_correct,
            level=cfg.level,
            stratified=strata is not None,
            multipliers=rademacher(seqs.size, cfg.n_boot, cfg.seed + 1),
        )

    @property
    def variants(self) -> list[str]:
        return list(self.runs)

    @property
    def layers(self) -> np.ndarray:
        return self.runs[self.variants[0]]["layer"].values

    @property
    def heads(self) -> np.ndarray:
        return self.runs[self.variants[0]]["head"].values

    @property
    def windows(self) -> np.ndarray:
        """Query windows the stores hold (those of the first run)."""
        return self.runs[self.variants[0]]["leak_window"].values

    def at(self, variant: str, window: str | None = None, fit: str | None = None) -> xr.Dataset:
        """One run's sorted store at one fit and window (default: the headline ones)."""
        return self.runs[variant].sel(
            leak_fit=self.fit if fit is None else fit,
            leak_window=self.window if window is None else window,
        )

    def per_prompt_leakage(
        self, variant: str, target: str, window: str | None = None
    ) -> np.ndarray:
        """The per-prompt reading (sequence, layer, head) of one run and target under its fit:
        each prompt's ΔR² minus its exact permutation-null mean when ``floor_correct`` (§2), else
        raw ΔR²."""
        ds = self.at(variant, window).sel(leak_target=target)
        x = ds["leak_delta"].values
        return null_corrected(x, ds["leak_null"].values) if self.floor_correct else x

    def boot(self, x: np.ndarray) -> np.ndarray:
        """Bootstrap replicates (n_boot, ...) of the prompt mean of ``x`` (sequence, ...)."""
        return stats.bootstrap_means(x, self.counts)

    def ci(
        self, samples: np.ndarray, estimate: np.ndarray, level: float | None = None
    ) -> np.ndarray:
        """(..., 3) = estimate, lo, hi: the percentile interval of paired replicates
        ``samples`` (n_boot, ...) (:func:`causalpos.paper2.inference.interval`) at ``level``
        (default: the prompt set's)."""
        return inference.interval(samples, estimate, self.level if level is None else level)

    def mean_ci(self, x: np.ndarray) -> np.ndarray:
        """(..., 3) prompt mean of ``x`` (sequence, ...) with its bootstrap CI."""
        return self.ci(self.boot(x), x.mean(0))


def pool_small_strata(labels: np.ndarray, min_size: int = 5) -> tuple[np.ndarray, int]:
    """Labels with every stratum of fewer than ``min_size`` prompts merged into one pooled stratum.

    A stratified bootstrap resamples each stratum within itself, so a stratum of one prompt always
    redraws that prompt (no variance) and small ones understate it by (n_s − 1)/n_s; e.g. Wikipedia
    chunks labelled by article title are almost all singletons. Returns (labels, number of
    prompts pooled).
    """
    labels = np.array([str(x) for x in np.asarray(labels).ravel()], dtype=object)
    names, counts = np.unique(labels, return_counts=True)
    small = np.isin(labels, names[counts < min_size])
    labels[small] = "(pooled small strata)"
    return labels, int(small.sum())
