"""The dose series planted in the residual stream, read back (causalpos.paper2.summary.doses):
the series found from the runs' store attrs, and end to end on a small random model (3 layers,
the term planted at layer 0, identity RoPE and no mask): dose 0 reads ≈ 0 (the run is exactly
position-free), every dose reads more than the one below, the readings are the estimator's own
(dose 0 equals the negative control in the model's units), and the table and the scorecard
judge the series recovered, not recovered against a margin it cannot meet, not run where dose 0
is no negative control."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from causalpos.capture.settings import ExtractSettings
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary.doses import find_dose_series

TWIN = "identity_rope+bidirectional"
DOSES = (0.25, 0.5, 1.0)
PLANTED = [f"identity_rope+plant_stream{k}+bidirectional" for k in (1, 2, 3)]


def _store(**attrs) -> xr.Dataset:
    return xr.Dataset(attrs=attrs)


def test_the_series_comes_from_the_runs_attrs():
    runs = {
        "causal": _store(),
        TWIN: _store(),
        PLANTED[1]: _store(plant_stream_layer=2, plant_stream_dose=0.4, plant_stream_index=2),
        PLANTED[0]: _store(plant_stream_layer=2, plant_stream_dose=0.2, plant_stream_index=1),
        "plant_stream1": _store(plant_stream_layer=0, plant_stream_dose=0.2, plant_stream_index=1),
        # a dose without its dose 0 (scrambled_rope+bidirectional) is no series
        "scrambled_rope+plant_stream1+bidirectional": _store(
            plant_stream_layer=2, plant_stream_dose=0.2, plant_stream_index=1
        ),
    }
    assert find_dose_series(runs) == {
        TWIN: [(TWIN, 0.0, 2), (PLANTED[0], 0.2, 2), (PLANTED[1], 0.4, 2)],
        "causal": [("causal", 0.0, 0), ("plant_stream1", 0.2, 0)],
    }
    mixed = dict(runs)
    mixed[PLANTED[1]] = _store(plant_stream_layer=1, plant_stream_dose=0.4, plant_stream_index=2)
    with pytest.raises(ValueError, match="mixes layers"):
        find_dose_series(mixed)
    bare = dict(runs, **{PLANTED[2]: _store()})
    with pytest.raises(ValueError, match="no .*plant_stream_layer.* attrs"):
        find_dose_series(bare)


@pytest.fixture(scope="module")
def tiny_series(tmp_path_factory):
    """The causal run, dose 0 and three doses of a 3-layer random Llama on 32 prompts of i.i.d.
    tokens after a fixed BOS (chunks: exchangeable over positions), through extraction."""
    from causalpos.io.store import open_dataset, write_dataset
    from causalpos.models.load import build_model_dir
    from causalpos.stages.extract import extract_scores

    tmp = tmp_path_factory.mktemp("doses")
    n, T = 32, 12
    spec = {"source": "random_init", "architecture": "llama", "seed": 0}
    model_dir = build_model_dir("tiny", {**spec, "config": {"num_hidden_layers": 3}}, tmp / "m")
    tok = np.random.default_rng(0).integers(3, 200, size=(n, T))
    tok[:, 0] = 1
    data = write_dataset(
        xr.Dataset(
            {"tokens": (("sequence", "position"), tok)},
            coords={"sequence": np.arange(n), "position": np.arange(T)},
            attrs={"corpus": "{}", "mode": "chunks"},
        ),
        tmp / "data.zarr",
    )
    leak = {"fits": ["saturated+query"], "windows": ["all"], "expected_stats": ["all"]}
    variants = {v: {"reducers": ["leakage"], "leakage": leak} for v in ("causal", TWIN)}
    for v, dose in zip(PLANTED, DOSES, strict=True):
        stream = {"layer": 0, "dose": dose, "profile": "log"}
        variants[v] = {"reducers": ["leakage"], "leakage": leak, "stream": stream}
    settings = ExtractSettings(batch_size=8, n_groups=2, seed=0)
    paths = extract_scores(model_dir, data, tmp / "scores", bounds=(0, n), variants=variants, settings=settings)  # fmt: skip
    return {v: open_dataset(p) for v, p in paths.items()}


def _summary(runs, margin: float, free=(TWIN,)):
    from causalpos.paper2.summary.assemble import leakage_summary

    settings = LeakageSettings(
        n_boot=400, n_perm=0, bos_windows=("all",), control_margin_logit=margin
    )
    return leakage_summary(runs, settings, position_free_runs=list(free))


@pytest.mark.slow
def test_dose_series_end_to_end_on_a_small_random_model(tiny_series):
    from causalpos.paper2.tables.assemble import paper2_tables
    from causalpos.scorecard.controls import with_verdicts
    from causalpos.scorecard.paper2_doses import dose_series_rows
    from causalpos.scorecard.rows import load_targets

    runs = tiny_series
    assert runs[PLANTED[2]].attrs["plant_stream_dose"] == 1.0
    summ = _summary(runs, margin=1.0)
    assert list(summ["dose_run"].values) == [TWIN, *PLANTED]
    np.testing.assert_array_equal(summ["dose_size"].values, [0.0, *DOSES])
    reading = summ["dose_leakage"].to_pandas()
    step = summ["dose_step"].to_pandas()
    # dose 0: the position-free run reads ≈ 0; with the plant at layer 0 its reading is the
    # negative control in the model's units, number for number
    assert reading.loc[TWIN, "lo"] <= 0 <= reading.loc[TWIN, "hi"]
    units = summ["control_units"].sel(
        variant=TWIN, landmark="modelled", window="all", target="logit"
    )
    np.testing.assert_allclose(reading.loc[TWIN].values, units.values, rtol=1e-12)
    # rising with the dose: every paired step above 0, each the difference of the readings
    assert np.isnan(step.loc[TWIN].values).all()
    assert (step.loc[PLANTED, "lo"] > 0).all(), step
    np.testing.assert_allclose(
        step.loc[PLANTED, "estimate"].values, np.diff(reading["estimate"].values), rtol=1e-9
    )
    assert reading.loc[PLANTED[2], "lo"] > reading.loc[TWIN, "hi"]
    # the table and the scorecard: recovered (dose 0 within the margin, every step above 0)
    T_ = load_targets()["targets"]
    tab = paper2_tables({("tiny", "iid"): summ})["plant_doses"]
    assert list(tab["variant"]) == [TWIN, *PLANTED] and list(tab["dose_index"]) == [0, 1, 2, 3]
    judged = with_verdicts("plant_doses", tab)
    assert set(judged["positive_control"]) == {"recovered"}
    assert judged["dose0_control"][0] == "passed"
    card = dose_series_rows(tab, T_)
    assert [r.verdict for r in card] == ["recovered"]
    assert "layer 0" in card[0].target and "dose 1: " in card[0].measured
    # a margin dose 0 cannot meet: not recovered, in the table and the scorecard alike
    strict = paper2_tables({("tiny", "iid"): _summary(runs, margin=1e-6)})["plant_doses"]
    judged = with_verdicts("plant_doses", strict)
    assert set(judged["positive_control"]) == {"not recovered"}
    assert judged["dose0_control"][0] == "underpowered"
    assert [r.verdict for r in dose_series_rows(strict, T_)] == ["not recovered"]
    # dose 0 not a negative control here (e.g. document openings): read, not judged
    loose = paper2_tables({("tiny", "iid"): _summary(runs, margin=1.0, free=())})["plant_doses"]
    np.testing.assert_allclose(loose["leakage"], tab["leakage"])
    assert set(with_verdicts("plant_doses", loose)["positive_control"]) == {"not run"}
    assert [r.verdict for r in dose_series_rows(loose, T_)] == ["not run"]
    # a planted run is never a negative control, and without a causal run there is no unit
    assert int(summ["position_free"].sel(variant=PLANTED[0])) == 0
    alone = _summary({k: v for k, v in runs.items() if k != "causal"}, margin=1.0)
    assert "dose_leakage" not in alone
