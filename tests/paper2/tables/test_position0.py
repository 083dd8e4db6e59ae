"""Position 0's tables (paper2.tables.position0)."""

from __future__ import annotations

import numpy as np
import pytest


def test_position0_table_columns_do_not_depend_on_the_stores_variable_order():
    """A store's variables come back in the order zarr lists its directory (the filesystem's
    choice): the position-0 table must come out the same whatever that order."""
    import xarray as xr

    from causalpos.paper2.tables.position0 import position0_frames

    rng = np.random.default_rng(0)
    data = {
        name: (("condition", "layer"), rng.normal(size=(2, 3)))
        for name in ("std", "mean_norm", "ratio", "max_abs_dev")
    }
    coords = {"condition": ["causal", "bidirectional"], "layer": [0, 1, 2]}
    a = xr.Dataset(data, coords=coords)
    b = xr.Dataset(dict(reversed(list(data.items()))), coords=coords)
    assert list(a.data_vars) != list(b.data_vars)
    fa, fb = position0_frames(a)[0], position0_frames(b)[0]
    assert list(fa.columns) == list(fb.columns)
    assert fa.equals(fb)


def test_position0_table_says_whether_token0_is_fixed():
    """Claim 7's premise comes from the position-0 store's attrs into its table."""
    import xarray as xr

    from causalpos.paper2.tables.assemble import paper2_tables

    def store(fixed):
        ds = xr.Dataset(
            {"std": (("condition", "layer"), np.zeros((1, 2)))},
            coords={"condition": ["causal"], "layer": [0, 1]},
        )
        if fixed is not None:
            ds.attrs["token0_fixed"] = fixed
        return ds

    tab = paper2_tables({}, {("a", "d"): store(1), ("b", "d"): store(0), ("c", "d"): store(None)})
    p0 = tab["position0"].groupby("model")["token0_fixed"].first()
    assert p0["a"] == 1 and p0["b"] == 0 and np.isnan(p0["c"])


def test_probe_table_carries_the_refusal_and_wilson_ci():
    """paper2_position0_probes.csv says why a probe was refused and gives accuracy CIs."""
    import xarray as xr

    from causalpos.inference import wilson as wilson_ci
    from causalpos.paper2.tables.assemble import paper2_tables

    acc = np.array([[0.2, 0.5, 0.4]])
    ds = xr.Dataset(
        {
            "std": (("condition", "layer"), np.zeros((1, 3))),
            **{
                f"probe_{k}": (("condition", "layer"), v)
                for k, v in {
                    "accuracy": acc,
                    "chance": np.full((1, 3), 0.2),
                    "null_mean": np.full((1, 3), 0.21),
                    "p_value": np.array([[0.6, 0.01, 0.05]]),
                }.items()
            },
        },
        coords={"condition": ["causal"], "layer": [0, 1, 2]},
        attrs={
            "token0_fixed": 0,
            "probe_n_prompts": 30,
            "probe_n_classes": 5,
            "probe_condition": "causal",
            "probe_note": "5 classes, 30 prompts (2 smaller classes dropped)",
            "n_sink_heads": 2,
            "sink_probe_accuracy": 0.3,
        },
    )
    row = paper2_tables({}, {("m", "d"): ds})["position0_probes"].iloc[0]
    assert row["best_layer"] == 1 and row["best_layer_accuracy"] == 0.5
    assert row["embedding_accuracy"] == 0.2 and row["token0_fixed"] == 0
    assert "dropped" in row["probe_note"]
    assert (row["best_layer_accuracy_lo"], row["best_layer_accuracy_hi"]) == wilson_ci(0.5, 30)
    assert (row["sink_probe_accuracy_lo"], row["sink_probe_accuracy_hi"]) == wilson_ci(0.3, 30)
    lo, hi = wilson_ci(0.5, 30)
    assert lo == pytest.approx(0.3315, abs=1e-3) and hi == pytest.approx(0.6685, abs=1e-3)
