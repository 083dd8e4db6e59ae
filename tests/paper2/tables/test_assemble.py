"""Paper 2's tables across (model, dataset) pairs (paper2.tables.assemble) from a summary of
synthetic stores."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as L_summary
from causalpos.paper2.tables.per_prompt import decomposition_frame, per_prompt_tables
from tests.paper2_leakage_maps import make_batches, run_reducer


def test_leakage_summary_and_tables():
    T = 10
    stores = {}
    for v, kw in (
        ("causal", {}),
        ("bidirectional", {"bidirectional": True}),
        ("bos_replace_zeros", {}),
    ):
        ds, _ = run_reducer(
            make_batches(
                T=T, seed={"causal": 0, "bidirectional": 100, "bos_replace_zeros": 200}[v], **kw
            ),
            windows=("all", "early6", "late"),
        )
        stores[v] = ds
    summ = L_summary.leakage_summary(
        stores, LeakageSettings(n_boot=200, n_perm=40, seed=0, bos_windows=("early6", "late"))
    )
    c = stores["causal"].sel(leak_fit="saturated+query", leak_window="all")
    exc = (c["leak_delta"] - c["leak_null"]).sel(leak_target="logattn").values
    b = stores["bidirectional"].sel(leak_fit="saturated+query", leak_window="all")
    exb = (b["leak_delta"] - b["leak_null"]).sel(leak_target="logattn").values
    dec = summ["per_prompt_decomposition"].sel(per_prompt_condition="rope", stat="estimate")
    assert float(dec.sel(component="total")) == pytest.approx(exc.mean(), rel=1e-12)
    assert float(dec.sel(component="residual_stream")) == pytest.approx(exb.mean(), rel=1e-12)
    assert float(
        dec.sel(component="share_residual_stream") + dec.sel(component="share_causal_mask")
    ) == pytest.approx(1.0)
    lm = summ["per_prompt_leakage_model"].sel(variant="causal", target="logattn")
    assert float(lm.sel(stat="lo")) <= float(lm.sel(stat="estimate")) <= float(lm.sel(stat="hi"))
    p = summ["per_prompt_p_value"].sel(variant="causal", target="logit").values
    np.testing.assert_allclose(
        summ["per_prompt_q_value"].sel(variant="causal", target="logit").values.ravel(),
        scipy.stats.false_discovery_control(p.ravel()),
    )
    obs = summ["per_prompt_observational_split"].sel(causal_variant="causal", stat="estimate")
    assert float(obs.sel(obs_term="softmax")) == pytest.approx(
        float(obs.sel(obs_term="logattn") - obs.sel(obs_term="logit"))
    )
    assert list(summ["causal_variant"].values) == ["causal", "bos_replace_zeros"]
    raw = L_summary.leakage_summary(
        stores, LeakageSettings(n_boot=50, n_perm=0, floor_correct=False)
    )
    ro = raw["per_prompt_observational_split"].sel(causal_variant="causal", stat="estimate")
    assert float(
        ro.sel(obs_term="logit") + ro.sel(obs_term="logz") + ro.sel(obs_term="cross")
    ) == pytest.approx(float(ro.sel(obs_term="logattn")), rel=1e-10)
    assert np.isnan(raw["per_prompt_p_value"].values).all()
    eff = summ["per_prompt_bos_effect"].sel(
        intervention="zeros", bos_window="late", stat="estimate"
    )
    cz = stores["bos_replace_zeros"].sel(
        leak_fit="saturated+query", leak_window="late", leak_target="logit"
    )
    cc = stores["causal"].sel(leak_fit="saturated+query", leak_window="late", leak_target="logit")
    expect = (
        1
        - (cz["leak_delta"] - cz["leak_null"]).values.mean()
        / (cc["leak_delta"] - cc["leak_null"]).values.mean()
    )
    assert float(eff) == pytest.approx(expect, rel=1e-12)
    tabs = per_prompt_tables(summ)
    assert set(tabs) >= {"leakage_by_model", "leakage_by_layer", "heads"}
    assert len(tabs["heads"]) == 3 * 2 * 2 * 2  # variants x targets x layers x heads
    row = decomposition_frame(summ).set_index("condition").loc["rope"]
    assert float(row["total"]) == pytest.approx(exc.mean(), rel=1e-12)


#: The per-layer tables of paper 2 (the reading each states where it is not a column already).
PER_LAYER = {
    "leakage_by_layer": "per-prompt",
    "heads": "per-prompt",
    "per_prompt_decomposition_by_layer": "per-prompt",
    "decomposition_components_by_layer": "expected-map",
}


@pytest.mark.parametrize("recorded", [False, True])
def test_every_per_layer_table_names_its_reading_and_each_layers_kind(recorded):
    """Every per-layer table carries ``reading`` and ``layer_kind`` (after ``layer``): the
    summary's coordinate where it has one, "global" where it has none; position 0's trajectory
    names the embedding, then the kind of the block each state follows."""
    import xarray as xr

    from causalpos.paper2.tables.assemble import paper2_tables
    from tests.paper2_headline_runs import headline_runs

    summ = L_summary.leakage_summary(
        headline_runs(),
        LeakageSettings(n_boot=50, n_perm=0, bos_windows=("late",)),
        position_free_runs=["identity_rope+bidirectional"],
    )
    n = summ.sizes["layer"]
    kinds = [("sliding4" if k % 2 == 0 else "global") for k in range(n)]
    if recorded:
        summ = summ.assign_coords(layer_kind=("layer", kinds))
    expect = dict(zip(summ["layer"].values.tolist(), kinds if recorded else ["global"] * n))
    p0 = xr.Dataset(
        {"std": (("condition", "layer"), np.zeros((1, n + 1)))},
        coords={"condition": ["causal"], "layer": np.arange(n + 1)},
    )
    tabs = paper2_tables({("m", "d"): summ}, {("m", "d"): p0})
    assert {k for k, df in tabs.items() if "layer" in df.columns} == {*PER_LAYER, "position0"}
    for name, reading in PER_LAYER.items():
        df = tabs[name]
        assert len(df) > 0, name
        cols = list(df.columns)
        assert cols[cols.index("layer") + 1] == "layer_kind", name
        assert set(df["reading"]) == {reading}, name
        assert [expect[int(v)] for v in df["layer"]] == list(df["layer_kind"]), name
        assert cols.count("layer_kind") == 1, name
    traj = tabs["position0"].sort_values("layer")
    assert list(traj["layer_kind"]) == ["embedding", *[expect[k] for k in sorted(expect)]]


def test_the_tables_built_are_the_catalogues_and_a_table_built_undeclared_is_refused(monkeypatch):
    """paper2_tables returns exactly causalpos.catalogue's paper-2 tables (empty frames where no
    pair has rows); a frame built under a name the catalogue does not declare is refused."""
    import causalpos.paper2.tables.assemble as A
    from causalpos.catalogue import PAPER2_TABLES

    assert list(A.paper2_tables({})) != [] and set(A.paper2_tables({})) == set(PAPER2_TABLES)
    undeclared = tuple(n for n in PAPER2_TABLES if n != "scale_contrast")
    monkeypatch.setattr(A, "PAPER2_TABLES", undeclared)
    with pytest.raises(ValueError, match=r"built but not declared \['scale_contrast'\]"):
        A.paper2_tables({})


def test_every_declared_paper2_table_has_its_builder_called_and_its_name_built():
    """Each paper-2 table of the catalogue is built: its builder function is called in this
    module and its name is a string this module or the builder's module writes (a table declared
    in the catalogue but built nowhere fails here; the run would write it as an empty CSV)."""
    import ast
    import importlib
    import inspect

    import causalpos.paper2.tables.assemble as A
    from causalpos.catalogue import BY_NAME, PAPER2_TABLES

    def strings_and_calls(module):
        tree = ast.parse(inspect.getsource(module))
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        calls = {
            getattr(n.func, "id", getattr(n.func, "attr", None))
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
        }
        return strings, calls

    strings, calls = strings_and_calls(A)
    for name in PAPER2_TABLES:
        module, function = BY_NAME[name].builder.split(":")
        assert function in calls, (name, function)
        own, _ = strings_and_calls(importlib.import_module(module))
        assert name in strings | own, name
