"""The prompt set every reading resamples (paper2.prompts): sorted once, every run aligned, the
per-prompt reading and its interval, the strata pooled."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos import stats
from causalpos.paper2.prompts import PromptSet, pool_small_strata
from causalpos.paper2.settings import LeakageSettings
from tests.paper2_headline_runs import N, headline_runs


@pytest.fixture(scope="module")
def runs():
    return headline_runs()


def test_runs_are_sorted_by_sequence_and_share_the_draws(runs):
    shuffled = {v: ds.isel(sequence=np.arange(N)[::-1]) for v, ds in runs.items()}
    ps = PromptSet.from_stores(shuffled, LeakageSettings(n_boot=50, seed=4))
    assert list(ps.sequences) == list(range(N))
    for ds in ps.runs.values():
        assert list(ds["sequence"].values) == list(range(N))
    np.testing.assert_array_equal(ps.counts, stats.bootstrap_counts(N, 50, 4))
    assert ps.multipliers.shape == (50, N) and set(np.unique(ps.multipliers)) == {-1.0, 1.0}


def test_the_per_prompt_reading_is_each_prompts_excess_and_its_interval_the_bootstrap(runs):
    ps = PromptSet.from_stores(runs, LeakageSettings(n_boot=200))
    x = ps.per_prompt_leakage("causal", "logit")
    d = (
        runs["causal"]
        .sortby("sequence")
        .sel(leak_fit="saturated+query", leak_window="all", leak_target="logit")
    )
    np.testing.assert_array_equal(x, d["leak_delta"].values - d["leak_null"].values)
    raw = PromptSet.from_stores(runs, LeakageSettings(n_boot=200, floor_correct=False))
    np.testing.assert_array_equal(raw.per_prompt_leakage("causal", "logit"), d["leak_delta"].values)
    ci = ps.mean_ci(x.mean((1, 2)))
    boot = stats.bootstrap_means(x.mean((1, 2)), ps.counts)
    assert ci[0] == pytest.approx(x.mean(), rel=1e-12)  # a mean of means against the mean
    np.testing.assert_array_equal(ci[1:], np.quantile(boot, [0.025, 0.975]))


def test_runs_on_other_prompts_or_without_the_fit_are_refused(runs):
    other = dict(runs, causal=runs["causal"].isel(sequence=slice(1, None)))
    with pytest.raises(ValueError, match="covers different sequence ids"):
        PromptSet.from_stores(other)
    with pytest.raises(ValueError, match="fit 'linear\\+query' / window 'all' not in the store"):
        PromptSet.from_stores(runs, LeakageSettings(fit="linear+query"))


def test_small_strata_are_pooled_into_one():
    labels = np.array(["a"] * 6 + ["b"] * 2 + ["c"] * 1 + ["d"] * 5)
    pooled, n = pool_small_strata(labels, min_size=5)
    assert n == 3 and set(pooled[6:9]) == {"(pooled small strata)"}
    assert list(pooled[:6]) == ["a"] * 6 and list(pooled[9:]) == ["d"] * 5
