"""Tests of causalpos.figures.paper2: each figure plots the summary's numbers, the headline first
(summaries built from tests/paper2_headline_runs.py's stores over several layers)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from paper2_headline_runs import HEADS, N, T, store
from paper2_maps import content_maps

from causalpos.figures import paper2 as F
from causalpos.paper2 import position0 as P_position0
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as L_summary

FREE = "identity_rope+bidirectional"


def layered(maps: list[np.ndarray], causal: bool) -> xr.Dataset:
    """A leakage store with one layer per entry of ``maps`` (each (n, heads, T, T)), built with
    paper2_headline_runs' one-layer :func:`store`."""
    parts = [store(y, causal).assign_coords(layer=[i]) for i, y in enumerate(maps)]
    return xr.concat(parts, "layer", data_vars="minimal", coords="minimal", compat="override")


@pytest.fixture(scope="module")
def stores() -> dict[str, xr.Dataset]:
    """paper2_headline_runs' runs over three layers: a causal run whose planted query effect grows
    with depth, its ablation carrying half of it, and a position-free run."""
    rng = np.random.default_rng(11)
    maps: dict[str, list[np.ndarray]] = {v: [] for v in ("causal", "bidirectional", FREE)}
    for layer in range(3):
        free, _ = content_maps(N, HEADS, T, rng)
        planted = (0.5 + layer) * np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
        leaky, _ = content_maps(N, HEADS, T, rng, planted=planted)
        maps["causal"].append(leaky)
        maps["bidirectional"].append(free + 0.5 * (leaky - free).mean(0))
        maps[FREE].append(free)
    out = {v: layered(m, v == "causal") for v, m in maps.items()}
    out["ring"] = out["bidirectional"]  # the decomposition's ablation: the same maps here
    return out


def summarise(stores: dict[str, xr.Dataset]) -> xr.Dataset:
    return L_summary.leakage_summary(
        stores,
        LeakageSettings(n_boot=100, n_perm=0, seed=0, bos_windows=("late",)),
        position_free_runs=[v for v in stores if v == FREE],
    )


@pytest.fixture(scope="module")
def summary(stores) -> xr.Dataset:
    return summarise(stores)


def per_layer(arr: xr.DataArray) -> np.ndarray:
    return arr.transpose("layer", "stat").sel(stat=["estimate", "lo", "hi"]).values


def test_leakage_by_layer_draws_the_headline_first_in_one_unit(summary, tmp_path):
    paths = [tmp_path / "by_layer.png", tmp_path / "by_layer.pdf"]
    got = F.leakage_by_layer({"tiny": summary}, paths, per_prompt=True)
    for p in paths:
        assert p.stat().st_size > 1000
    assert list(got["tiny"]) == ["headline", "counted", "per_prompt"]  # per-prompt last
    w = str(summary["exp_window"].values[0])
    assert w == "all"
    comp = summary["exp_components_layer"].sel(exp_condition="rope", exp_window=w)
    for row, lm in (("headline", "modelled"), ("counted", "counted")):
        assert set(got["tiny"][row]) == set(F.CURVES)
        for k, arr in got["tiny"][row].items():
            np.testing.assert_array_equal(
                arr, per_layer(comp.sel(exp_landmark=lm, component_full=k))
            )
    head = got["tiny"]["headline"]
    assert head["total"].shape == (3, 3)
    # the drawn total is the causal run's own headline per layer (one denominator per layer)
    np.testing.assert_allclose(
        head["total"],
        per_layer(summary["exp_layer"].sel(variant="causal", exp_window=w, target="logattn")),
        rtol=1e-12,
    )
    # the components add in the drawn unit; the planted effect grows with depth
    np.testing.assert_allclose(
        head["causal_mask"][:, 0], head["total"][:, 0] - head["residual_stream"][:, 0]
    )
    assert np.all(np.diff(head["total"][:, 0]) > 0)
    assert np.isnan(head["artefact"][:, 1:]).all() and np.isfinite(head["artefact"][:, 0]).all()
    dl = summary["decomposition_layer"].sel(condition="rope")
    np.testing.assert_array_equal(
        got["tiny"]["per_prompt"]["total"], per_layer(dl.sel(component="total"))
    )
    np.testing.assert_array_equal(
        got["tiny"]["per_prompt"]["logit"],
        per_layer(summary["leakage_layer"].sel(variant="causal", target="logit")),
    )
    # by default the per-prompt reading is not drawn where the headline is
    assert list(F.leakage_by_layer({"tiny": summary}, [tmp_path / "d.png"])["tiny"]) == [
        "headline",
        "counted",
    ]


def test_leakage_by_layer_without_an_ablation_run_or_a_headline(stores, summary, tmp_path):
    causal_only = summarise({"causal": stores["causal"]})
    assert "exp_components_layer" not in causal_only
    no_headline = summary.drop_vars([v for v in summary.data_vars if v.startswith("exp_")])
    got = F.leakage_by_layer(
        {"full": summary, "causal-only": causal_only, "no-headline": no_headline},
        [tmp_path / "mixed.png"],
    )
    assert list(got["full"]) == ["headline", "counted"]
    assert list(got["causal-only"]) == ["headline"]
    np.testing.assert_array_equal(
        got["causal-only"]["headline"]["total"],
        per_layer(
            causal_only["exp_layer"].sel(variant="causal", exp_window="all", target="logattn")
        ),
    )
    # the same causal run, the same prompts: the same headline total as the decomposed summary
    np.testing.assert_allclose(
        got["causal-only"]["headline"]["total"][:, 0], got["full"]["headline"]["total"][:, 0]
    )
    # no headline at all: the per-prompt reading is drawn, below a note in the headline row
    assert list(got["no-headline"]) == ["per_prompt"]
    with pytest.raises(ValueError, match="no summaries"):
        F.leakage_by_layer({}, [tmp_path / "x.png"])


def test_component_shares_four_readings_with_the_paper_band(summary, tmp_path):
    got = F.component_shares({"tiny": summary, "tiny-again": summary}, [tmp_path / "shares.png"])
    assert (tmp_path / "shares.png").stat().st_size > 1000
    assert list(got) == ["tiny/rope", "tiny-again/rope"]
    comp = summary["exp_components"].sel(exp_condition="rope", exp_window="all")
    assert got["tiny/rope"].shape == (4, 3)
    for k, (lm, name, _) in enumerate(F.SHARE_READINGS):
        np.testing.assert_array_equal(
            got["tiny/rope"][k],
            comp.sel(exp_landmark=lm, component_full=name, stat=["estimate", "lo", "hi"]).values,
        )
    # paper 2's reading (key 0 counted, the ablation's log-attention) is the last, and each
    # plotted share is 1 − residual / total of its own reading
    assert F.SHARE_READINGS[-1][:2] == ("counted", "share_causal_mask_paper")
    e = comp.sel(stat="estimate")
    for k, (lm, name, _) in enumerate(F.SHARE_READINGS):
        res = "residual_stream_paper" if name.endswith("_paper") else "residual_stream"
        x = e.sel(exp_landmark=lm)
        want = 1 - float(x.sel(component_full=res)) / float(x.sel(component_full="total"))
        assert got["tiny/rope"][k, 0] == pytest.approx(want, rel=1e-9)
    assert F.PAPER2_SHARE == (0.64, 0.82)
    # no decomposition on the headline: a note, nothing plotted
    bare = summary.drop_vars([v for v in summary.data_vars if v.startswith("exp_")])
    assert F.component_shares({"bare": bare}, [tmp_path / "none.png"]) == {}
    assert (tmp_path / "none.png").stat().st_size > 1000


def test_head_maps_draw_the_headline_and_mark_bh_heads(summary, tmp_path):
    got = F.head_maps(summary, [tmp_path / "heads.png"], variants=("causal", FREE))
    assert (tmp_path / "heads.png").stat().st_size > 1000
    assert list(got) == [f"{v}/{t}" for t in ("logit", "logattn") for v in ("causal", FREE)]
    for key, m in got.items():
        v, t = key.split("/")
        sel = dict(variant=v, exp_window="all", target=t)
        np.testing.assert_array_equal(
            m["estimate"], summary["exp_head"].sel(**sel, stat="estimate").values
        )
        np.testing.assert_array_equal(m["marked"], summary["exp_q"].sel(**sel).values <= 0.05)
        assert m["estimate"].shape == (3, HEADS)
    # the leaky causal run's heads are marked, the position-free run's are not
    assert got["causal/logattn"]["marked"].all()
    assert not got[f"{FREE}/logattn"]["marked"].any()
    bare = summary.drop_vars([v for v in summary.data_vars if v.startswith("exp_")])
    per_prompt = F.head_maps(bare, [tmp_path / "bare.png"], alpha=0.5)
    assert list(per_prompt) == ["per_prompt/causal/logattn", "per_prompt/bidirectional/logattn"]
    np.testing.assert_array_equal(
        per_prompt["per_prompt/causal/logattn"]["estimate"],
        summary["leakage_head"].sel(variant="causal", target="logattn", stat="estimate"),
    )
    with pytest.raises(ValueError, match="none of the variants"):
        F.head_maps(summary, [tmp_path / "x.png"], variants=("nope",))


def test_position0_std(tmp_path):
    zero = P_position0.trajectory(np.ones((4, 3, 5)))
    rng = np.random.default_rng(0)
    pos = P_position0.trajectory(rng.normal(size=(4, 3, 5)))
    got = F.position0_std({"causal, BOS": zero, "varying token 0": pos}, [tmp_path / "p0.png"])
    np.testing.assert_array_equal(got["causal, BOS"], 0.0)
    np.testing.assert_array_equal(got["varying token 0"], pos["ratio"].values)
    assert (tmp_path / "p0.png").stat().st_size > 1000
