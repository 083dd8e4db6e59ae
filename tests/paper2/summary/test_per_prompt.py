"""The per-prompt reading's summary blocks (paper2.summary.per_prompt): the decomposition's
shares, claim 6's baselines, claim 3's depth trend, the sink-head counts."""

from __future__ import annotations

import numpy as np
import pytest

import tests.leakage_fit_oracle as L_fit
from causalpos.paper2.extraction import design as L_design
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as L_summary
from causalpos.paper2.summary import per_prompt as L_per_prompt
from causalpos.paper2.tables import assemble as L_tables
from causalpos.paper2.tables.per_prompt import per_prompt_tables
from tests.paper2_leakage_maps import (
    F_REL,
    make_batches,
    projector_delta,
    relative_map,
    run_reducer,
)


def test_decomposition_recovers_planted_shares():
    # Targets built as relative + absolute parts with planted ΔR²: the residual-stream part r1 in
    # both runs, the causal-mask part r2 (orthogonal to r1 in the absolute subspace) only in the
    # causal run. Planted: total 0.10, residual 0.036 -> shares 36 % / 64 % (paper 2's 3B/8B split).
    T = 24
    m = L_design.pair_mask(T)
    i, j = np.nonzero(m)
    pd = projector_delta(m, "saturated+query")
    f = relative_map(T, F_REL)[m]
    f = f - f.mean()
    sst_f = f @ f
    r1 = pd @ np.sin(0.5 * i) / np.linalg.norm(pd @ np.sin(0.5 * i))
    w = pd @ (-np.log1p(i.astype(float)))
    r2 = w - (w @ r1) * r1
    r2 /= np.linalg.norm(r2)
    rho_tot, rho_res = 0.10, 0.036
    a2 = rho_res * sst_f / (1 - rho_res)
    b2 = rho_tot * sst_f / (1 - rho_tot) - a2

    def as_map(v):
        out = np.full((T, T), np.nan)
        out[m] = v
        out[0, 0] = 0.0  # row 0 is never measured
        return out

    y_b = as_map(f + np.sqrt(a2) * r1)
    y_c = as_map(f + np.sqrt(a2) * r1 + np.sqrt(b2) * r2)
    dec = L_per_prompt.per_prompt_components(
        L_fit.fit_leakage(y_c).delta, L_fit.fit_leakage(y_b).delta
    )
    assert float(dec["total"]) == pytest.approx(rho_tot, abs=1e-10)
    assert float(dec["residual_stream"]) == pytest.approx(rho_res, abs=1e-10)
    assert float(dec["share_residual_stream"]) == pytest.approx(0.36, abs=1e-9)
    assert float(dec["share_causal_mask"]) == pytest.approx(0.64, abs=1e-9)


def test_baseline_comparison_depth_trend_and_sink_count_tables():
    """Claim 6's linear-vs-saturated table, claim 3's depth trend and the sink-head count CI equal
    direct computations from the stores; the linear baseline inflates the leakage of logits
    whose offset profile is a cosine (synthetic_scores)."""
    fits = ("saturated+query", "linear+query")
    stores = {}
    for v, kw, seed in (("causal", {}, 0), ("bidirectional", {"bidirectional": True}, 100)):
        ds, _ = run_reducer(make_batches(T=10, seed=seed, **kw), fits=fits, windows=("all",))
        n_seq = ds.sizes["sequence"]
        rng = np.random.default_rng(seed)
        sink = rng.uniform(0.0, 1.0, (n_seq, ds.sizes["layer"], ds.sizes["head"]))
        sink[:, 0, 0] = 0.9  # one head always a sink at tau = 0.5
        ds["sink_attention"] = (("sequence", "layer", "head"), sink)
        stores[v] = ds
    summ = L_summary.leakage_summary(
        stores, LeakageSettings(n_boot=300, n_perm=0, seed=0, taus=(0.5,))
    )
    tabs = per_prompt_tables(summ)

    c = stores["causal"].sortby("sequence").sel(leak_window="all", leak_target="logit")
    raw = {f: c["leak_delta"].sel(leak_fit=f).values.mean((1, 2)) for f in fits}
    cor = {f: (c["leak_delta"] - c["leak_null"]).sel(leak_fit=f).values.mean((1, 2)) for f in fits}
    b = tabs["baseline_comparison"].set_index(["variant", "target", "baseline", "measure"])
    assert b.loc[("causal", "logit", "saturated", "raw"), "estimate"] == pytest.approx(
        raw["saturated+query"].mean(), rel=1e-12
    )
    assert b.loc[("causal", "logit", "linear", "corrected"), "estimate"] == pytest.approx(
        cor["linear+query"].mean(), rel=1e-12
    )
    d = b.loc[("causal", "logit", "linear_minus_saturated", "raw")]
    assert d["estimate"] == pytest.approx(
        (raw["linear+query"] - raw["saturated+query"]).mean(), rel=1e-12
    )
    assert d["lo"] > 0  # the inflation: a cosine offset profile the linear baseline underfits
    assert set(tabs["baseline_comparison"]["linear_fit"]) == {"linear+query"}

    # two layers: the slope per layer is the last minus the first layer
    t = tabs["depth_trend"].set_index(["variant", "target", "trend"])
    x = (
        stores["bidirectional"]
        .sortby("sequence")
        .sel(leak_fit="saturated+query", leak_window="all", leak_target="logattn")
    )
    xl = (x["leak_delta"] - x["leak_null"]).values.mean(2)
    for trend in ("slope", "last_minus_first"):
        r = t.loc[("bidirectional", "logattn", trend)]
        assert r["estimate"] == pytest.approx((xl[:, 1] - xl[:, 0]).mean(), rel=1e-12)
        assert r["lo"] <= r["estimate"] <= r["hi"]

    sk = tabs["sink_heads"].set_index("variant")
    for v, ds in stores.items():
        n = int((ds["sink_attention"].mean("sequence").values >= 0.5).sum())
        assert sk.loc[v, "n_sink_heads"] == n
        assert sk.loc[v, "n_sink_heads_lo"] <= n <= sk.loc[v, "n_sink_heads_hi"]
        assert sk.loc[v, "n_sink_heads_lo"] >= 1  # the planted head counts in every replicate
        assert sk.loc[v, "n_heads"] == 4

    # paper2_tables carries the model's positional type and twin from the summary's attrs
    summ.attrs.update(positional="swa", init_of="")
    agg = L_tables.paper2_tables({("trained-swa", "d"): summ})
    assert set(agg["depth_trend"]["positional"]) == {"swa"}
    assert set(agg["sink_heads"]["init_of"]) == {""}
    assert set(agg["per_prompt_decomposition"]["positional"]) == {"swa"}
