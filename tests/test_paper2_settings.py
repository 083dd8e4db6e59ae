"""Paper 2's settings (paper2.settings): each default written once (the dataclass, the schema and
config.yaml agree), built from a rule's flat params, refusing a key that is no setting."""

from __future__ import annotations

import dataclasses

import pytest
from settings_defaults import disagreements

from causalpos.paper2.settings import LeakageSettings, Position0Settings


@pytest.mark.parametrize("cls", [LeakageSettings, Position0Settings])
def test_each_default_is_written_once(cls):
    assert disagreements(cls) == []
    keys = [f.metadata["config"] for f in dataclasses.fields(cls) if f.metadata["config"]]
    assert len(keys) >= 6, keys


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
