"""The headline reading in the summary (paper2.headline): the same numbers as the estimator, the
decomposition's identities, and both controls built into every (model, dataset)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_expected import content_maps

from causalpos.paper2 import expected as X
from causalpos.paper2 import headline as H
from causalpos.paper2 import inference
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
    xi = inference.rademacher(N, n_boot, seed + 1)  # the prompt set's calibrated draws
    for v, ds in runs.items():
        g, _ = X.store_grams(ds.sortby("sequence"), window="all", target="logit")
        r = X.estimate(g, multipliers=xi)
        got = summ["exp_model"].sel(variant=v, exp_window="all", target="logit")
        np.testing.assert_allclose(got.values, [r["pooled"], r["pooled_lo"], r["pooled_hi"]])
        np.testing.assert_allclose(
            summ["exp_p"].sel(variant=v, exp_window="all", target="logit").values, r["p"]
        )
    # the decomposition on the headline, in one unit (the causal run's expected log-attention
    # variance): the residual-stream component is the ablation's logit ΔSS over that denominator
    dec = summ["exp_decomposition"].sel(exp_condition="rope", exp_window="all", target="logattn")
    e = dec.sel(stat="estimate")
    est = {}
    for v, t in (("causal", "logattn"), ("bidirectional", "logit"), ("bidirectional", "logattn")):
        g, _ = X.store_grams(runs[v].sortby("sequence"), window="all", target=t)
        est[v, t] = X.estimate(g, multipliers=xi)
    den = est["causal", "logattn"]["pooled_den"].sum()
    assert float(e.sel(component="total")) == pytest.approx(est["causal", "logattn"]["pooled"])
    assert float(e.sel(component="residual")) == pytest.approx(
        est["bidirectional", "logit"]["pooled_num"].sum() / den
    )
    full = summ["exp_components"].sel(
        exp_condition="rope", exp_landmark="modelled", exp_window="all", stat="estimate"
    )
    assert float(full.sel(component_full="residual_stream_paper")) == pytest.approx(
        est["bidirectional", "logattn"]["pooled_num"].sum() / den
    )
    c = {k: float(full.sel(component_full=k)) for k in full["component_full"].values}
    assert c["total"] == pytest.approx(c["residual_stream"] + c["normaliser"] + c["remainder"])
    assert c["total"] == pytest.approx(c["logit"] + c["normaliser"] + c["cross"])
    # the position-free run's residual-stream reading, in the same unit, is ~0 and below the
    # leaky model's
    ctl = summ["exp_components"].sel(
        exp_condition="rope", exp_landmark="modelled", exp_window="all"
    )
    lo, hi = ctl.sel(component_full="control_residual_stream", stat=["lo", "hi"]).values
    assert lo <= 0 <= hi
    assert float(ctl.sel(component_full="residual_minus_control", stat="lo")) > 0
    assert float(e.sel(component="share_causal_mask")) == pytest.approx(
        float((e.sel(component="total") - e.sel(component="residual")) / e.sel(component="total"))
    )
    # negative control: the position-free run reads ~0 on the headline, and passes; the
    # per-prompt reading of the same run is far from 0 (content read as position)
    free = summ["exp_model"].sel(variant="identity_rope+bidirectional", target="logit")
    assert (free.sel(stat="lo") <= 0).all() or (np.abs(free.sel(stat="estimate")) <= 0.01).all()
    ctl = summ["exp_control"].sel(exp_landmark="modelled")
    assert (ctl.sel(variant="identity_rope+bidirectional") == 1).all()
    assert summ["exp_control"].sel(variant="causal").isnull().all()
    bound = summ["exp_control_bound"].sel(
        variant="identity_rope+bidirectional", exp_landmark="modelled", exp_window="all"
    )
    model = summ["exp_model"].sel(variant="causal", exp_window="all", stat="estimate")
    np.testing.assert_allclose(bound.values, H.EQUIVALENCE * model.values)
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
    # against itself in its own units it reads the model's own effect, above half of it
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


def _noise_store(prof, rng, causal=True, noise=0.3):
    """A store of maps = a shared (heads, T, T) profile + iid noise (no content)."""
    y = prof[None] + noise * rng.normal(size=(N, HEADS, T, T))
    return store(y, causal)


def test_linear_baseline_inflation_on_the_headline_control_and_planted():
    """Claim 6 on the headline: a relative profile linear in the offset is fitted by both
    baselines (inflation ≈ 0: the negative control); a curved one the linear baseline underfits,
    and the query effects absorb part of it: the inflation equals the exact expected-map value."""
    from test_expected import exact_rho

    rng = np.random.default_rng(5)
    i, j = np.indices((T, T))
    mask = X.window_pairs(np.tril(np.ones((T, T), bool)), "all")
    got = {}
    for name, prof in (("straight", 0.3 * (i - j)), ("curved", 2.0 * np.cos(0.9 * (i - j)))):
        prof = np.broadcast_to(prof, (HEADS, T, T)).astype(float)
        summ = S.leakage_summary(
            {"causal": _noise_store(prof, rng)}, n_boot=300, n_perm=0, bos_windows=("late",)
        )
        b = summ["exp_baseline"].sel(variant="causal", target="logit")
        got[name] = b
        exact = exact_rho(prof, mask, "linear+query")[1] - exact_rho(prof, mask)[1]
        d = b.sel(exp_fit="linear_minus_saturated")
        assert float(d.sel(stat="lo")) <= exact <= float(d.sel(stat="hi")), (name, exact, d.values)
        # the companion columns are the two readings and their paired difference
        sat, lin = (float(b.sel(exp_fit=k, stat="estimate")) for k in ("saturated", "linear"))
        assert float(d.sel(stat="estimate")) == pytest.approx(lin - sat)
        assert sat == pytest.approx(
            float(summ["exp_model"].sel(variant="causal", exp_window="all", target="logit")[0])
        )
    straight = got["straight"].sel(exp_fit="linear_minus_saturated")
    assert abs(float(straight.sel(stat="estimate"))) < 0.01
    curved = got["curved"].sel(exp_fit="linear_minus_saturated")
    assert float(curved.sel(stat="lo")) > H.CONTROL_TOL  # claim 6's size threshold


def _sink_store(y, causal, sink):
    ds = store(y, causal)
    att = np.broadcast_to(np.asarray(sink, float)[None, None], (N, 1, HEADS))
    return ds.assign(sink_attention=(("sequence", "layer", "head"), att.copy())).assign_coords(
        layer=ds["layer"].values
    )


def test_bos_effects_on_the_headline_keep_the_sinks():
    """Table 9 on the headline: a replacement that changes nothing reads 0 exactly (negative
    control), one that removes the whole query effect reads 1 (planted: the effect's known
    size); the sink-head reading pools the baseline's sink heads only (independent check)."""
    rng = np.random.default_rng(8)
    free, _ = content_maps(N, HEADS, T, rng)
    planted = 1.5 * np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
    planted[2] = 0.0  # head 2 carries no position
    leaky = free + planted[None, :, :, None]
    sink = [0.9, 0.1, 0.8]  # heads 0 and 2 are the baseline's sink heads
    runs = {
        "causal": _sink_store(leaky, True, sink),
        "bos_replace_mean": _sink_store(free, True, sink),  # every query effect gone
        "bos_replace_all_gaussian": _sink_store(leaky, True, sink),  # nothing changed
        "bidirectional": _sink_store(leaky, False, [0, 0, 0]),
        "bos_replace_mean+bidirectional": _sink_store(free, False, [0, 0, 0]),
    }
    from causalpos.paper2.bos import wanted_bos

    summ = S.leakage_summary(runs, n_boot=300, n_perm=0, bos_windows=("late",), n_flips=0)
    assert summ.attrs["exp_bos_target"] == "logattn"
    eff = summ["exp_bos_effect"].sel(exp_window="all")
    for reading in ("causal_total", "sink_heads"):  # nothing changed: 0 exactly
        same = eff.sel(bos_replacement="all_gaussian", bos_reading=reading)
        np.testing.assert_array_equal(same.values, [0.0, 0.0, 0.0])
    # no bidirectional all_gaussian pair: its residual-stream reading is not run (NaN)
    assert eff.sel(bos_replacement="all_gaussian", bos_reading="residual_stream").isnull().all()
    # logits, where the planted query effect lives (log-attention cancels a row constant):
    # removing all of it reads 1 in every reading
    ps = PromptSet.from_stores(runs, n_boot=300)
    _, pairs, _ = wanted_bos(ps)
    blk = H.expected_block(ps, conditions={}, bos_pairs=pairs, n_flips=0, bos_target="logit")
    eff = blk["exp_bos_effect"].sel(exp_window="all")
    for reading in ("causal_total", "sink_heads", "residual_stream"):
        e = eff.sel(bos_replacement="mean", bos_reading=reading)
        assert float(e.sel(stat="lo")) <= 1.0 <= float(e.sel(stat="hi")) + 0.02, (reading, e.values)
        assert float(e.sel(stat="estimate")) > 0.95
    # the sink-head reading equals the estimator pooled over heads 0 and 2 of each run
    sel = np.array([[True, False, True]])
    c = {}
    for v in ("causal", "bos_replace_mean"):
        g, _ = X.store_grams(runs[v].sortby("sequence"), window="all", target="logit")
        c[v] = X.pooled_subset(g, sel, ps.counts)
    e = eff.sel(bos_replacement="mean", bos_reading="sink_heads", stat="estimate")
    assert float(e) == pytest.approx(1.0 - c["bos_replace_mean"][0] / c["causal"][0])
    assert int(blk["exp_bos_sink_heads"].sel(bos_replacement="mean")) == 2
    full = blk["exp_model"].sel(variant="causal", exp_window="all", target="logit")[0]
    assert c["causal"][0] != pytest.approx(float(full))  # a subset, not all heads


def test_share_replicates_pair_models_on_the_same_prompts(runs):
    a = S.leakage_summary(runs, n_boot=200, n_perm=0, bos_windows=("late",), n_flips=0)
    b = S.leakage_summary(runs, n_boot=200, n_perm=0, bos_windows=("late",), n_flips=0, seed=1)
    assert a.attrs["exp_counts_digest"] != b.attrs["exp_counts_digest"]
    boot = a["exp_share_boot"].sel(exp_condition="rope", exp_window="all", target="logattn")
    dec = a["exp_decomposition"].sel(
        exp_condition="rope", exp_window="all", target="logattn", component="share_causal_mask"
    )
    lo, hi = np.quantile(boot.values.astype(float), [0.025, 0.975])
    assert lo == pytest.approx(float(dec.sel(stat="lo")), abs=1e-6)
    assert hi == pytest.approx(float(dec.sel(stat="hi")), abs=1e-6)


def test_scale_contrast_and_bos_headline_tables(runs):
    """The scale contrast pairs two models' share replicates: a model against an identical copy
    reads 0 exactly (negative control); against a model whose share is known to differ it reads
    the difference of the two decompositions; summaries drawn on other prompts are not paired."""
    from causalpos.paper2.tables import paper2_tables

    kw = dict(n_boot=200, n_perm=0, bos_windows=("late",), n_flips=0)
    a = S.leakage_summary(runs, **kw)
    other = dict(runs, bidirectional=runs["identity_rope+bidirectional"])  # residual ~0
    b = S.leakage_summary(other, **kw)
    c = S.leakage_summary(runs, **kw, seed=3)
    tabs = paper2_tables({("a", "d"): a, ("a_copy", "d"): a, ("b", "d"): b, ("c", "d"): c})
    sc = tabs["scale_contrast"]
    assert set(sc["reading"]) == {"expected-map"} and sc["paired"].all()
    assert not ({"c"} & (set(sc["model"]) | set(sc["model_b"])))  # other prompts: unpaired
    assert set(sc["target"]) == {"logattn"}  # the decomposition's one unit
    sel = sc.window == "all"
    same = sc[sel & (sc.model == "a") & (sc.model_b == "a_copy")].iloc[0]
    assert same["difference"] == 0 and same["difference_lo"] == 0 == same["difference_hi"]
    ab = sc[sel & (sc.model == "a") & (sc.model_b == "b")].iloc[0]
    share = lambda s: float(  # noqa: E731
        s["exp_decomposition"].sel(
            exp_condition="rope",
            exp_window="all",
            target="logattn",
            component="share_causal_mask",
            stat="estimate",
        )
    )
    assert ab["difference"] == pytest.approx(share(b) - share(a))
    assert ab["difference_lo"] <= ab["difference"] <= ab["difference_hi"]
    assert ab["difference_lo"] > 0  # removing the residual component raises the mask's share
    assert tabs["bos_headline"].empty  # these runs replace no BOS


def test_layer_local_vs_whole_forward_ablation_on_the_headline(runs):
    """Eq. 5's additivity: a layer-local run identical to the whole-forward one reads 0 exactly
    (negative control); one that keeps all of the causal run's position reads the difference of
    the two runs' own headlines (identity), resolved above 0."""
    kw = dict(n_boot=300, n_perm=0, bos_windows=("late",), n_flips=0)
    same = S.leakage_summary(dict(runs, layer_bidirectional=runs["bidirectional"]), **kw)
    d = same["exp_ablation"].sel(exp_window="all", target="logit", ablation="local_minus_whole")
    np.testing.assert_array_equal(d.values, [0.0, 0.0, 0.0])
    causal = runs["causal"]
    leaky = S.leakage_summary(dict(runs, layer_bidirectional=causal), **kw)
    # its maps are read without the mask: no observational split of a causal-mask map
    assert list(leaky["causal_variant"].values) == ["causal"]
    ab = leaky["exp_ablation"].sel(exp_window="all", target="logit")
    m = leaky["exp_model"].sel(exp_window="all", target="logit", stat="estimate")
    want = float(m.sel(variant="layer_bidirectional") - m.sel(variant="bidirectional"))
    got = ab.sel(ablation="local_minus_whole")
    assert float(got.sel(stat="estimate")) == pytest.approx(want)
    assert float(got.sel(stat="lo")) > 0
    per = leaky["exp_ablation_layer"].sel(exp_window="all", target="logit", layer=0)
    assert float(per.sel(ablation="local_minus_whole", stat="estimate")) == pytest.approx(
        want
    )  # one layer: the layer is the pool
    from causalpos.paper2.tables import paper2_tables

    head = paper2_tables({("m", "d"): leaky})["headline"]
    row = head[(head.variant == "layer_bidirectional") & (head.window == "all")]
    row = row[row.target == "logit"].iloc[0]
    assert row["local_minus_whole"] == pytest.approx(want)
    assert head[head.variant == "causal"]["local_minus_whole"].isna().all()
