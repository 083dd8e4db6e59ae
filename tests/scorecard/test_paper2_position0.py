"""Position 0, BOS replacement and sink heads (causalpos.scorecard.paper2_position0): Table 9,
claims 7 and 8, the sink-head rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causalpos import scorecard as S
from causalpos import verdicts as V
from tests.scorecard_tables import D, I, R, _card, _one, _p0, _rule, probe_row


def _bos(model, intervention, effect, window="early16", half=0.05):
    return {
        "model": model,
        "dataset": "d",
        "intervention": intervention,
        "bos_window": window,
        "target": "logattn",
        "effect": effect,
        "effect_lo": effect - half,
        "effect_hi": effect + half,
    }


def _c8probe(model, acc, n=32, null=0.2, fixed=0, note=""):
    from causalpos.inference import wilson as wilson_ci

    lo, hi = wilson_ci(acc, n) if np.isfinite(acc) else (np.nan, np.nan)
    return probe_row(model, acc, lo, hi, n=n, null=null, fixed=fixed, note=note)


def _sinkrow(model, n, lo, hi, init_of="", tau=0.5):
    return {
        "model": model,
        "dataset": "d",
        "tau": tau,
        "variant": "causal",
        "n_sink_heads": n,
        "n_sink_heads_lo": lo,
        "n_sink_heads_hi": hi,
        "fraction": n / 100,
        "n_heads": 100,
        "init_of": init_of,
    }


def _bh(model, replacement, reading, effect, half=0.05, window="early32", init_of=""):
    return {
        "model": model,
        "dataset": "d",
        "replacement": replacement,
        "bos_reading": reading,
        "window": window,
        "reading": "expected-map",
        "target": "logattn",
        "effect": effect,
        "effect_lo": effect - half,
        "effect_hi": effect + half,
        "c": 0.1,
        "c_lo": 0.09,
        "c_hi": 0.11,
        "c_baseline": 0.2,
        "c_baseline_lo": 0.19,
        "c_baseline_hi": 0.21,
        "n_sink_heads": 7.0 if reading == "sink_heads" else np.nan,
        "sink_tau": 0.5,
        "init_of": init_of,
    }


def test_table9_bos_rows(tmp_path):
    bos = pd.DataFrame(
        [
            _bos("a", "mean", 0.42),
            _bos("a", "mean", 0.0, window="early64"),  # the smallest early window is scored
            _bos("a", "mean", 0.9, window="late"),
            _bos("a", "all_gaussian", 0.30),
            _bos("a", "zeros", 0.1),
            _bos("q", "mean", 0.40),
        ]
    )
    p0 = pd.concat([_p0("a", 0.0), _p0("q", 0.3, fixed=0)])
    card = _card(tmp_path, bos_effects=bos, position0=p0)
    assert _rule(card, "Table 9 (a, mean, early16)") == R
    assert _rule(card, "Table 9 (a, all_gaussian, early16)") == D  # paper -28 %
    assert _one(card, "Table 9 (a, zeros, early16)")["verdict"] == S.MEASURED
    assert _one(card, "Table 9 (q, mean, early16)")["verdict"] == S.NOT_APPLICABLE


def test_table9_scores_the_residual_stream_component_only(tmp_path):
    """Table 9's C_res is the bidirectional-ablation leakage: interventions measured on a causal
    run's logits are not scored against the paper; missing runs are not run."""

    def row(intervention, replacement, measure, effect, status="measured", window="early16"):
        return _bos("a", intervention, effect, window=window) | {
            "replacement": replacement,
            "measure": measure,
            "status": status,
        }

    bos = pd.DataFrame(
        [
            row("mean+bidirectional", "mean", "residual_stream", 0.41),
            row("all_gaussian+bidirectional", "all_gaussian", "residual_stream", -0.30),
            row("zeros+bidirectional", "zeros", "residual_stream", 0.2),
            row("mean", "mean", "logit", 0.9),  # observational: not Table 9's quantity
            row(
                "token+bidirectional", "token", "residual_stream", np.nan, "not run: no 'x' run", ""
            ),
        ]
    )
    # the sink-head table counts heads on these passes: they keep sinks and are scored
    sinks = [_sinkrow("a", 3, 2, 4) | {"variant": v} for v in ("bidirectional", "ring")]
    sinks += [
        _sinkrow("a", 3, 2, 4) | {"variant": f"bos_replace_{k}+bidirectional"}
        for k in ("mean", "all_gaussian", "zeros")
    ]
    card = _card(tmp_path, bos_effects=bos, position0=_p0("a", 0.0), sink_heads=pd.DataFrame(sinks))
    assert _rule(card, "Table 9 (a, mean+bidirectional, early16)") == R  # paper 40 %
    assert _rule(card, "Table 9 (a, all_gaussian+bidirectional, early16)") == R
    assert _one(card, "Table 9 (a, zeros+bidirectional, early16)")["verdict"] == S.MEASURED
    assert not card["target"].str.contains("Table 9 (a, mean,", regex=False).any()
    token = _one(card, "Table 9 (a, token+bidirectional)")
    assert token["verdict"] == S.NOT_RUN and "'x'" in token["note"]
    causal_only = bos[bos["measure"] == "logit"]
    row = _one(_card(tmp_path, bos_effects=causal_only), "Table 9")
    assert row["verdict"] == S.NOT_RUN and "+ring" in row["note"]


def test_claim7_position0_rows(tmp_path):
    p0 = pd.concat([_p0("fixed", 0.0), _p0("leaky", 0.3), _p0("varies", 0.3, fixed=0)])
    card = _card(tmp_path, position0=p0)
    # with a fixed token 0 the std is 0 by construction (causal mask): a check, not a test
    fixed = _one(card, "claim 7 (fixed, d)")
    assert (fixed["verdict"], fixed["section"]) == (V.HOLDS, "checks")
    leaky = _one(card, "claim 7 (leaky, d)")  # fixed token 0, nonzero std: the check fails
    assert (leaky["verdict"], leaky["section"]) == (V.FAILS, "checks")
    varies = _one(card, "claim 7 (varies, d)")
    assert (varies["verdict"], varies["section"]) == (S.NOT_APPLICABLE, "paper 2")
    assert fixed["falsified_if"].startswith("fails if token 0 is fixed")
    # a table that does not say whether token 0 is fixed decides nothing
    card = _card(tmp_path, position0=_p0("old", 0.0).drop(columns="token0_fixed"))
    old = _one(card, "claim 7 (old, d)")
    assert old["verdict"] == S.NOT_RUN and "token0_fixed" in old["note"]


def test_claim8_probe_rows(tmp_path):
    pr = pd.DataFrame(
        [
            _c8probe("null-level-many", 0.2, n=2000),  # Wilson half-width ~0.02: reproduced
            _c8probe("decodes", 0.7),  # Wilson lower bound ~0.52 > 0.2 + 0.1: differs
            _c8probe("few", 0.2),  # 32 prompts: the CI reaches above the margin
            _c8probe("bos", 0.2, fixed=1),
            _c8probe("refused", np.nan, note="no probe: 1 label class(es) with >= 5 prompts"),
        ]
    )
    card = _card(tmp_path, position0_probes=pr)
    assert _one(card, "claim 8 (null-level-many, d)")["verdict"] == R
    assert _one(card, "claim 8 (decodes, d)")["verdict"] == D
    assert _one(card, "claim 8 (few, d)")["verdict"] == I
    bos = _one(card, "claim 8 (bos, d)")
    assert bos["verdict"] == S.NOT_APPLICABLE and "by construction" in bos["note"]
    refused = _one(card, "claim 8 (refused, d)")
    assert refused["verdict"] == S.NOT_RUN and "1 label class" in refused["note"]
    old = pr.drop(columns=["sink_probe_accuracy_lo", "token0_fixed"])
    assert _one(_card(tmp_path, position0_probes=old), "claim 8")["verdict"] == S.NOT_RUN


def test_sink_head_rows(tmp_path):
    sk = pd.DataFrame(
        [
            _sinkrow("a", 12, 10, 14),
            _sinkrow("a-random", 0, 0, 0, "a"),
            _sinkrow("a", 0, 0, 0, tau=0.8),  # another tau: not this row
            _sinkrow("b", 0, 0, 0),
            _sinkrow("b-random", 1, 0, 2, "b"),  # no more than the twin: differs
            _sinkrow("c", 2, 0, 4),
            _sinkrow("c-init", 1, 0, 2, "c"),  # overlapping: inconclusive
            _sinkrow("lonely", 5, 4, 6),
        ]
    )
    card = _card(tmp_path, sink_heads=sk)
    assert _one(card, "sink-reading heads (a, d, tau 0.5)")["verdict"] == R
    assert _one(card, "sink-reading heads (b, d, tau 0.5)")["verdict"] == D
    assert _one(card, "sink-reading heads (c, d, tau 0.5)")["verdict"] == I
    lonely = _one(card, "sink-reading heads (lonely, d, tau 0.5)")
    assert lonely["verdict"] == S.NOT_RUN and "twin" in lonely["note"]


def test_table9_on_the_headline_every_replacement_and_reading_by_its_own_row(tmp_path):
    bos = pd.DataFrame(
        [
            _bh("a", "mean", "residual_stream", 0.41),  # paper 40 %: reproduced
            _bh("a", "mean", "causal_total", 0.0),  # differs
            _bh("a", "mean", "sink_heads", 0.3, half=0.15),  # straddles the band's edge
            _bh("a", "mean", "sink_heads", 0.9, window="early64"),  # not the smallest window
            _bh("a", "all_gaussian", "causal_total", -0.28),  # "replace all": -28 %
            _bh("a", "zeros", "causal_total", 0.1),  # no paper value
            _bh("r", "mean", "causal_total", 0.4, init_of="a"),  # a twin
            _bh("q", "mean", "causal_total", 0.4),  # token 0 varies
        ]
    )
    p0 = pd.concat([_p0("a", 0.0), _p0("r", 0.0), _p0("q", 0.3, fixed=0)])
    card = _card(tmp_path, bos_headline=bos, position0=p0)
    lab = "Table 9, headline"
    # the ring's reading: no sink-head table, so decided from the pass (no causal mask)
    ring = _one(card, f"{lab} (a, mean, residual_stream, early32)")
    assert ring["verdict"] == S.NOT_APPLICABLE and "from the pass" in ring["note"]
    assert _one(card, f"{lab} (a, mean, causal_total, early32)")["verdict"] == D
    sink = _one(card, f"{lab} (a, mean, sink_heads, early32)")
    assert sink["verdict"] == I and "7 sink heads" in sink["measured"]
    assert "sink heads only" in sink["note"] and sink["reading"] == "expected-map"
    allr = _one(card, f"{lab} (a, all_gaussian, causal_total, early32)")
    assert allr["verdict"] == R and allr["paper_value"] == "-28%"
    assert _one(card, f"{lab} (a, zeros, causal_total, early32)")["verdict"] == S.MEASURED
    assert _one(card, f"{lab} (r, mean, causal_total, early32)")["verdict"] == S.MEASURED
    q = _one(card, f"{lab} (q, mean, causal_total, early32)")
    assert q["verdict"] == S.NOT_APPLICABLE
    assert not card["target"].str.contains("early64").any()
    none = _one(_card(tmp_path, bos_headline=bos[bos.window == "late"]), lab)
    assert none["verdict"] == S.NOT_RUN


def test_table9_rows_on_a_pass_without_sinks_are_not_applicable(tmp_path):
    """Table 9's readings on the ring and the bidirectional pass are not applicable where that
    pass keeps no sink head (the sink-head table at the row's tau; without the table, from the
    pass itself: no causal mask); a pass whose heads the table counts as sinks is scored, and
    the readings that keep the sinks (causal total, sink heads) stay scored."""
    bos = pd.DataFrame(
        [
            _bh("a", "mean", "residual_stream", 0.41),  # ring: 0 sink heads measured
            _bh("a", "mean", "residual_stream_paper", 0.41),  # bidirectional: 0 measured
            _bh("a", "mean", "causal_total", 0.41),  # sinks kept: scored
            _bh("a", "mean", "sink_heads", 0.41),
            _bh("k", "mean", "residual_stream", 0.41),  # a ring that keeps 2 sink heads
            _bh("u", "mean", "residual_stream", 0.41),  # the table does not count its runs
        ]
    )
    sk = pd.DataFrame(
        [_sinkrow("a", 0, 0, 0) | {"variant": v} for v in ("ring", "bos_replace_mean+ring")]
        + [
            _sinkrow("a", 0, 0, 0) | {"variant": v}
            for v in ("bidirectional", "bos_replace_mean+bidirectional")
        ]
        + [_sinkrow("a", 4, 3, 5) | {"variant": "ring", "tau": 0.3}]  # another tau
        + [_sinkrow("k", 2, 1, 3) | {"variant": v} for v in ("ring", "bos_replace_mean+ring")]
    )
    p0 = pd.concat([_p0(m, 0.0) for m in ("a", "k", "u")])
    card = _card(tmp_path, bos_headline=bos, position0=p0, sink_heads=sk)
    lab = "Table 9, headline"
    ring = _one(card, f"{lab} (a, mean, residual_stream, early32)")
    assert ring["verdict"] == S.NOT_APPLICABLE and ring["section"] == "paper 2"
    assert "measured: 0 sink heads at tau 0.5 in bos_replace_mean+ring and ring" in ring["note"]
    bidir = _one(card, f"{lab} (a, mean, residual_stream_paper, early32)")
    assert bidir["verdict"] == S.NOT_APPLICABLE and "bidirectional" in bidir["note"]
    assert _one(card, f"{lab} (a, mean, causal_total, early32)")["verdict"] == R
    assert _one(card, f"{lab} (a, mean, sink_heads, early32)")["verdict"] == R
    assert _one(card, f"{lab} (k, mean, residual_stream, early32)")["verdict"] == R
    uncounted = _one(card, f"{lab} (u, mean, residual_stream, early32)")
    assert uncounted["verdict"] == S.NOT_APPLICABLE
    assert "counts no head of bos_replace_mean+ring, ring" in uncounted["note"]
    # the per-prompt rows (the ring pair named by the table's run columns)
    pp = pd.DataFrame(
        [
            _bos(m, "mean+ring", 0.41)
            | {"variant": "bos_replace_mean+ring", "baseline": "ring"}
            | {"replacement": "mean", "measure": "residual_stream", "status": "measured"}
            for m in ("a", "k")
        ]
    )
    card = _card(tmp_path, bos_effects=pp, position0=p0, sink_heads=sk)
    a = _one(card, "Table 9 (a, mean+ring, early16)")
    assert a["verdict"] == S.NOT_APPLICABLE and "0 sink heads" in a["note"]
    assert _rule(card, "Table 9 (k, mean+ring, early16)") == R
