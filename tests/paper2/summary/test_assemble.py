"""The summary of one (model, dataset) (paper2.summary.assemble): a leaking control fails, no
expected-map statistics means no headline, the stage's choice of controls."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos import verdicts as V
from causalpos.catalogue_stores import (
    EXPECTED_MAP,
    LEAKAGE_SUMMARY,
    SUMMARY_FORMAT,
    SUMMARY_FORMAT_ATTR,
    open_summary,
)
from causalpos.io.integrity import StoreFormatError
from causalpos.io.store import write_dataset
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as S
from tests.paper2_headline_runs import N, headline_runs


@pytest.fixture(scope="module")
def runs():
    return headline_runs()


def test_a_control_that_leaks_reads_position_and_no_statistics_means_no_headline(runs):
    leaky = dict(runs)
    summ = S.leakage_summary(
        leaky,
        LeakageSettings(n_boot=200, n_perm=0, bos_windows=("late",), planted=0.2),
        position_free_runs=["causal"],
    )
    # the causal run carries a planted position effect: as a "control" it reads position,
    # whatever the model's own estimate (the margin is declared: 0.002 by default)
    tost = summ["control_tost"].sel(variant="causal", target="logit", landmark="modelled")
    for w in tost["window"].values:
        lo, hi = tost.sel(window=w, stat=["lo", "hi"]).values
        assert V.negative_control((lo, hi), 0.002) == V.READS_POSITION
    bare = {
        v: ds.drop_vars(["leak_offsum", "leak_key0sum", "leak_rowsum"]) for v, ds in runs.items()
    }
    summ = S.leakage_summary(bare, LeakageSettings(n_boot=50, n_perm=0, bos_windows=("late",)))
    headline = {v.name for v in LEAKAGE_SUMMARY if v.reading == EXPECTED_MAP}
    assert not headline & set(summ.data_vars)
    assert "per_prompt_leakage_model" in summ


def test_a_summary_of_an_older_format_is_refused_with_the_command_that_rebuilds_it(runs, tmp_path):
    summ = S.leakage_summary(runs, LeakageSettings(n_boot=20, n_perm=0, bos_windows=("late",)))
    assert summ.attrs[SUMMARY_FORMAT_ATTR] == SUMMARY_FORMAT == 2
    store = tmp_path / "results" / "leakage" / "m" / "d.zarr"
    got = open_summary(write_dataset(summ, store))
    assert float(
        got["leakage_model"].sel(variant="causal", target="logit", stat="estimate")[0]
    ) == (float(summ["leakage_model"].sel(variant="causal", target="logit", stat="estimate")[0]))
    # no format attr: the headline was exp_*, the per-prompt reading plain
    format1 = {"leakage_model": "exp_model"}  # (format 1)
    old = summ.rename({**format1, "per_prompt_leakage_model": "leakage_model"})
    old.attrs = {k: v for k, v in summ.attrs.items() if k != SUMMARY_FORMAT_ATTR}
    write_dataset(old, store)
    with pytest.raises(StoreFormatError) as e:
        open_summary(store)
    msg = str(e.value)
    assert "leakage summary format 2" in msg and f"{SUMMARY_FORMAT_ATTR!r}; it has 1" in msg
    assert "Rebuild it" in msg and "d.zarr" in msg
    old.attrs[SUMMARY_FORMAT_ATTR] = 3  # a newer one too
    write_dataset(old, store)
    with pytest.raises(StoreFormatError, match="it has 3"):
        open_summary(store)


@pytest.mark.parametrize("mode", ["chunks", "first"])
def test_the_stage_uses_position_free_runs_as_controls_only_on_exchangeable_prompts(
    runs, tmp_path, mode
):
    """Chunks at random offsets are exchangeable over positions (a fixed token 0 aside, which
    the landmark models); document openings are not, so a position-free run on them is no
    control (its expected map carries the data's own position)."""
    import xarray as xr

    from causalpos.io.store import write_dataset
    from causalpos.stages.leakage import leakage

    paths = {}
    for v, ds in runs.items():
        paths[v] = tmp_path / f"{v}.zarr"
        write_dataset(ds, paths[v])
    data = xr.Dataset({"source": ("sequence", np.array(["a"] * N))}, attrs={"mode": mode})
    write_dataset(data.assign_coords(sequence=np.arange(N)), tmp_path / "data.zarr")
    out = leakage(
        paths,
        tmp_path / "summary.zarr",
        settings={"n_boot": 100, "n_perm": 0, "bos_windows": ["late"]},
        data_store=tmp_path / "data.zarr",
    )
    free = out["position_free"].sel(variant="identity_rope+bidirectional")
    if mode == "chunks":
        assert bool(free) and out.attrs["controls_note"] == ""
        assert out["control_tost"].sel(variant="identity_rope+bidirectional").notnull().all()
    else:
        assert not bool(free) and "mode 'first'" in out.attrs["controls_note"]
        assert out["control_tost"].isnull().all()
