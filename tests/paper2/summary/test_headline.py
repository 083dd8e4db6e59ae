"""The headline reading in the summary (paper2.summary.headline): the same numbers as the
estimator, both controls built into every (model, dataset), claim 6's baselines, the ablation."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos import verdicts as V
from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import storeview as SV
from causalpos.paper2.estimator.grams import GramCache
from causalpos.paper2.estimator.replicates import rademacher
from causalpos.paper2.prompts import PromptSet
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as S
from causalpos.paper2.summary import headline as H
from causalpos.paper2.summary.planted import planted_truth
from tests.paper2_headline_runs import HEADS, N, T, headline_runs, store


def _noise_store(prof, rng, causal=True, noise=0.3):
    """A store of maps = a shared (heads, T, T) profile + iid noise (no content)."""
    y = prof[None] + noise * rng.normal(size=(N, HEADS, T, T))
    return store(y, causal)


@pytest.fixture(scope="module")
def runs():
    return headline_runs()


def test_position_free_runs():
    assert H.position_free("identity_rope+bidirectional")
    assert H.position_free("bidirectional", "nope")
    assert H.position_free("bos_replace_mean+bidirectional", "nope")
    assert not H.position_free("bidirectional")  # RoPE
    assert not H.position_free("identity_rope")  # the causal mask carries position
    assert not H.position_free("causal", "nope")
    assert not H.position_free("identity_rope+bidirectional", "swa")  # the window does
    assert not H.position_free("scrambled_rope+bidirectional")
    # a window shorter than the sequence keeps edges in paper 2's ablation, not on the ring
    assert not H.position_free("identity_rope+bidirectional", windowed=True)
    assert H.position_free("identity_rope+ring", windowed=True)
    assert H.position_free("identity_rope+ring", "swa")
    assert not H.position_free("ring")  # RoPE


def test_summary_headline_equals_the_estimator_and_the_controls_hold(runs):
    n_boot, seed = 400, 2
    summ = S.leakage_summary(
        runs,
        LeakageSettings(
            n_boot=n_boot,
            n_perm=0,
            seed=seed,
            bos_windows=("late",),
            planted=0.2,
            # this design's margin (24 prompts of T = 12), declared here, before the run
            control_margin_logit=0.05,
            control_margin_logattn=0.05,
        ),
        position_free_runs=["identity_rope+bidirectional"],
    )
    xi = rademacher(N, n_boot, seed + 1)  # the prompt set's calibrated draws
    for v, ds in runs.items():
        g, _ = SV.store_grams(ds.sortby("sequence"), window="all", target="logit")
        r = X.estimate(g, xi)
        got = summ["leakage_model"].sel(variant=v, window="all", target="logit")
        np.testing.assert_allclose(got.values, [r["pooled"], r["pooled_lo"], r["pooled_hi"]])
        np.testing.assert_allclose(
            summ["p_value"].sel(variant=v, window="all", target="logit").values, r["p"]
        )
    # the decomposition on the headline, in one unit (the causal run's expected log-attention
    # variance): the residual-stream component is the ablation's logit ΔSS over that denominator
    dec = summ["decomposition"].sel(condition="rope", window="all", target="logattn")
    e = dec.sel(stat="estimate")
    est = {}
    for v, t in (
        ("causal", "logattn"),
        ("ring", "logit"),
        ("bidirectional", "logit"),
        ("bidirectional", "logattn"),
    ):
        g, _ = SV.store_grams(runs[v].sortby("sequence"), window="all", target=t)
        est[v, t] = X.estimate(g, xi)
    den = est["causal", "logattn"]["pooled_den"].sum()
    assert float(e.sel(component="total")) == pytest.approx(est["causal", "logattn"]["pooled"])
    assert float(e.sel(component="residual_stream")) == pytest.approx(
        est["ring", "logit"]["pooled_num"].sum() / den
    )
    full = summ["components"].sel(
        condition="rope", landmark="modelled", window="all", stat="estimate"
    )
    assert float(full.sel(component_full="residual_stream_paper")) == pytest.approx(
        est["bidirectional", "logattn"]["pooled_num"].sum() / den
    )
    c = {k: float(full.sel(component_full=k)) for k in full["component_full"].values}
    assert c["edge_position"] == 0.0  # the ring's and the bidirectional run's maps are equal
    assert c["residual_stream_bidirectional"] == c["residual_stream"]
    assert c["total"] == pytest.approx(c["residual_stream"] + c["normaliser"] + c["remainder"])
    assert c["total"] == pytest.approx(c["logit"] + c["normaliser"] + c["cross"])
    # the position-free run's residual-stream reading, in the same unit, is ~0 and below the
    # leaky model's
    ctl = summ["components"].sel(condition="rope", landmark="modelled", window="all")
    lo, hi = ctl.sel(component_full="control_residual_stream", stat=["lo", "hi"]).values
    assert lo <= 0 <= hi
    assert float(ctl.sel(component_full="residual_minus_control", stat="lo")) > 0
    assert float(e.sel(component="share_causal_mask")) == pytest.approx(
        float(
            (e.sel(component="total") - e.sel(component="residual_stream"))
            / e.sel(component="total")
        )
    )
    # negative control: the position-free run reads ~0 on the headline, and passes; the
    # per-prompt reading of the same run is far from 0 (content read as position)
    free = summ["leakage_model"].sel(variant="identity_rope+bidirectional", target="logit")
    assert (free.sel(stat="lo") <= 0).all() or (np.abs(free.sel(stat="estimate")) <= 0.01).all()
    _controls_reach_their_outcomes(summ)
    per_prompt = summ["per_prompt_leakage_model"].sel(
        variant="identity_rope+bidirectional", target="logit"
    )
    assert float(per_prompt.sel(stat="lo")) > 0.05
    # the leaky causal run is far from 0 on the headline
    assert (
        float(summ["leakage_model"].sel(variant="causal", window="all", target="logit", stat="lo"))
        > 0.1
    )
    # positive control: the planted size, in the model's units (the causal run's D̂), is
    # recovered within the CI, which excludes 0
    pl = summ["leakage_planted"].sel(variant="identity_rope+bidirectional")
    for t in ("logit", "logattn"):
        planted, est, lo, hi = pl.sel(target=t).values
        assert planted == 0.2
        assert 0 < lo <= planted <= hi, (t, planted, est, lo, hi)
    assert summ.attrs["position_free_runs"] == ["identity_rope+bidirectional"]


def test_planted_control_in_the_models_units(runs):
    """The statistics-level plant is sized in the causal run's units: its numerator is exactly
    size × the causal D̂ (the exact ΔSS of the planted term, computed densely here); on a run
    that carries position itself (the causal run) the reading adds the run's own and misses the
    planted size; without a causal run there is no unit (NaN)."""
    ps = PromptSet.from_stores(runs, LeakageSettings(n_boot=200))
    cache = GramCache(ps)
    free = "identity_rope+bidirectional"
    got = H.planted_control(cache, free, "all", "logit", 0.05)
    assert got[0] == 0.05 and 0 < got[2] <= 0.05 <= got[3]
    # the size: a from the planted term's exact ΔSS (planted.planted_truth's closed form, per
    # map), so that N(b) = 0.05 D̂; N̂ is quadratic, so N(y + b) + N(y − b) − 2 N(y) = 2 N(b)
    ds = cache.data(free)
    d0 = float(cache.denominator("causal", "all", "logit", "pooled")[0])
    unit = H.planted_profile(T)
    masks = SV.store_masks(ds, "all", "logit").values()
    pdb = HEADS * sum(planted_truth(unit, m) for m in masks)
    a = np.sqrt(0.05 * d0 / pdb)

    def n_hat(b):
        g, _ = SV.store_grams(ds, window="all", target="logit", plant=b)
        return float(cache.numerator(g["num"].sum((0, 1)))[0])

    assert got[1] == pytest.approx(n_hat(a * unit) / d0, rel=1e-12)
    quad = (n_hat(a * unit) + n_hat(-a * unit) - 2 * n_hat(0 * unit)) / 2 / d0
    assert quad == pytest.approx(0.05, rel=1e-9)
    leaky = H.planted_control(cache, "causal", "all", "logit", 0.05)
    assert leaky[2] > 0.05 + 0.05  # the causal run's own position adds to the plant
    alone = PromptSet.from_stores({free: runs[free]}, LeakageSettings(n_boot=50))
    assert np.isnan(H.planted_control(GramCache(alone), free, "all", "logit", 0.05)).all()


def _controls_reach_their_outcomes(summ):
    """The negative control's (1 − 2α) interval in the model's units, from the same replicates
    as its CI (nested in it), judged against the declared margin: the modelled reading passes;
    the counted one reads the fixed BOS's key-0 column as position (log-attention, all queries:
    why the counted reading needs prompts whose token 0 varies) or is underpowered (logits, late
    queries); the causal run is no control (NaN)."""
    free = dict(variant="identity_rope+bidirectional")
    tost, units = summ["control_tost"].sel(**free), summ["control_units"].sel(**free)
    np.testing.assert_array_equal(tost.sel(stat="estimate"), units.sel(stat="estimate"))
    assert (tost.sel(stat="lo") >= units.sel(stat="lo")).all()
    assert (tost.sel(stat="hi") <= units.sel(stat="hi")).all()
    assert summ.attrs["control_alpha"] == 0.05
    assert summ["control_margin"].to_series().to_dict() == {"logit": 0.05, "logattn": 0.05}

    def verdict(lm, w, t):
        lo, hi = tost.sel(landmark=lm, window=w, target=t, stat=["lo", "hi"]).values
        return V.negative_control((lo, hi), float(summ["control_margin"].sel(target=t)))

    for w in ("all", "late"):
        for t in ("logit", "logattn"):
            assert verdict("modelled", w, t) == V.PASSED, (w, t)
    assert verdict("counted", "all", "logattn") == V.READS_POSITION
    assert verdict("counted", "late", "logit") == V.UNDERPOWERED
    assert summ["control_tost"].sel(variant="causal").isnull().all()


def test_planted_profile_and_size_checked(runs):
    cache = GramCache(PromptSet.from_stores(runs, LeakageSettings(n_boot=50)))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        H.planted_control(cache, "identity_rope+bidirectional", "all", "logit", 1.5)
    p = H.planted_profile(5)
    assert p[0] == 0 and np.allclose(p[1:], np.log([1, 2, 3, 4]))


def test_linear_baseline_inflation_on_the_headline_control_and_planted():
    """Claim 6 on the headline: a relative profile linear in the offset is fitted by both
    baselines (inflation ≈ 0: the negative control); a curved one the linear baseline underfits,
    and the query effects absorb part of it: the inflation equals the exact expected-map value."""
    from tests.paper2.estimator.test_expected import exact_rho

    rng = np.random.default_rng(5)
    i, j = np.indices((T, T))
    mask = SV.window_pairs(np.tril(np.ones((T, T), bool)), "all")
    got = {}
    for name, prof in (("straight", 0.3 * (i - j)), ("curved", 2.0 * np.cos(0.9 * (i - j)))):
        prof = np.broadcast_to(prof, (HEADS, T, T)).astype(float)
        summ = S.leakage_summary(
            {"causal": _noise_store(prof, rng)},
            LeakageSettings(n_boot=300, n_perm=0, bos_windows=("late",)),
        )
        b = summ["baseline_leakage"].sel(variant="causal", target="logit")
        got[name] = b
        exact = exact_rho(prof, mask, "linear+query")[1] - exact_rho(prof, mask)[1]
        d = b.sel(fit="linear_minus_saturated")
        assert float(d.sel(stat="lo")) <= exact <= float(d.sel(stat="hi")), (name, exact, d.values)
        # the companion columns are the two readings and their paired difference
        sat, lin = (float(b.sel(fit=k, stat="estimate")) for k in ("saturated", "linear"))
        assert float(d.sel(stat="estimate")) == pytest.approx(lin - sat)
        assert sat == pytest.approx(
            float(summ["leakage_model"].sel(variant="causal", window="all", target="logit")[0])
        )
    straight = got["straight"].sel(fit="linear_minus_saturated")
    assert abs(float(straight.sel(stat="estimate"))) < 0.01
    curved = got["curved"].sel(fit="linear_minus_saturated")
    assert float(curved.sel(stat="lo")) > H.CONTROL_TOL  # claim 6's size threshold


def test_share_replicates_pair_models_on_the_same_prompts(runs):
    a = S.leakage_summary(runs, LeakageSettings(n_boot=200, n_perm=0, bos_windows=("late",)))
    b = S.leakage_summary(
        runs, LeakageSettings(n_boot=200, n_perm=0, bos_windows=("late",), seed=1)
    )
    assert a.attrs["counts_digest"] != b.attrs["counts_digest"]
    boot = a["share_boot"].sel(condition="rope", window="all", target="logattn")
    dec = a["decomposition"].sel(
        condition="rope", window="all", target="logattn", component="share_causal_mask"
    )
    lo, hi = np.quantile(boot.values.astype(float), [0.025, 0.975])
    assert lo == pytest.approx(float(dec.sel(stat="lo")), abs=1e-6)
    assert hi == pytest.approx(float(dec.sel(stat="hi")), abs=1e-6)


def test_headline_replicates_are_the_headline_interval_and_float32(runs):
    """``leakage_model_boot``: the headline logit leakage's replicates on the first window, every
    run, float32: their percentile interval is the headline's own interval (to float32), so two
    summaries on the same resampled prompts pair (causalpos.paper2.tables.twins)."""
    a = S.leakage_summary(runs, LeakageSettings(n_boot=200, n_perm=0, bos_windows=("late",)))
    boot = a["leakage_model_boot"]
    assert boot.dims == ("variant", "replicate") and boot.dtype == np.float32
    assert boot.sizes["replicate"] == 200
    for v in a["variant"].values:
        first = str(a["window"].values[0])
        head = a["leakage_model"].sel(variant=v, window=first, target="logit")
        lo, hi = np.quantile(boot.sel(variant=v).values.astype(float), [0.025, 0.975])
        assert lo == pytest.approx(float(head.sel(stat="lo")), rel=1e-5, abs=1e-7)
        assert hi == pytest.approx(float(head.sel(stat="hi")), rel=1e-5, abs=1e-7)


def test_layer_local_vs_whole_forward_ablation_on_the_headline(runs):
    """Eq. 5's additivity: a layer-local run identical to the whole-forward one reads 0 exactly
    (negative control); one that keeps all of the causal run's position reads the difference of
    the two runs' own headlines (identity), resolved above 0."""
    kw = dict(n_boot=300, n_perm=0, bos_windows=("late",))
    same = S.leakage_summary(
        dict(runs, layer_bidirectional=runs["bidirectional"]), LeakageSettings(**kw)
    )
    d = same["leakage_ablation"].sel(window="all", target="logit", ablation="local_minus_whole")
    np.testing.assert_array_equal(d.values, [0.0, 0.0, 0.0])
    causal = runs["causal"]
    leaky = S.leakage_summary(dict(runs, layer_bidirectional=causal), LeakageSettings(**kw))
    # its maps are read without the mask: no observational split of a causal-mask map
    assert list(leaky["causal_variant"].values) == ["causal"]
    ab = leaky["leakage_ablation"].sel(window="all", target="logit")
    m = leaky["leakage_model"].sel(window="all", target="logit", stat="estimate")
    want = float(m.sel(variant="layer_bidirectional") - m.sel(variant="bidirectional"))
    got = ab.sel(ablation="local_minus_whole")
    assert float(got.sel(stat="estimate")) == pytest.approx(want)
    assert float(got.sel(stat="lo")) > 0
    per = leaky["leakage_ablation_layer"].sel(window="all", target="logit", layer=0)
    assert float(per.sel(ablation="local_minus_whole", stat="estimate")) == pytest.approx(
        want
    )  # one layer: the layer is the pool
    from causalpos.paper2.tables.assemble import paper2_tables

    head = paper2_tables({("m", "d"): leaky})["headline"]
    row = head[(head.variant == "layer_bidirectional") & (head.window == "all")]
    row = row[row.target == "logit"].iloc[0]
    assert row["local_minus_whole"] == pytest.approx(want)
    assert head[head.variant == "causal"]["local_minus_whole"].isna().all()
