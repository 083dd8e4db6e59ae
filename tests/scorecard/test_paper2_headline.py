"""Paper 2's rows on the headline reading (causalpos.scorecard.paper2_headline): claim 1 against
its declared threshold, the controls (three outcomes against a declared margin; plants recovered
or not), claims 2, 3 and 6, the additivity rows; claim 1 beside its random-init / init twin."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causalpos import scorecard as S
from causalpos import verdicts as V
from tests.scorecard_tables import D, I, R, _card, _lead, _one


def _headline_rows(model: str, logits: np.ndarray, *, free: bool = False) -> pd.DataFrame:
    """headline rows of synthetic logit maps (prompt, T, T), through the real estimator (the
    reducer's per-prompt sums, the expected-map U-statistic, a bootstrap CI over prompts)."""
    import torch

    from causalpos.paper2.extraction.reducers import LeakageReducer
    from tests.expected_oracle import expected_leakage

    red = LeakageReducer(fits=("saturated+query",), windows=("all",), expected_stats=True)
    red.update(0, torch.tensor(logits[:, None], dtype=torch.float32), np.arange(len(logits)))
    est = expected_leakage(red.result(), target="logit", n_boot=500)
    return pd.DataFrame(
        [
            {"model": model, "dataset": "d", "variant": "causal", "window": "all"}
            | {"target": "logit", "reading": "expected-map", "position_free": free}
            | {k: float(est[f"exp_pooled{s}"]) for k, s in (("leakage", ""),)}
            | {"leakage_lo": float(est["exp_pooled_lo"]), "leakage_hi": float(est["exp_pooled_hi"])}
            | {"per_prompt": np.nan, "per_prompt_lo": np.nan, "per_prompt_hi": np.nan}
        ]
    )


def _ctl(variant, neg, planted=0.1, rec=(0.1, 0.08, 0.12), pp=(0.4, 0.3, 0.5), units=None):
    """A controls-table row; ``units``: {landmark: (est, lo, hi, tost_lo, tost_hi, margin)} in
    the model's units."""
    row = {"model": "m", "dataset": "d", "variant": variant, "target": "logit"} | {
        "negative": neg[0],
        "negative_lo": neg[1],
        "negative_hi": neg[2],
        "per_prompt": pp[0],
        "per_prompt_lo": pp[1],
        "per_prompt_hi": pp[2],
        "per_prompt_margin": 0.01,  # the per-prompt reading's interval reads position
        "planted": planted,
        "planted_estimate": rec[0],
        "planted_estimate_lo": rec[1],
        "planted_estimate_hi": rec[2],
        "negative_tost_level": 0.9,
    }
    for lm, (est, lo, hi, tlo, thi, m) in (units or {}).items():
        p = f"negative_{lm}_"
        row |= {f"{p}model_units": est, f"{p}model_units_lo": lo, f"{p}model_units_hi": hi}
        row |= {f"{p}tost_lo": tlo, f"{p}tost_hi": thi, f"{p}margin": m}
    return row


def test_claim1_is_judged_against_the_declared_threshold(tmp_path):
    T, n = 48, 24
    rng = np.random.default_rng(0)
    i, j = np.indices((T, T))
    causal = j <= i
    toeplitz = np.cos(0.3 * (i - j)) + 0.05 * (i - j) + 0.3 * rng.standard_normal((n, T, T))
    noise = rng.standard_normal((n, T, T))  # i.i.d. logits: no position at all
    absolute = noise + np.log1p(i) / 2  # a query-position effect
    control = rng.standard_normal((n, T, T)) + 2.0 * (i == j)  # position-free content
    mask = lambda y: np.where(causal, y, np.nan)  # noqa: E731
    table = pd.concat(
        [
            _headline_rows("toeplitz", mask(toeplitz)),
            _headline_rows("noise", mask(noise)),
            _headline_rows("absolute", mask(absolute)),
            _headline_rows("ctl", mask(control), free=True).assign(
                variant="identity_rope+bidirectional"
            ),
        ]
    )
    card = _card(tmp_path, headline=table)
    assert _one(card, "claim 1 (toeplitz, d)")["verdict"] == D
    # i.i.d. logits: the expected map is flat, its ΔR² a ratio of two noises; never reproduced
    assert _one(card, "claim 1 (noise, d)")["verdict"] == I
    row = _one(card, "claim 1 (absolute, d)")
    assert row["verdict"] == R and row["reading"] == "expected-map"
    assert "no negative control of this model" in row["measured"]
    assert row["falsified_if"].endswith("at or below 0.002")
    # the threshold is the config's, the same for every model: above the effect, it differs
    lo = float(table.loc[table["model"] == "absolute", "leakage_lo"].iloc[0])
    hi = float(table.loc[table["model"] == "absolute", "leakage_hi"].iloc[0])
    for tau, verdict in ((hi, D), (0.5 * (lo + hi), I), (0.5 * lo, R)):
        big = _card(tmp_path, materiality={"claim1_logit": tau}, headline=table)
        assert _one(big, "claim 1 (absolute, d)")["verdict"] == verdict, tau
    # document openings carry position in their content: the claim needs chunks, not run
    first = _one(_card(tmp_path, headline=table.assign(data_mode="first")), "claim 1 (absolute, d)")
    assert first["verdict"] == S.NOT_RUN and "document openings" in first["note"]
    chunks = table.assign(data_mode="chunks")
    assert _one(_card(tmp_path, headline=chunks), "claim 1 (absolute, d)")["verdict"] == R
    # a twin is a baseline
    twin = table.assign(init_of=np.where(table["model"] == "absolute", "trained-x", ""))
    assert _one(_card(tmp_path, headline=twin), "claim 1 (absolute, d)")["verdict"] == S.MEASURED
    # a NoPE model: the claim is about RoPE decoders, not applicable (it stays in paper 2)
    nope = table.assign(positional=np.where(table["model"] == "absolute", "nope", ""))
    row = _one(_card(tmp_path, headline=nope), "claim 1 (absolute, d)")
    assert (row["verdict"], row["section"]) == (S.NOT_APPLICABLE, "paper 2")
    assert row["falsified_if"].startswith("none: not applicable") and "RoPE" in row["note"]


def test_claim1_shows_its_own_control_and_is_not_reproduced_where_it_reads_position(tmp_path):
    ok = (0.0004, -0.0016, 0.0026)  # 95 % CI in the model's units
    head = pd.DataFrame(
        [
            _lead("above", (0.0086, 0.0050, 0.0129), ok, tost=(-0.0012, 0.0019)),
            _lead("small", (6.2e-4, 2.9e-4, 9.2e-4), ok, tost=(-0.0012, 0.0019)),
            _lead("straddles", (0.003, 0.001, 0.005), ok, tost=(-0.0012, 0.0019)),
            _lead("leaky", (0.0086, 0.0050, 0.0129), (0.004, 0.003, 0.005)),
            _lead("wide", (0.0086, 0.0050, 0.0129), (0.0, -0.004, 0.004)),
            _lead("no-control", (0.05, 0.04, 0.06), (np.nan, np.nan, np.nan)),
        ]
    )
    card = _card(tmp_path, headline=head)
    above = _one(card, "claim 1 (above, d)")
    assert above["verdict"] == R and above["note"] == ""
    assert (
        "in the model's units 0.0004 [-0.0016, 0.0026] (passed, margin 0.002)"
        in (above["measured"])
    )
    # a real effect, smaller than the declared threshold: differs, whatever the control reads
    assert _one(card, "claim 1 (small, d)")["verdict"] == D
    assert _one(card, "claim 1 (straddles, d)")["verdict"] == I
    # the model's own control reads position: its reproduced becomes inconclusive
    leaky = _one(card, "claim 1 (leaky, d)")
    assert leaky["verdict"] == I and "its rule says reproduced" in leaky["note"]
    assert "(reads position, margin 0.002)" in leaky["measured"]
    # an underpowered control shows, but does not decide (the threshold is at least its margin)
    wide = _one(card, "claim 1 (wide, d)")
    assert wide["verdict"] == R and "(underpowered, margin 0.002)" in wide["measured"]
    nc = _one(card, "claim 1 (no-control, d)")
    assert nc["verdict"] == R and "no negative control of this model" in nc["measured"]
    # two landmark readings: one row each
    both = pd.concat([head.assign(landmark="modelled"), head.assign(landmark="counted")])
    card = _card(tmp_path, headline=both)
    assert _one(card, "claim 1 (above, d, landmark modelled)")["verdict"] == R
    assert _one(card, "claim 1 (leaky, d, landmark counted)")["verdict"] == I


def test_negative_controls_reach_each_outcome_against_the_declared_margin(tmp_path):
    """A negative control in the model's units is judged on its (1 − 2α) interval against the
    margin its table carries: passed, reads position, underpowered; a bound that is not finite
    is underpowered and says so; an interval wholly below 0 that lies within the margin passes,
    and says it is below 0; the counted reading on prompts with a fixed BOS is not run."""
    neg0 = (0.002, -0.01, 0.02)  # the control's own ratio: never the verdict
    m = 0.002
    rows = [
        _ctl("passed", neg0, units={"modelled": (0.0004, -0.0012, 0.0023, -0.0009, 0.0019, m)})
        | {"fixed_bos": 1},
        _ctl("leaks", neg0, units={"modelled": (0.004, 0.003, 0.005, 0.0032, 0.0048, m)}),
        _ctl("wide", neg0, units={"modelled": (0.0, -0.004, 0.004, -0.0034, 0.0034, m)}),
        _ctl("nan", neg0, units={"modelled": (np.nan, np.nan, np.nan, np.nan, np.nan, m)}),
        _ctl("below", neg0, units={"modelled": (-7e-4, -1.4e-3, -9e-5, -1.3e-3, -2e-4, m)}),
    ]
    rows[0] |= {
        f"negative_counted_{k}": v
        for k, v in zip(
            ("model_units", "model_units_lo", "model_units_hi", "tost_lo", "tost_hi", "margin"),
            (0.0, -0.001, 0.001, -0.0008, 0.0008, m),
        )
    }
    card = _card(tmp_path, controls=pd.DataFrame(rows))
    neg = lambda v, lm="modelled": _one(  # noqa: E731
        card, f"negative control (m, d, {v}, logit, landmark {lm})"
    )
    assert neg("passed")["verdict"] == V.PASSED
    assert neg("leaks")["verdict"] == V.READS_POSITION
    assert neg("wide")["verdict"] == V.UNDERPOWERED
    assert neg("nan")["verdict"] == V.UNDERPOWERED and "not finite" in neg("nan")["note"]
    below = neg("below")
    assert below["verdict"] == V.PASSED and "wholly below 0" in below["note"]
    counted = neg("passed", "counted")
    assert counted["verdict"] == S.NOT_RUN and "fixed BOS" in counted["note"]
    p = neg("passed")
    assert "90 % interval [-0.0009, 0.0019] against +-0.002" in p["measured"]
    assert "per-prompt reading 0.4 [0.3, 0.5] (reads position)" in p["measured"]
    assert p["section"] == "controls" and p["reading"] == "expected-map"
    assert p["falsified_if"].startswith("reads position if")
    # a margin the table declares larger makes the wide control pass; the margin decides
    wider = [r | {"negative_modelled_margin": 0.005} for r in rows[2:3]]
    card = _card(tmp_path, controls=pd.DataFrame(wider))
    assert _one(card, "negative control (m, d, wide, logit, landmark modelled)")["verdict"] == (
        V.PASSED
    )
    # a table without the interval in the model's units: not run, and says why
    old = _card(tmp_path, controls=pd.DataFrame([_ctl("old", neg0)]))
    row = _one(old, "negative control (m, d, old, logit)")
    assert row["verdict"] == S.NOT_RUN and "rerun aggregate_leakage" in row["note"]


def test_positive_controls_are_recovered_or_not(tmp_path):
    m = {"modelled": (0.0, -0.001, 0.001, -0.0008, 0.0008, 0.002)}
    ctl = pd.DataFrame(
        [
            _ctl("a", (0.0, -0.01, 0.01), units=m),
            _ctl("c", (0.0, -0.01, 0.01), rec=(0.3, 0.2, 0.25), units=m),  # misses the size
            _ctl("z", (0.0, -0.01, 0.01), planted=0.1, rec=(0.108, -0.009, 0.217), units=m),
            _ctl("d", (0.0, -0.01, 0.01), planted=np.nan, units=m),
        ]
    )
    card = _card(tmp_path, controls=ctl)
    pos = lambda v: _one(card, f"positive control (m, d, {v}, logit)")  # noqa: E731
    assert pos("a")["verdict"] == V.RECOVERED and pos("a")["paper_value"] == "0.1 (planted)"
    assert pos("c")["verdict"] == V.NOT_RECOVERED
    # covers the planted share but reaches 0: the table and the scorecard both say so
    assert pos("z")["verdict"] == V.NOT_RECOVERED
    assert pos("d")["verdict"] == S.NOT_RUN
    assert pos("a")["falsified_if"].startswith("not recovered if")
    bad = ctl.assign(planted_estimate_lo=np.nan)
    row = _one(_card(tmp_path, controls=bad), "positive control (m, d, a, logit)")
    assert row["verdict"] == V.NOT_RECOVERED
    rows = card[card["target"].str.contains(" control (m, d", regex=False)]
    assert set(rows["section"]) == {"controls"} and set(rows["paper"]) == {"paper 2"}
    assert set(rows["verdict"]) <= set(V.CONTROL) | {S.NOT_RUN}


def test_additivity_rows_are_measured_with_the_cross_term(tmp_path):
    obs = pd.DataFrame(
        [
            {"model": "m", "dataset": "d", "causal_variant": "causal"}
            | {
                f"{k}{s}": v + d
                for k, v in (("logit", 0.2), ("logz", 0.14), ("cross", -0.2), ("logattn", 0.14))
                for s, d in (("", 0), ("_lo", -0.01), ("_hi", 0.01))
            }
        ]
    )
    row = _one(_card(tmp_path, observational_split=obs), "Eq. 5 additivity (m, d, causal)")
    assert row["verdict"] == S.MEASURED and row["reading"] == "per-prompt"
    assert row["measured"].startswith("cross -0.2 [-0.21, -0.19]")
    assert _one(S.build_scorecard({}), "Eq. 5 additivity")["verdict"] == S.NOT_RUN


def test_claim2_tests_the_residual_stream_and_measures_the_causal_mask(tmp_path):
    def row(model, res, cm, window="all", **kw):
        return (
            {"model": model, "dataset": "d", "condition": "rope", "window": window}
            | {
                "target": "logattn",
                "residual_stream": res[0],
                "residual_stream_lo": res[1],
                "residual_stream_hi": res[2],
                "causal_mask": cm[0],
                "causal_mask_lo": cm[1],
                "causal_mask_hi": cm[2],
                "total": 1.0,
                "total_lo": 0.9,
                "total_hi": 1.1,
                "share_causal_mask": 0.5,
                "share_causal_mask_lo": 0.4,
                "share_causal_mask_hi": 0.6,
            }
            | kw
        )

    pos, zero, neg = (0.1, 0.05, 0.15), (0.0, -0.05, 0.05), (-0.1, -0.15, -0.05)
    small = (0.001, 0.0005, 0.0015)  # > 0, but below the declared threshold (0.002)
    dec = pd.DataFrame(
        [
            row("both", pos, pos),
            row("small", small, pos),
            row("wide", zero, pos),
            row("mask-neg", pos, neg),  # the check fails; the test reads the residual only
            row("twin", pos, pos, init_of="both"),
            row("nope", zero, pos, positional="nope"),
            # a sliding-window model is read on its full-window rows, both components tested
            row("swa", neg, pos, positional="swa"),
            row("swa", pos, pos, window="full32", positional="swa"),
            row("swa-flat", pos, zero, window="full32", positional="swa"),
        ]
    )
    card = _card(tmp_path, decomposition_headline=dec)
    assert _one(card, "claim 2 (both, d)")["verdict"] == R
    assert _one(card, "claim 2 (small, d)")["verdict"] == D
    assert _one(card, "claim 2 (wide, d)")["verdict"] == I
    assert _one(card, "claim 2 (mask-neg, d)")["verdict"] == R
    assert _one(card, "claim 2 (twin, d)")["verdict"] == S.MEASURED
    assert _one(card, "claim 2 (nope, d)")["verdict"] == S.NOT_APPLICABLE
    swa = _one(card, "claim 2 (swa, d)")
    assert swa["verdict"] == R and "(window full32)" in swa["measured"]
    assert "tested too" in swa["note"]
    assert _one(card, "claim 2 (swa-flat, d)")["verdict"] == I  # its causal mask straddles
    # the causal-mask component (total - ring): a difference of measured quantities, measured
    # beside the test, never a check, whatever its interval
    chk = lambda m: _one(card, f"claim 2, causal-mask component ({m}, d)")  # noqa: E731
    for m in ("both", "mask-neg", "wide", "twin", "nope"):
        row = chk(m)
        assert (row["verdict"], row["section"]) == (S.MEASURED, "paper 2"), m
        assert row["falsified_if"].startswith("none:") and "not an identity" in row["note"]
    mask_rows = card[card["target"].str.contains("causal-mask component", regex=False)]
    assert len(mask_rows) and not (mask_rows["section"] == "checks").any()
    gone = dec.assign(model=dec["model"] + "-nan", causal_mask_hi=np.nan)
    nan = _one(
        _card(tmp_path, decomposition_headline=gone), "claim 2, causal-mask component (both-nan, d)"
    )
    assert nan["verdict"] == S.MEASURED and "not finite" in nan["note"]
    assert not card["target"].str.contains("causal-mask component (swa", regex=False).any()
    # on document openings the residual-stream component reads the data's own position
    first = _card(tmp_path, decomposition_headline=dec.assign(data_mode="first"))
    row = _one(first, "claim 2 (both, d)")
    assert row["verdict"] == S.NOT_RUN and "chunks at random offsets" in row["note"]
    # the threshold is declared: lowered below the small component, it reproduces
    lower = _card(tmp_path, materiality={"claim2_component": 0.0004}, decomposition_headline=dec)
    assert _one(lower, "claim 2 (small, d)")["verdict"] == R


def test_a_decomposition_without_its_ring_run_is_not_run_never_judged_on_nan(tmp_path):
    """The smoke config's experiment runs [causal, bidirectional]: the table's ring components are
    NaN (no ring run), and every claim-2 row says which run it needs instead of a verdict."""
    nan = float("nan")
    base = {"dataset": "d", "condition": "rope", "window": "all", "target": "logattn"}
    ring = {"ring_run": "", "status": "not run: no 'ring' run"}
    cols = {f"{c}{s}": nan for c in ("residual_stream", "causal_mask") for s in ("", "_lo", "_hi")}
    cols |= {"total": 0.2, "total_lo": 0.1, "total_hi": 0.3}
    dec = pd.DataFrame(
        [
            base | cols | ring | {"model": "trained-rope", "data_mode": "chunks"},
            base | cols | ring | {"model": "trained-rope-init", "init_of": "trained-rope"},
            base | cols | ring | {"model": "opening", "data_mode": "first"},
            # the ring run made, its component NaN all the same: a measurement that failed
            base | cols | {"ring_run": "ring", "status": "measured", "model": "broken"},
        ]
    )
    card = _card(tmp_path, decomposition_headline=dec)
    for model in ("trained-rope", "trained-rope-init", "opening"):
        for label in ("claim 2", "claim 2, causal-mask component"):
            row = _one(card, f"{label} ({model}, d)")
            assert row["verdict"] == S.NOT_RUN, (label, model, row["verdict"])
            assert row["note"].startswith("no 'ring' run: "), row["note"]
            assert "add the ring run to the experiment's variants" in row["note"]
            assert "nan" not in row["measured"]
    assert _one(card, "claim 2, causal-mask component (opening, d)")["section"] == "paper 2"
    # both reasons where both hold
    assert "chunks at random offsets" in _one(card, "claim 2 (opening, d)")["note"]
    broken = _one(card, "claim 2, causal-mask component (broken, d)")
    assert broken["verdict"] == S.MEASURED and "not finite" in broken["note"]
    # a table without the ring_run column: its status says whether the ring run was made
    old = _card(tmp_path, decomposition_headline=dec.drop(columns="ring_run"))
    assert _one(old, "claim 2 (trained-rope, d)")["verdict"] == S.NOT_RUN
    assert _one(old, "claim 2, causal-mask component (broken, d)")["verdict"] == S.MEASURED


def test_claim6_on_the_headline_is_judged_by_size(tmp_path):
    def row(model, d, half, init_of=""):
        return {
            "model": model,
            "dataset": "d",
            "variant": "causal",
            "window": "all",
            "target": "logit",
            "reading": "expected-map",
            "leakage": 0.02,
            "leakage_lo": 0.01,
            "leakage_hi": 0.03,
            "position_free": False,
            "linear_minus_saturated": d,
            "linear_minus_saturated_lo": d - half,
            "linear_minus_saturated_hi": d + half,
            "init_of": init_of,
        }

    head = pd.DataFrame(
        [
            row("big", 0.03, 0.005),  # well above the declared 0.002
            row("small", 0.001, 0.0005),  # positive (least squares), below the size that matters
            row("edge", 0.002, 0.001),  # straddles it
            row("twin", 0.03, 0.005, init_of="big"),
        ]
    )
    card = _card(tmp_path, headline=head)
    lab = "claim 6, headline"
    assert _one(card, f"{lab} (big, d)")["verdict"] == R
    assert _one(card, f"{lab} (small, d)")["verdict"] == D
    assert _one(card, f"{lab} (edge, d)")["verdict"] == I
    assert _one(card, f"{lab} (twin, d)")["verdict"] == S.MEASURED
    assert _one(card, f"{lab} (big, d)")["falsified_if"].endswith("at or below 0.002")
    old = head.drop(columns=[c for c in head if c.startswith("linear_minus")])
    assert _one(_card(tmp_path, headline=old), lab)["verdict"] == S.NOT_RUN
    # the threshold is the config's, never the control's interval: a wide control changes
    # nothing; a raised threshold does
    ctl = {"control_model_units": 0.002, "control_model_units_lo": -0.01}
    ctl |= {"control_model_units_hi": 0.02, "control_tost_lo": -0.008, "control_tost_hi": 0.018}
    card = _card(tmp_path, headline=head.assign(**ctl, control_margin=0.002))
    big = _one(card, f"{lab} (big, d)")
    assert big["verdict"] == R and "(underpowered, margin 0.002)" in big["measured"]
    raised = _card(tmp_path, materiality={"claim6_headline": 0.04}, headline=head)
    assert _one(raised, f"{lab} (big, d)")["verdict"] == D
    # the model's own control reads position: reproduced becomes inconclusive
    leaky = head.assign(
        control_model_units=0.01,
        control_model_units_lo=0.008,
        control_model_units_hi=0.012,
        control_tost_lo=0.0085,
        control_tost_hi=0.0115,
        control_margin=0.002,
    )
    row = _one(_card(tmp_path, headline=leaky), f"{lab} (big, d)")
    assert row["verdict"] == I and "reads position" in row["note"]
    assert _one(_card(tmp_path, headline=leaky), f"{lab} (small, d)")["verdict"] == D


def test_additivity_layer_local_vs_whole_forward_is_measured(tmp_path):
    def row(variant, x, d=np.nan):
        return {
            "model": "m",
            "dataset": "d",
            "variant": variant,
            "window": "all",
            "target": "logattn",
            "leakage": x,
            "leakage_lo": x - 0.01,
            "leakage_hi": x + 0.01,
            "position_free": False,
            "local_minus_whole": d,
            "local_minus_whole_lo": d - 0.005,
            "local_minus_whole_hi": d + 0.005,
        }

    head = pd.DataFrame(
        [row("bidirectional", 0.02), row("layer_bidirectional", 0.05, 0.03), row("causal", 0.1)]
    )
    r = _one(
        _card(tmp_path, headline=head), "Eq. 5 additivity, layer-local vs whole-forward (m, d)"
    )
    assert r["verdict"] == S.MEASURED and r["reading"] == "expected-map"
    assert r["measured"].startswith("layer-local - whole-forward 0.03 [0.025, 0.035]")
    assert "whole-forward 0.02 [0.01, 0.03]" in r["measured"]
    none = _card(tmp_path, headline=head[head.variant != "layer_bidirectional"])
    assert _one(none, "Eq. 5 additivity, layer-local vs whole-forward")["verdict"] == S.NOT_RUN


def test_claim2_is_not_applicable_where_token_0_is_not_fixed(tmp_path):
    """Without a fixed token 0 the residual (the mask-free route, the ring's logits) reads 0 by
    symmetry: claim 2 is not applicable, with the table's reason, though its interval lies below
    the threshold (the rule would say differs); the causal-mask measurement stays."""
    why = "not applicable: token 0 is not one fixed id across the prompts (ids 4, 9)"
    base = {"model": "m", "dataset": "d", "condition": "rope", "window": "all"}
    base |= {"target": "logattn", "total": 1.0, "total_lo": 0.9, "total_hi": 1.1}
    for k, v in (("residual_stream", (-0.001, -0.003, 0.0005)), ("causal_mask", (0.9, 0.8, 1.0))):
        base |= {k: v[0], f"{k}_lo": v[1], f"{k}_hi": v[2]}
    base |= {"share_causal_mask": 0.99, "share_causal_mask_lo": 0.98, "share_causal_mask_hi": 1.0}
    dec = pd.DataFrame([base | {"mask_free_status": why}, base | {"model": "fixed"}])
    card = _card(tmp_path, decomposition_headline=dec)
    row = _one(card, "claim 2 (m, d)")
    assert row["verdict"] == S.NOT_APPLICABLE and row["note"] == why
    assert _one(card, "claim 2 (fixed, d)")["verdict"] == D  # the same numbers, token 0 fixed
    assert _one(card, "claim 2, causal-mask component (m, d)")["verdict"] == S.MEASURED


def test_claim1_inconclusive_rows_give_the_power_of_the_arm_and_each_model_its_threshold():
    from causalpos.scorecard.engine import declared_rows
    from causalpos.scorecard.materiality import Materiality
    from causalpos.scorecard.paper2_kinds import prompts_needed
    from causalpos.scorecard.rows import load_targets

    # the default run's Gemma claim 1: 0.00369 [-0.0016, 0.0132] at 16 prompts
    vals = (0.00369, -0.0016, 0.0132)
    head = pd.DataFrame([_lead("gemma", vals, n_sequences=16), _lead("smol", vals)])
    params = {"per_model": {"gemma": {"claim1_logit": 0.001}}}
    T = Materiality.from_params(params).apply(load_targets()["targets"])
    rows = {r.target: r for r in declared_rows(head, T["claim1_logit"])}
    gemma, smol = rows["claim 1 (gemma, d)"], rows["claim 1 (smol, d)"]
    assert gemma.verdict == smol.verdict == I
    # its own threshold, 0.001: the lower arm 0.00529 must shrink below 0.00269
    need = prompts_needed(*vals, 0.001, 16)
    assert need == 127 and need != prompts_needed(*vals, 0.002, 16)
    assert gemma.note.startswith(f"about {need} prompts would resolve it at 80 % power (16 here)")
    assert "would resolve reproduced if the estimate held" in gemma.note
    assert gemma.falsified_if.endswith("at or below 0.001")
    assert smol.falsified_if.endswith("at or below 0.002")
    assert smol.note == ""  # a table without n_sequences: no power calculation


def _twin_lead(model, leak, **kw):
    """A headline row: a causal run's logit leakage ``leak`` = (est, lo, hi)."""
    row = {"model": model, "dataset": "d", "variant": "causal", "window": "all"}
    row |= {"target": "logit", "reading": "expected-map", "position_free": False}
    row |= {"leakage": leak[0], "leakage_lo": leak[1], "leakage_hi": leak[2]}
    row |= {"per_prompt": 0.1, "per_prompt_lo": 0.09, "per_prompt_hi": 0.11}
    return row | kw


def test_claim1_beside_its_init_twin_is_a_measured_contrast(tmp_path):
    """Claim 1's trained model minus its random-init twin on the same dataset: a measured row
    (never a test or a check), the two intervals combined as independent samples, its note
    saying on which side of 0 the trained model's position lies."""
    from causalpos.verdicts import difference_ci

    trained, twin = (0.009, 0.006, 0.0123), (0.139, 0.123, 0.157)
    head = pd.DataFrame(
        [
            _twin_lead("m", trained),
            _twin_lead("m-random", twin, init_of="m"),
            _twin_lead("g", (0.02, 0.01, 0.03)),
            _twin_lead("g-random", (0.001, -0.001, 0.003), init_of="g"),
            _twin_lead("h", (0.01, 0.0, 0.02)),
            _twin_lead("h-random", (0.009, 0.0, 0.018), init_of="h"),
            _twin_lead("lonely-random", twin, init_of="absent"),  # its trained model is not here
        ]
    )
    card = _card(tmp_path, headline=head)
    row = _one(card, "claim 1, trained minus init twin (m - m-random, d)")
    d, lo, hi = difference_ci(trained, twin)
    assert (row["verdict"], row["section"]) == (S.MEASURED, "paper 2")
    assert row["falsified_if"].startswith("none:") and row["paper_value"] == "n/a"
    assert row["measured"].startswith(f"{d:.3g} [{lo:.3g}, {hi:.3g}]")
    assert "(twin / trained x15.4)" in row["measured"]
    assert row["note"].startswith("the trained model's logit position is below its untrained")
    assert "independent samples" in row["note"]
    above = _one(card, "claim 1, trained minus init twin (g - g-random, d)")
    assert above["note"].startswith("the trained model's logit position is above")
    assert _one(card, "claim 1, trained minus init twin (h - h-random, d)")["note"].startswith(
        "the interval covers 0"
    )
    assert _one(card, "claim 1 (lonely-random, d)")["verdict"] == S.MEASURED
    assert not card["target"].str.contains("- lonely-random", regex=False).any()
    # one contrast per landmark reading
    both = pd.concat([head.assign(landmark="modelled"), head.assign(landmark="counted")])
    card = _card(tmp_path, headline=both)
    for lm in ("modelled", "counted"):
        target = f"claim 1, trained minus init twin (m - m-random, d, landmark {lm})"
        assert _one(card, target)["verdict"] == S.MEASURED


def test_claim1_twin_contrast_is_paired_where_the_twin_table_pairs_them(tmp_path):
    """With the twin table (causalpos.paper2.tables.twins), a pair on the same resampled prompts
    takes the table's paired interval of the replicates' differences; a pair whose prompts'
    digests differ falls back to the independent combination and says so in its note."""
    from causalpos.verdicts import difference_ci

    trained, twin = (0.009, 0.006, 0.0123), (0.139, 0.123, 0.157)
    head = pd.DataFrame(
        [
            _twin_lead("m", trained),
            _twin_lead("m-random", twin, init_of="m"),
            _twin_lead("g", trained),
            _twin_lead("g-random", twin, init_of="g"),
        ]
    )
    base = {"dataset": "d", "window": "all", "target": "logit", "reading": "expected-map"}
    base |= {"leakage": 0.009, "leakage_twin": 0.139, "difference": -0.13}
    other = "independent: the two summaries resampled different prompts (counts_digest a vs b)"
    pairs = pd.DataFrame(
        [
            base
            | {"model": "m", "twin": "m-random", "difference_lo": -0.1395}
            | {"difference_hi": -0.1205, "paired": True}
            | {"pairing": "paired: the same resampled prompts (counts_digest a)"},
            base
            | {"model": "g", "twin": "g-random", "difference_lo": float("nan")}
            | {"difference_hi": float("nan"), "paired": False, "pairing": other},
        ]
    )
    card = _card(tmp_path, headline=head, twin_contrast=pairs)
    m = _one(card, "claim 1, trained minus init twin (m - m-random, d)")
    assert m["verdict"] == S.MEASURED
    assert m["measured"].startswith("-0.13 [-0.14, -0.12]; m 0.009 [0.006, 0.0123]")
    assert "Same prompts, paired: the same resampled prompts (counts_digest a)" in m["note"]
    assert "independent" not in m["note"]
    g = _one(card, "claim 1, trained minus init twin (g - g-random, d)")
    d, lo, hi = difference_ci(trained, twin)
    assert g["measured"].startswith(f"{d:.3g} [{lo:.3g}, {hi:.3g}]")
    assert (
        f"intervals combined as independent samples, which overstates the width ({other})"
        in (g["note"])
    )
