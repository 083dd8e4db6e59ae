"""The per-prompt reading's tables (paper2.tables.per_prompt): Table 6 under each RoPE
condition, missing runs reported, and their Markdown digest."""

from __future__ import annotations

import json

import numpy as np
import pytest

from causalpos import inference, stats
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as L_summary
from causalpos.paper2.tables import assemble as L_tables
from tests.paper2_leakage_maps import make_batches, run_reducer


def _excess(ds, target="logattn", window="all"):
    """Per-prompt floor-corrected leakage, prompts sorted, mean over layers and heads."""
    d = ds.sortby("sequence").sel(
        leak_fit="saturated+query", leak_window=window, leak_target=target
    )
    return (d["leak_delta"] - d["leak_null"]).values.mean((1, 2))


def test_decomposition_under_each_rope_control_and_missing_runs_reported():
    """Table 6: the decomposition under each RoPE condition (causal run and its bidirectional
    composition), the paired CI of the share differences, and conditions / BOS interventions
    whose runs are missing reported as not run (`identity_rope_bidirectional` used
    to be silently dropped)."""
    from causalpos.paper2.tables.markdown import paper2_markdown

    T = 10
    runs = {
        "causal": (0, {}),
        "bidirectional": (100, {"bidirectional": True}),
        "identity_rope": (200, {}),
        "identity_rope+bidirectional": (300, {"bidirectional": True}),
        "scrambled_rope": (400, {}),  # no bidirectional twin: the condition is not run
        "bos_replace_mean+bidirectional": (500, {"bidirectional": True}),
        "bos_replace_zeros": (600, {}),
        # its baseline scrambled_rope+bidirectional is missing: not run
        "scrambled_rope+bos_replace_mean+bidirectional": (700, {"bidirectional": True}),
    }
    stores = {
        v: run_reducer(make_batches(T=T, seed=seed, **kw), windows=("all", "early6", "late"))[0]
        for v, (seed, kw) in runs.items()
    }
    n_boot, seed = 300, 5
    summ = L_summary.leakage_summary(
        stores, LeakageSettings(n_boot=n_boot, n_perm=0, seed=seed, bos_windows=("early6", "late"))
    )
    assert list(summ["per_prompt_condition"].values) == ["rope", "identity_rope"]
    assert json.loads(summ.attrs["conditions_not_run"]) == {
        "scrambled_rope": ["scrambled_rope+bidirectional"]
    }
    counts = stats.bootstrap_counts(8, n_boot, seed)
    boot_share = {}
    for cond, (cv, bv) in (
        ("rope", ("causal", "bidirectional")),
        ("identity_rope", ("identity_rope", "identity_rope+bidirectional")),
    ):
        tot, res = _excess(stores[cv]), _excess(stores[bv])
        dec = summ["per_prompt_decomposition"].sel(per_prompt_condition=cond, stat="estimate")
        assert float(dec.sel(component="total")) == pytest.approx(tot.mean(), rel=1e-12)
        assert float(dec.sel(component="residual_stream")) == pytest.approx(res.mean(), rel=1e-12)
        # Eq. 5 under every control: causal mask = total - residual, exactly
        assert float(dec.sel(component="causal_mask")) == float(
            dec.sel(component="total") - dec.sel(component="residual_stream")
        )
        layer = summ["per_prompt_decomposition_layer"].sel(
            per_prompt_condition=cond, stat="estimate"
        )
        np.testing.assert_array_equal(
            layer.sel(component="causal_mask"),
            layer.sel(component="total") - layer.sel(component="residual_stream"),
        )
        bt, br = stats.bootstrap_means(tot, counts), stats.bootstrap_means(res, counts)
        boot_share[cond] = ((tot.mean() - res.mean()) / tot.mean(), (bt - br) / bt)
    # the paired difference: replicate-by-replicate on the same resampled prompts
    diff = summ["per_prompt_decomposition_difference"].sel(
        per_prompt_condition="identity_rope",
        per_prompt_condition_ref="rope",
        component="share_causal_mask",
    )
    (e_i, b_i), (e_r, b_r) = boot_share["identity_rope"], boot_share["rope"]
    lo, hi = inference.bounds(b_i - b_r, 0.95)
    np.testing.assert_allclose(diff.values, [e_i - e_r, lo, hi], rtol=1e-12)
    same = summ["per_prompt_decomposition_difference"].sel(
        per_prompt_condition="rope", per_prompt_condition_ref="rope"
    )
    assert (same.values == 0).all()

    # BOS interventions: each against the same run without the replacement
    pairs = json.loads(summ.attrs["bos"])
    assert pairs == {
        "mean+bidirectional": ["bos_replace_mean+bidirectional", "bidirectional", "logattn"],
        "zeros": ["bos_replace_zeros", "causal", "logit"],
    }
    assert json.loads(summ.attrs["bos_not_run"]) == {
        "scrambled_rope+mean+bidirectional": {
            "runs": [
                "scrambled_rope+bos_replace_mean+bidirectional",
                "scrambled_rope+bidirectional",
                "logattn",
            ],
            "missing": ["scrambled_rope+bidirectional"],
        }
    }
    ci_, cb_ = (
        _excess(stores["bos_replace_mean+bidirectional"], window="early6"),
        _excess(stores["bidirectional"], window="early6"),
    )
    eff = summ["per_prompt_bos_effect"].sel(intervention="mean+bidirectional", bos_window="early6")
    assert float(eff.sel(stat="estimate")) == pytest.approx(1 - ci_.mean() / cb_.mean(), rel=1e-12)
    # the causal runs' observational split excludes every bidirectional composition
    assert list(summ["causal_variant"].values) == [
        "causal",
        "identity_rope",
        "scrambled_rope",
        "bos_replace_zeros",
    ]

    # tables: every condition measured or reported not run, never dropped
    summ.attrs.update(fixed_bos=1, prefix_ids=[1], prepend_bos="true")
    tabs = L_tables.paper2_tables({("m", "d"): summ})
    rc = tabs["rope_controls"].set_index("condition")
    assert list(rc.index) == ["rope", "identity_rope", "scrambled_rope"]
    assert rc.loc["scrambled_rope", "status"] == "not run: no 'scrambled_rope+bidirectional' run"
    assert np.isnan(rc.loc["scrambled_rope", "share_causal_mask"])
    assert rc.loc["identity_rope", "share_causal_mask"] == float(
        summ["per_prompt_decomposition"].sel(
            per_prompt_condition="identity_rope", component="share_causal_mask", stat="estimate"
        )
    )
    assert rc.loc["identity_rope", "share_causal_mask_minus_rope"] == pytest.approx(
        e_i - e_r, rel=1e-12
    )
    assert rc.loc["identity_rope", "share_causal_mask_minus_rope_lo"] == pytest.approx(
        lo, rel=1e-12
    )
    assert (rc["fixed_bos"] == 1).all() and (rc["prefix_ids"] == "[1]").all()
    dec = tabs["per_prompt_decomposition"].set_index("condition")
    assert dec.loc["scrambled_rope", "status"].startswith("not run") and np.isnan(
        dec.loc["scrambled_rope", "total"]
    )
    assert dec.loc["rope", "status"] == "measured"
    bos = tabs["bos_effects"]
    mean = bos[(bos["intervention"] == "mean+bidirectional") & (bos["bos_window"] == "early6")]
    assert mean[["replacement", "measure", "status"]].values.tolist() == [
        ["mean", "residual_stream_paper", "measured"]
    ]
    assert set(bos.loc[bos["intervention"] == "zeros", "measure"]) == {"logit"}
    missing = bos[bos["status"] != "measured"]
    assert missing["intervention"].tolist() == ["scrambled_rope+mean+bidirectional"]
    md = paper2_markdown(tabs)
    assert "not run: no 'scrambled_rope+bidirectional' run" in md
