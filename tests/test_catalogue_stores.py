"""The leakage summary store's variables (causalpos.catalogue_stores): every variable the
summary writes is declared, with the dims it is written with."""

from __future__ import annotations

import pytest

import causalpos.catalogue_stores as C
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary.assemble import leakage_summary
from tests.paper2_headline_runs import headline_runs
from tests.paper2_leakage_maps import make_batches, run_reducer


def _bos_summary():
    """Causal, bidirectional and a BOS replacement run, with the permutation test."""
    stores = {}
    for seed, (v, kw) in enumerate(
        (("causal", {}), ("bidirectional", {"bidirectional": True}), ("bos_replace_zeros", {}))
    ):
        stores[v], _ = run_reducer(
            make_batches(T=10, seed=100 * seed, **kw), windows=("all", "early6", "late")
        )
    settings = LeakageSettings(n_boot=40, n_perm=10, seed=0, bos_windows=("early6", "late"))
    return leakage_summary(stores, settings)


def _headline_summary():
    """The headline runs with a position-free control (components, controls, planted)."""
    settings = LeakageSettings(n_boot=40, n_perm=0, bos_windows=("late",))
    return leakage_summary(
        headline_runs(), settings, position_free_runs=["identity_rope+bidirectional"]
    )


@pytest.fixture(scope="module")
def summaries():
    return [_bos_summary(), _headline_summary()]


DECLARED = {v.name: v for v in C.LEAKAGE_SUMMARY}


def test_every_variable_the_summary_writes_is_declared_with_its_dims(summaries):
    written = {}
    for s in summaries:
        for name, da in s.data_vars.items():
            written[name] = da.dims
    undeclared = sorted(set(written) - set(DECLARED))
    assert not undeclared, f"declare them in causalpos/catalogue_stores.py: {undeclared}"
    wrong = {n: (d, DECLARED[n].dims) for n, d in written.items() if d != DECLARED[n].dims}
    assert not wrong, wrong
    # both readings, the controls and the BOS block are among them
    assert {
        "leakage_model",
        "per_prompt_leakage_model",
        "control_tost",
        "per_prompt_bos_effect",
    } <= set(written)
    assert len(written) >= 39  # of the 56: no sink, factor, dose or ablation runs here


def test_each_variable_is_declared_once_with_a_reading_and_units():
    names = [v.name for v in C.LEAKAGE_SUMMARY]
    assert len(names) == len(set(names)) == len(DECLARED) == 57
    readings = {C.EXPECTED_MAP, C.PER_PROMPT, C.KEY0, C.RUNS}
    for v in C.LEAKAGE_SUMMARY:
        assert v.reading in readings and v.units and v.holds and v.dims, v.name
        # one vocabulary: the per-prompt reading's variables and dims are per_prompt_*, the
        # headline's plain; no name is the old exp_*
        assert not any(n.startswith("exp_") for n in (v.name, *v.dims)), v.name
        if v.reading == C.PER_PROMPT:
            assert v.name.startswith("per_prompt_"), v.name
        else:
            assert not any(n.startswith("per_prompt_") for n in (v.name, *v.dims)), v.name
        if "stat" in v.dims:
            assert v.dims[-1] == "stat", v.name


def test_docs_outputs_lists_every_summary_variable():
    from tests.wfutil import REPO

    text = (REPO / "docs" / "outputs.md").read_text()
    i = text.index(C.BLOCK_BEGIN)
    j = text.index(C.BLOCK_END, i) + len(C.BLOCK_END)
    assert text[i:j] + "\n" == C.variables_block(), (
        "run `causalpos catalogue --update docs/outputs.md`"
    )
    assert (
        "| `leakage_model` | variant, window, target, stat | expected-map |" in C.variables_block()
    )
