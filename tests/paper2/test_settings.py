"""Paper 2's settings (paper2.settings): each default written once (the dataclass, the schema and
config.yaml agree), built from a rule's flat params, refusing a key that is no setting."""

from __future__ import annotations

import dataclasses

import pytest

from causalpos.paper2.settings import (
    LeakageReducerSettings,
    LeakageSettings,
    Position0Settings,
    keeps_mean_maps,
)
from tests.settings_defaults import disagreements


@pytest.mark.parametrize("cls", [LeakageSettings, Position0Settings, LeakageReducerSettings])
def test_each_default_is_written_once(cls):
    assert disagreements(cls) == []
    keys = [f.metadata["config"] for f in dataclasses.fields(cls) if f.metadata["config"]]
    assert len(keys) >= 5, keys


def test_the_reducer_settings_default_to_the_reducers_own_defaults():
    from causalpos.paper2.extraction.metric import DEFAULT_FITS, DEFAULT_WINDOWS

    r = LeakageReducerSettings()
    assert (r.fits, r.windows) == (DEFAULT_FITS, DEFAULT_WINDOWS)


@pytest.mark.parametrize("name", ["config.yaml", "configs/smoke.yaml", "configs/paper.yaml"])
def test_the_reducer_arguments_are_the_configs_for_every_run(name):
    """LeakageReducerSettings.reducer_kwargs, from a pair's reducer and the summary's settings,
    is what the config resolver hands each extraction job (the notebook API's reducers are the
    rules'), for every run of every pair of the repository's configs."""
    import yaml
    from snakemake.utils import validate

    from causalpos.config import Resolved
    from tests.wfutil import REPO

    cfg = yaml.safe_load((REPO / name).read_text())
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    res = Resolved(cfg)
    summary = LeakageSettings.from_params(res.leakage_summary_params())
    seen = 0
    for (model, dataset), variants in res.leakage_pairs().items():
        red = res.pair_reducer(model, dataset)
        r = LeakageReducerSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in red.items()})  # fmt: skip
        for v in variants:
            assert r.reducer_kwargs(v, summary) == res.leakage_reducer_kwargs(v, model, dataset)
            seen += 1
    assert seen >= 5


def test_mean_maps_are_summed_for_the_tested_runs_or_for_the_headline():
    assert keeps_mean_maps(True, 100, None, (), "ring")
    assert not keeps_mean_maps(True, 100, ["causal"], (), "ring")
    assert keeps_mean_maps(True, 100, ["causal"], (), "causal")
    assert not keeps_mean_maps(True, 0, None, (), "causal")  # no permutation test
    assert not keeps_mean_maps(False, 100, None, (), "causal")
    assert keeps_mean_maps(False, 0, ["causal"], ("all",), "ring")  # the headline's denominator


def test_the_defaults_check_finds_a_second_default():
    @dataclasses.dataclass(frozen=True)
    class Wrong:
        n_boot: int = dataclasses.field(default=999, metadata={"config": "stats.n_bootstrap"})
        fit: str = dataclasses.field(default="linear+query", metadata={"config": "leakage.fit"})
        batch: int = dataclasses.field(default=4, metadata={"config": "extract.batch_size"})
        gone: int = dataclasses.field(default=1, metadata={"config": "leakage.n_flips"})

    found = disagreements(Wrong)
    assert [m.split(" ")[0] for m in found] == [
        "Wrong.n_boot",
        "Wrong.fit",
        "Wrong.batch",
        "Wrong.gone:",
    ], found


def test_from_params_takes_the_rules_params_and_names_an_unknown_key():
    s = LeakageSettings.from_params(
        {"n_boot": 300, "taus": [0.5], "bos_windows": ["late"], "perm_variants": None}
    )
    assert (s.n_boot, s.taus, s.bos_windows, s.perm_variants) == (300, (0.5,), ("late",), None)
    assert s.fit == "saturated+query" and s.seed == 0
    with pytest.raises(ValueError, match=r"no key\(s\) \['n_flips'\]; allowed: \['alpha'"):
        LeakageSettings.from_params({"n_flips": 2000})
    p0 = Position0Settings.from_params({"conditions": ["causal"], "n_permutations": 5, "seed": 3})
    assert (p0.conditions, p0.n_permutations, p0.seed, p0.tau) == (("causal",), 5, 3, 0.5)
    with pytest.raises(ValueError, match="Position0Settings has no key"):
        Position0Settings.from_params({"n_perm": 5})


def test_query_window_names_their_rows():
    from causalpos.paper2.settings import query_window

    assert query_window("all", 10) == (1, 10)
    assert query_window("late", 10) == (5, 10)
    assert query_window("early4", 10) == (1, 4)
    assert query_window("early64", 10) == (1, 10)  # clipped to T
    assert query_window("full3", 10) == (3, 7)
    assert query_window("full6", 10) == (6, 4)  # empty: the config check refuses it
    with pytest.raises(ValueError, match="unknown query window 'first16'"):
        query_window("first16", 10)
