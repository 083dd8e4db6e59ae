"""Position 0 (paper2.position0): the trajectory's closed form under causal attention, the
content probes, and the position0 stage against the library."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tests.position0_oracle as O
from causalpos.capture import position0 as C_position0
from causalpos.paper2 import position0 as P_position0
from causalpos.paper2.extraction import reducers as P_reducers
from causalpos.paper2.settings import Position0Settings
from tests.position0_models import _extract, prompts, tiny_llama


def xr_data(ids: torch.Tensor, labels: np.ndarray):
    import xarray as xr

    n, t = ids.shape
    return xr.Dataset(
        {"tokens": (("sequence", "position"), ids.numpy()), "source": ("sequence", labels)},
        coords={"sequence": np.arange(n), "position": np.arange(t)},
    )


def test_position0_std_exactly_zero_with_fixed_bos_causal():
    tr = P_position0.trajectory(O.position0_states(tiny_llama(), prompts()))
    assert tr.sizes["layer"] == 4
    assert np.all(tr["std"].values == 0.0) and np.all(tr["max_abs_dev"].values == 0.0)  # bitwise
    assert np.all(tr["mean_norm"].values > 0)


def test_position0_std_positive_bidirectional_or_varying_token0():
    ids = prompts()
    bi = P_position0.trajectory(O.position0_states(tiny_llama(is_causal=False), ids))
    assert bi["std"].values[0] == 0.0  # same embedding of the same token 0
    assert np.all(bi["std"].values[1:] > 1e-4)  # later positions flow into position 0
    var = P_position0.trajectory(O.position0_states(tiny_llama(), prompts(fixed_bos=False)))
    assert np.all(var["std"].values > 1e-3)


def test_probe_at_chance_for_constant_features_and_perfect_when_separable():
    labels = np.repeat([0, 1, 2], 10)
    const = np.ones((30, 5))
    r = P_position0.probe_cv(const, labels, n_folds=5, n_perm=30, seed=0)
    # Stratified folds leave 8/8/8 training labels; the constant probe predicts the first tied class.
    assert r["accuracy"] == pytest.approx(1 / 3) and r["chance"] == pytest.approx(1 / 3)
    assert r["p_value"] == 1.0
    rng = np.random.default_rng(0)
    # Class means in general position (collinear means defeat one-vs-rest least squares for the middle class).
    sep = rng.normal(size=(30, 4)) * 0.1 + 2.0 * np.eye(4)[labels]
    r = P_position0.probe_cv(sep, labels, n_folds=5, n_perm=30, seed=0)
    assert r["accuracy"] == 1.0
    assert r["p_value"] == pytest.approx(1 / 31)


def test_probe_on_fixed_bos_states_is_at_chance():
    states = O.position0_states(tiny_llama(), prompts(n=20))
    pr = P_position0.probe_by_layer(states, np.repeat([0, 1], 10), n_folds=5, n_perm=0)
    np.testing.assert_allclose(pr["accuracy"].values, 0.5)


def test_position0_stage_from_stores_matches_the_library_and_refuses_stores_without_states(
    tmp_path,
):
    # The analysis job reads stored states: its trajectory equals the library's on the same
    # states, its probe is the library's probe, and a store extracted without the reader is
    # refused with the fix.
    from causalpos.io.store import write_dataset
    from causalpos.stages.position0 import position0_pair

    model = tiny_llama()
    ids = prompts(n=10, fixed_bos=False)
    labels = np.repeat(["a", "b"], 5)
    data = xr_data(ids, labels)
    write_dataset(data, tmp_path / "data.zarr")
    stores = {}
    for cond in ("causal", "bidirectional"):
        ds = _extract(
            model,
            ids,
            cond,
            [P_reducers.SinkReducer(), C_position0.Position0States(values=cond == "causal")],
            batch_size=5,
        )
        stores[cond] = write_dataset(ds, tmp_path / f"{cond}.zarr")
    out = position0_pair(
        stores,
        tmp_path / "data.zarr",
        tmp_path / "p0.zarr",
        settings=Position0Settings(tau=0.0, n_folds=2, n_permutations=5),
        sink_store=stores["causal"],
    )
    for cond in stores:
        states = O.condition_states(model, ids, cond, batch_size=5)
        np.testing.assert_array_equal(
            out["std"].sel(condition=cond).values, P_position0.trajectory(states)["std"].values
        )
    causal = O.condition_states(model, ids, "causal", batch_size=5)
    pr = P_position0.probe_by_layer(causal, labels, n_folds=2, n_perm=5, seed=0)
    np.testing.assert_array_equal(
        out["probe_accuracy"].sel(condition="causal").values, pr["accuracy"].values
    )
    assert np.all(np.isnan(out["probe_accuracy"].sel(condition="bidirectional").values))
    assert out.attrs["token0_fixed"] == 0 and out.attrs["n_sink_heads"] == 3 * 4  # tau 0: all
    assert 0.0 <= out.attrs["sink_probe_accuracy"] <= 1.0
    bare = _extract(model, ids, "causal", [P_reducers.SinkReducer()], batch_size=5)
    write_dataset(bare, tmp_path / "bare.zarr")
    with pytest.raises(ValueError, match="no position-0 states"):
        position0_pair(
            {"causal": tmp_path / "bare.zarr"}, tmp_path / "data.zarr", tmp_path / "x.zarr"
        )
