"""Paper 2's rows on the headline reading (causalpos.scorecard.paper2_headline): claim 1 against
its control, the controls, claims 2, 3 and 6, the additivity rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scorecard_tables import (
    D,
    I,
    R,
    _card,
    _one,
)

from causalpos import scorecard as S
from causalpos import verdicts as V


def _headline_rows(model: str, logits: np.ndarray, *, free: bool = False) -> pd.DataFrame:
    """headline rows of synthetic logit maps (prompt, T, T), through the real estimator (the
    reducer's per-prompt sums, the expected-map U-statistic, a bootstrap CI over prompts)."""
    import torch
    from expected_oracle import expected_leakage

    from causalpos.paper2.extraction.reducers import LeakageReducer

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


def _lead(model, leak, ctl=None, **kw):
    """A headline row (causal logit leakage ``leak`` = (est, lo, hi)) with, where given, the
    negative control in the model's units ``ctl`` = (est, lo, hi)."""
    row = {"model": model, "dataset": "d", "variant": "causal", "window": "all"}
    row |= {"target": "logit", "reading": "expected-map", "position_free": False}
    row |= {"leakage": leak[0], "leakage_lo": leak[1], "leakage_hi": leak[2]}
    row |= {"per_prompt": 0.1, "per_prompt_lo": 0.09, "per_prompt_hi": 0.11}
    if ctl is not None:
        row |= dict(zip(("control_model_units", "control_model_units_lo"), ctl[:2]))
        row["control_model_units_hi"] = ctl[2]
    return row | kw


def _ctl(variant, neg, planted=0.1, rec=(0.1, 0.08, 0.12), pp=(0.4, 0.3, 0.5)):
    return {"model": "m", "dataset": "d", "variant": variant, "target": "logit"} | {
        "negative": neg[0],
        "negative_lo": neg[1],
        "negative_hi": neg[2],
        "per_prompt": pp[0],
        "per_prompt_lo": pp[1],
        "per_prompt_hi": pp[2],
        "per_prompt_control": "failed",
        "planted": planted,
        "planted_estimate": rec[0],
        "planted_estimate_lo": rec[1],
        "planted_estimate_hi": rec[2],
    }


def test_claim1_is_judged_against_the_position_free_control(tmp_path):
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
    assert _one(card, "claim 1 (absolute, d)")["verdict"] == R
    assert _one(card, "claim 1 (absolute, d)")["reading"] == "expected-map"
    # a twin is a baseline; a dataset without a control is not run
    twin = table.assign(init_of=np.where(table["model"] == "absolute", "trained-x", ""))
    assert _one(_card(tmp_path, headline=twin), "claim 1 (absolute, d)")["verdict"] == S.MEASURED
    # a trained model's control is preferred to an init model's uninformative one
    wide = _headline_rows("ctl-init", mask(noise), free=True).assign(init_of="ctl")
    with_init = pd.concat([table, wide])
    row = _one(_card(tmp_path, headline=with_init), "claim 1 (absolute, d)")
    assert row["verdict"] == R and "minus the control ctl " in row["measured"]
    alone = table[table["model"] != "ctl"]
    assert _one(_card(tmp_path, headline=alone), "claim 1 (absolute, d)")["verdict"] == S.NOT_RUN
    row = _one(card, "claim 1 (absolute, d)")
    assert "negative control's tolerance" in row["note"] and "control_model_units_hi" in row["note"]
    # a NoPE model: the claim is about RoPE decoders, not applicable (it stays in paper 2)
    nope = table.assign(positional=np.where(table["model"] == "absolute", "nope", ""))
    row = _one(_card(tmp_path, headline=nope), "claim 1 (absolute, d)")
    assert (row["verdict"], row["section"]) == (S.NOT_APPLICABLE, "paper 2")
    assert row["falsified_if"].startswith("none: not applicable") and "RoPE" in row["note"]


def test_claim1_is_judged_against_the_control_in_the_models_units_where_the_table_has_it(
    tmp_path,
):
    ctl = (0.0004, -0.0016, 0.0026)
    free = _lead("free", (0.0, -0.001, 0.001), variant="identity_rope+bidirectional")
    head = pd.DataFrame(
        [
            _lead("above", (0.0086, 0.0050, 0.0129), ctl),  # lo above the control's hi
            _lead("below", (6.2e-4, 2.9e-4, 9.2e-4), ctl),  # a real effect, smaller than none
            _lead("overlap", (0.003, 0.001, 0.005), ctl),
            _lead("no-control", (0.05, 0.04, 0.06), (np.nan, np.nan, np.nan)),
            free | {"position_free": True},
        ]
    )
    card = _card(tmp_path, headline=head)
    above = _one(card, "claim 1 (above, d)")
    assert (
        above["verdict"] == R
        and "in the model's units 0.0004 [-0.0016, 0.0026]" in (above["measured"])
    )
    below = _one(card, "claim 1 (below, d)")
    assert below["verdict"] == D and "(0.0026)" in below["falsified_if"]
    assert _one(card, "claim 1 (overlap, d)")["verdict"] == I
    # no control in the model's units on this row: the largest position-free control, 0.01
    fallback = _one(card, "claim 1 (no-control, d)")
    assert fallback["verdict"] == R and "minus the control free" in fallback["measured"]
    # the old rule would have called "below" differs only through the borrowed 0.01 threshold;
    # without the columns the pipeline keeps that rule
    old = head.drop(columns=[c for c in head if c.startswith("control_model_units")])
    assert _one(_card(tmp_path, headline=old), "claim 1 (below, d)")["verdict"] == D
    # two landmark readings: one row each, each against its own control
    both = pd.concat(
        [
            head.assign(landmark="modelled"),
            head.assign(landmark="counted", control_model_units_hi=0.01),
        ]
    )
    card = _card(tmp_path, headline=both)
    assert _one(card, "claim 1 (above, d, landmark modelled)")["verdict"] == R
    assert _one(card, "claim 1 (above, d, landmark counted)")["verdict"] == I


def test_control_rows_pass_fail_and_say_why(tmp_path):
    ctl = pd.DataFrame(
        [
            _ctl("a", (0.002, -0.01, 0.02)),  # covers 0: passes
            _ctl("b", (0.005, 0.003, 0.007)),  # excludes 0 but below the tolerance: passes
            _ctl("c", (0.2, 0.1, 0.3), rec=(0.3, 0.2, 0.25)),  # leaks; planted not recovered
            _ctl("d", (np.nan, np.nan, np.nan), planted=np.nan),
        ]
    )
    card = _card(tmp_path, controls=ctl)
    neg = lambda v: _one(card, f"negative control (m, d, {v}, logit)")  # noqa: E731
    pos = lambda v: _one(card, f"positive control (m, d, {v}, logit)")  # noqa: E731
    # controls pass or fail in their own section; never "reproduced"
    assert neg("a")["verdict"] == V.PASSED and neg("b")["verdict"] == V.PASSED
    assert neg("c")["verdict"] == V.FAILED
    assert neg("d")["verdict"] == V.FAILED and "not finite" in neg("d")["note"]
    assert pos("a")["verdict"] == V.PASSED and pos("c")["verdict"] == V.FAILED
    assert pos("d")["verdict"] == S.NOT_RUN
    ctl_rows = card[card["target"].str.contains(" control (m, d", regex=False)]
    assert len(ctl_rows) == 8 and set(ctl_rows["section"]) == {"controls"}
    assert set(ctl_rows["paper"]) == {"paper 2"}
    assert ctl_rows["falsified_if"].str.startswith("failed if").all()
    assert pos("a")["paper_value"] == "0.1 (planted)" and neg("a")["reading"] == "expected-map"
    assert "per-prompt reading 0.4 [0.3, 0.5] (failed)" in neg("a")["measured"]
    bad = ctl.assign(planted_estimate_lo=np.nan)
    row = _one(_card(tmp_path, controls=bad), "positive control (m, d, a, logit)")
    assert row["verdict"] == V.FAILED


def test_negative_controls_in_the_models_units_use_the_equivalence_bound(tmp_path):
    """With the model's units in the table, a control passes only when its upper limit lies
    below the bound (half the model's estimate): a control whose own ratio covers 0 but whose
    interval in the model's units reaches the bound fails (no power to tell the model from
    none); the counted reading on prompts with a fixed BOS is not run, and says why."""

    def units(lm, est, lo, hi, bound):
        p = f"negative_{lm}_"
        return {
            f"{p}model_units": est,
            f"{p}model_units_lo": lo,
            f"{p}model_units_hi": hi,
            f"{p}bound": bound,
        }

    ok = _ctl("a", (0.002, -0.01, 0.02)) | units("modelled", 0.0, -0.001, 0.002, 0.005)
    ok |= units("counted", 0.0, -0.002, 0.003, 0.01)
    wide = _ctl("b", (0.002, -0.01, 0.02)) | units("modelled", 0.001, -0.004, 0.006, 0.005)
    wide |= units("counted", 0.001, -0.004, 0.006, 0.01)
    card = _card(tmp_path, controls=pd.DataFrame([ok | {"fixed_bos": 0}, wide | {"fixed_bos": 1}]))
    neg = lambda v, lm: _one(card, f"negative control (m, d, {v}, logit, landmark {lm})")  # noqa: E731
    assert neg("a", "modelled")["verdict"] == V.PASSED
    assert neg("a", "counted")["verdict"] == V.PASSED
    assert neg("b", "modelled")["verdict"] == V.FAILED  # 0.006 >= 0.005
    assert (
        neg("b", "counted")["verdict"] == S.NOT_RUN and "fixed BOS" in neg("b", "counted")["note"]
    )
    assert "in the model's units" in neg("a", "modelled")["measured"]
    # a positive control whose interval reaches 0 has not passed
    zero = _ctl("c", (0.0, -0.01, 0.01), planted=0.05, rec=(0.04, -0.01, 0.09))
    card = _card(tmp_path, controls=pd.DataFrame([zero | units("modelled", 0, -1e-3, 1e-3, 0.01)]))
    assert _one(card, "positive control (m, d, c, logit)")["verdict"] == V.FAILED


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


def test_claim2_both_components_positive_on_the_headline(tmp_path):
    def row(model, res, cm, window="all", **kw):
        return (
            {"model": model, "dataset": "d", "condition": "rope", "window": window}
            | {
                "target": "logattn",
                "residual": res[0],
                "residual_lo": res[1],
                "residual_hi": res[2],
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
    dec = pd.DataFrame(
        [
            row("both", pos, pos),
            row("one", pos, neg),
            row("wide", pos, zero),
            row("twin", pos, pos, init_of="both"),
            row("nope", zero, pos, positional="nope"),
            # a sliding-window model is read on its full-window rows
            row("swa", neg, pos, positional="swa"),
            row("swa", pos, pos, window="full32", positional="swa"),
        ]
    )
    card = _card(tmp_path, decomposition_headline=dec)
    assert _one(card, "claim 2 (both, d)")["verdict"] == R
    assert _one(card, "claim 2 (one, d)")["verdict"] == D
    assert _one(card, "claim 2 (wide, d)")["verdict"] == I
    assert _one(card, "claim 2 (twin, d)")["verdict"] == S.MEASURED
    assert _one(card, "claim 2 (nope, d)")["verdict"] == S.NOT_APPLICABLE
    swa = _one(card, "claim 2 (swa, d)")
    assert swa["verdict"] == R and "(window full32)" in swa["measured"]


def test_claim3_ordering_on_a_common_window(tmp_path):
    def row(model, arch, res, window="full32", **kw):
        return (
            {"model": model, "dataset": "d", "condition": "rope", "window": window}
            | {
                "target": "logattn",
                "positional": arch,
                "residual": res[0],
                "residual_lo": res[1],
                "residual_hi": res[2],
            }
            | kw
        )

    lo, mid, hi = (0.01, 0.005, 0.015), (0.05, 0.045, 0.055), (0.1, 0.09, 0.11)

    def card(rows):
        return _card(tmp_path, decomposition_headline=pd.DataFrame(rows))

    ordered = [row("n", "ntk", lo), row("r", "rope", mid), row("s", "swa", hi)]
    # the window "all" is ignored where a full-window one exists
    ordered += [row("n", "ntk", hi, window="all"), row("s", "swa", lo, window="all")]
    r = _one(card(ordered), "claim 3 (ordering) (d)")
    assert r["verdict"] == R and "(window full32)" in r["measured"]
    swapped = [row("n", "ntk", lo), row("r", "rope", hi), row("s", "swa", mid)]
    assert _one(card(swapped), "claim 3 (ordering) (d)")["verdict"] == D
    wide = [row("n", "ntk", lo), row("r", "rope", mid), row("s", "swa", (0.06, 0.0, 0.12))]
    assert _one(card(wide), "claim 3 (ordering) (d)")["verdict"] == I
    # a twin does not count; without all three architectures: not run
    twin_only = [row("n", "ntk", lo), row("r", "rope", mid), row("s", "swa", hi, init_of="x")]
    assert _one(card(twin_only), "claim 3 (ordering)")["verdict"] == S.NOT_RUN


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
            row("big", 0.03, 0.005),  # well above 0.01
            row("small", 0.004, 0.002),  # positive, but below the size that matters
            row("edge", 0.012, 0.005),  # straddles 0.01
            row("twin", 0.03, 0.005, init_of="big"),
        ]
    )
    card = _card(tmp_path, headline=head)
    lab = "claim 6, headline"
    assert _one(card, f"{lab} (big, d)")["verdict"] == R
    assert _one(card, f"{lab} (small, d)")["verdict"] == D
    assert _one(card, f"{lab} (edge, d)")["verdict"] == I
    assert _one(card, f"{lab} (twin, d)")["verdict"] == S.MEASURED
    assert "negative control's tolerance" in _one(card, f"{lab} (big, d)")["note"]
    old = head.drop(columns=[c for c in head if c.startswith("linear_minus")])
    assert _one(_card(tmp_path, headline=old), lab)["verdict"] == S.NOT_RUN
    # the threshold from the data: the negative control's upper limit in the model's units.
    # A positive inflation (least squares makes it >= 0 for any non-linear offset profile)
    # that is no larger than what a run without position reads differs
    ctl = {"control_model_units": 0.002, "control_model_units_lo": -0.01}
    ctl["control_model_units_hi"] = 0.02
    card = _card(tmp_path, headline=head.assign(**ctl))
    big = _one(card, f"{lab} (big, d)")
    assert big["verdict"] == R  # [0.025, 0.035] above the control's 0.02
    assert (
        "(0.02)" in big["falsified_if"] and "model's units 0.002 [-0.01, 0.02]" in big["measured"]
    )
    assert _one(card, f"{lab} (edge, d)")["verdict"] == D  # [0.007, 0.017] <= 0.02
    ctl["control_model_units_hi"] = 0.03
    card = _card(tmp_path, headline=head.assign(**ctl))
    assert _one(card, f"{lab} (big, d)")["verdict"] == I  # the control reaches into it
    ctl["control_model_units_hi"] = 0.001
    card = _card(tmp_path, headline=head.assign(**ctl))
    assert _one(card, f"{lab} (small, d)")["verdict"] == R  # [0.002, 0.006] > 0.001
    assert _one(card, f"{lab} (twin, d)")["verdict"] == S.MEASURED


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
