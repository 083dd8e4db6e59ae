"""The headline reading in the summary (paper2.headline): the same numbers as the estimator, the
decomposition's identities, and both controls built into every (model, dataset)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_expected import content_maps

from causalpos import stats
from causalpos.paper2 import expected as X
from causalpos.paper2 import headline as H
from causalpos.paper2 import reducers as R
from causalpos.paper2 import summary as S
from causalpos.paper2.prompts import PromptSet

T, HEADS, N = 12, 3, 24
KW = dict(fits=("saturated+query",), windows=("all", "late"), expected_stats=["all", "late"])


def store(y, causal: bool):
    """A leakage store of maps y (n, heads, T, T): one layer, causal (NaN above the diagonal) or
    bidirectional."""
    y = np.array(y, dtype=np.float64)
    if causal:
        y = np.where(np.tril(np.ones((T, T), bool)), y, np.nan)
    red = R.LeakageReducer(**KW)
    red.update(0, torch.tensor(y, dtype=torch.float32), np.arange(y.shape[0]))
    return red.result()


@pytest.fixture(scope="module")
def runs():
    rng = np.random.default_rng(11)
    free, _ = content_maps(N, HEADS, T, rng)  # position-free content, fixed BOS
    planted = 1.5 * np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
    leaky, _ = content_maps(N, HEADS, T, rng, planted=planted)
    return {
        "causal": store(leaky, True),
        "bidirectional": store(free + 0.5 * (leaky - free).mean(0), False),
        "identity_rope+bidirectional": store(free, False),
    }


def test_position_free_runs():
    assert H.position_free("identity_rope+bidirectional")
    assert H.position_free("bidirectional", "nope")
    assert H.position_free("bos_replace_mean+bidirectional", "nope")
    assert not H.position_free("bidirectional")  # RoPE
    assert not H.position_free("identity_rope")  # the causal mask carries position
    assert not H.position_free("causal", "nope")
    assert not H.position_free("identity_rope+bidirectional", "swa")  # the window does
    assert not H.position_free("scrambled_rope+bidirectional")


def test_planting_in_the_statistics_equals_planting_in_the_maps():
    rng = np.random.default_rng(3)
    y, _ = content_maps(6, 2, T, rng)
    mask = X.window_pairs(np.tril(np.ones((T, T), bool)), "all")
    b = rng.normal(size=T)
    got = X.plant_query_effect(X.stats_from_maps(y, mask), mask, b)
    want = X.stats_from_maps(y + b[None, None, :, None], mask)
    d = X.build_design(mask, "saturated+query", landmark=True)
    g_got, g_want = X.prompt_grams(got, d), X.prompt_grams(want, d)
    for k in g_want:  # the Grams are invariant to the sums' per-map centring constant
        np.testing.assert_allclose(g_got[k], g_want[k], rtol=1e-9, atol=1e-8)
    with pytest.raises(ValueError, match="shape"):
        X.plant_query_effect(got, mask, b[:-1])


def test_summary_headline_equals_the_estimator_and_the_controls_hold(runs):
    n_boot, seed = 400, 2
    summ = S.leakage_summary(
        runs,
        n_boot=n_boot,
        n_perm=0,
        seed=seed,
        bos_windows=("late",),
        position_free_runs=["identity_rope+bidirectional"],
        planted=0.2,
        n_flips=500,
    )
    counts = stats.bootstrap_counts(N, n_boot, seed)
    for v, ds in runs.items():
        g, _ = X.store_grams(ds.sortby("sequence"), window="all", target="logit")
        r = X.estimate(g, counts=counts, n_flips=500, seed=seed)
        got = summ["exp_model"].sel(variant=v, exp_window="all", target="logit")
        np.testing.assert_allclose(got.values, [r["pooled"], r["pooled_lo"], r["pooled_hi"]])
        np.testing.assert_allclose(
            summ["exp_p"].sel(variant=v, exp_window="all", target="logit").values, r["p"]
        )
    # the decomposition on the headline: Eq. 5 exactly, shares of the total
    dec = summ["exp_decomposition"].sel(exp_condition="rope", exp_window="all", target="logattn")
    e = dec.sel(stat="estimate")
    tot = summ["exp_model"].sel(variant="causal", exp_window="all", target="logattn")
    res = summ["exp_model"].sel(variant="bidirectional", exp_window="all", target="logattn")
    assert float(e.sel(component="total")) == float(tot.sel(stat="estimate"))
    assert float(e.sel(component="residual")) == float(res.sel(stat="estimate"))
    assert float(e.sel(component="share_causal_mask")) == pytest.approx(
        float((e.sel(component="total") - e.sel(component="residual")) / e.sel(component="total"))
    )
    # negative control: the position-free run reads ~0 on the headline, and passes; the
    # per-prompt reading of the same run is far from 0 (content read as position)
    free = summ["exp_model"].sel(variant="identity_rope+bidirectional", target="logit")
    assert (free.sel(stat="lo") <= 0).all() or (np.abs(free.sel(stat="estimate")) <= 0.01).all()
    assert (summ["exp_control"].sel(variant="identity_rope+bidirectional") == 1).all()
    assert summ["exp_control"].sel(variant="causal").isnull().all()
    per_prompt = summ["leakage_model"].sel(variant="identity_rope+bidirectional", target="logit")
    assert float(per_prompt.sel(stat="lo")) > 0.05
    # the leaky causal run is far from 0 on the headline
    assert (
        float(summ["exp_model"].sel(variant="causal", exp_window="all", target="logit", stat="lo"))
        > 0.1
    )
    # positive control: the planted share is recovered within the CI
    pl = summ["exp_planted"].sel(variant="identity_rope+bidirectional")
    for t in ("logit", "logattn"):
        planted, est, lo, hi = pl.sel(target=t).values
        assert planted == pytest.approx(0.2, abs=0.05)
        assert lo <= planted <= hi, (t, planted, est, lo, hi)
    assert summ.attrs["position_free_runs"] == ["identity_rope+bidirectional"]


def test_a_control_that_leaks_fails_and_no_statistics_means_no_headline(runs):
    leaky = dict(runs)
    summ = S.leakage_summary(
        leaky,
        n_boot=200,
        n_perm=0,
        bos_windows=("late",),
        position_free_runs=["causal"],
        planted=0.2,
        n_flips=100,
    )
    # the causal run carries a planted position effect: as a "control" it fails
    assert (summ["exp_control"].sel(variant="causal", target="logit") == 0).all()
    bare = {
        v: ds.drop_vars(["leak_offsum", "leak_key0sum", "leak_rowsum"]) for v, ds in runs.items()
    }
    summ = S.leakage_summary(bare, n_boot=50, n_perm=0, bos_windows=("late",))
    assert not any(k.startswith("exp_") for k in summ.data_vars)


def test_planted_profile_and_size_checked(runs):
    ps = PromptSet.from_stores(runs, n_boot=50)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        H.planted_control(
            runs["causal"], ps.counts, window="all", target="logit", size=1.5, level=0.95
        )
    p = H.planted_profile(5)
    assert p[0] == 0 and np.allclose(p[1:], np.log([1, 2, 3, 4]))


def test_tables_carry_the_reading_and_the_controls(runs):
    from causalpos.paper2.tables import paper2_tables

    summ = S.leakage_summary(
        runs,
        n_boot=200,
        n_perm=0,
        bos_windows=("late",),
        position_free_runs=["identity_rope+bidirectional"],
        planted=0.2,
        n_flips=100,
    )
    tabs = paper2_tables({("m", "d"): summ})
    head = tabs["headline"]
    assert set(head["reading"]) == {"expected-map"}
    assert len(head) == 3 * 2 * 2  # variant x window x target
    row = head[(head.variant == "causal") & (head.window == "all") & (head.target == "logit")]
    assert float(row["leakage"].iloc[0]) == float(
        summ["exp_model"].sel(variant="causal", exp_window="all", target="logit", stat="estimate")
    )
    assert float(row["per_prompt"].iloc[0]) == float(
        summ["leakage_model"].sel(variant="causal", target="logit", stat="estimate")
    )
    ctl = tabs["controls"]
    assert list(ctl["variant"].unique()) == ["identity_rope+bidirectional"]
    assert set(ctl["negative_control"]) == {"passed"}
    assert set(ctl[ctl.target == "logit"]["per_prompt_control"]) == {"failed"}
    assert set(ctl["positive_control"]) == {"recovered"}
    dec = tabs["decomposition_headline"]
    assert set(dec["condition"]) == {"rope"} and set(dec["reading"]) == {"expected-map"}
    from causalpos.paper2.markdown import paper2_markdown

    md = paper2_markdown(tabs)
    assert "Headline (expected-map reading)" in md and "Controls: position-free runs" in md
    controls = md.split("## Controls:")[1].split("\n## ")[0]
    assert "recovered" in controls and "–" not in controls


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
        data_store=tmp_path / "data.zarr",
        n_boot=100,
        n_perm=0,
        bos_windows=("late",),
        n_flips=50,
    )
    free = out["exp_position_free"].sel(variant="identity_rope+bidirectional")
    if mode == "chunks":
        assert bool(free) and out.attrs["controls_note"] == ""
        assert out["exp_control"].sel(variant="identity_rope+bidirectional").notnull().all()
    else:
        assert not bool(free) and "mode 'first'" in out.attrs["controls_note"]
        assert out["exp_control"].isnull().all()
