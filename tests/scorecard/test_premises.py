"""A declarative target's premises and cell formats (causalpos.scorecard.premises), alone and
through the engine (causalpos.scorecard.engine.declared_rows)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos import verdicts as V
from causalpos.scorecard import engine as E
from causalpos.scorecard import paper2_kinds as K
from causalpos.scorecard import premises as P
from tests.scorecard_tables import probe_row


def test_a_null_premise_matches_an_absent_nan_or_empty_cell_and_nothing_else():
    assert all(P.is_null(v) for v in (None, np.nan, "", "nan", float("inf")))
    assert not any(P.is_null(v) for v in (0, 0.0, "x", False))
    assert P.cell_matches(np.nan, None) and not P.cell_matches(0.0, None)
    assert P.cell_matches(1.0, 1) and not P.cell_matches(0.0, 1) and not P.cell_matches(np.nan, 1)
    assert P.cell_matches(1, True) and not P.cell_matches(np.nan, False)  # empty: neither
    assert P.cell_matches("trained-swa", "*swa") and not P.cell_matches("swa-x", "*swa")
    assert P.cell_matches("measured", "measured") and not P.cell_matches("skipped", "measured")


def test_the_first_matching_premise_decides_and_a_missing_column_reads_empty():
    t = {"premises": [{"if": {"a": None}, "why": "first"}, {"if": {"a": 1}, "why": "second"}]}
    assert P.premise(pd.Series({"b": 1}), t)["why"] == "first"
    assert P.premise(pd.Series({"a": np.nan}), t)["why"] == "first"
    assert P.premise(pd.Series({"a": 1.0}), t)["why"] == "second"
    assert P.premise(pd.Series({"a": 0.0}), t) is None


def test_format_specs_give_digits_texts_and_pythons_number_formats():
    r = pd.Series({"x": 0.123456, "x_lo": 0.1, "x_hi": 0.15, "note": np.nan, "n": 89.0})
    assert P.spec_text(r, "x", "ci2") == "0.12 [0.1, 0.15]"
    assert P.spec_text(r, "x", "2") == "0.12"
    assert P.spec_text(r, "n", "3") == "89"
    assert P.spec_text(r, "note", "text") == ""
    assert P.spec_text(pd.Series({"note": "why"}), "note", "text") == "why"
    assert P.spec_text(r, "x", ".2e") == "1.23e-01"
    assert P.spec_text(pd.Series({"k": "sliding512 minus global"}), "k", "word") == "sliding512"


def _probe(model, acc, lo, hi, null=0.2, fixed=0, **kw):
    return probe_row(model, acc, lo, hi, null=null, fixed=fixed, **kw)


def test_premises_decide_the_rows_they_match_and_the_rest_are_judged_on_the_shifted_interval():
    t = copy.deepcopy(S.load_targets()["targets"]["claim8_content"])
    table = pd.DataFrame(
        [
            _probe("null-level", 0.2, 0.18, 0.25),  # minus null: [-0.02, 0.05] <= 0.1
            _probe("decodes", 0.7, 0.52, 0.83),  # [0.32, 0.63] > 0.1: differs
            _probe("few", 0.2, 0.09, 0.37),  # [-0.11, 0.17]: inconclusive
            _probe("bos", 0.2, 0.09, 0.37, fixed=1),
            _probe("unsaid", 0.2, 0.09, 0.37, fixed=np.nan),
            _probe(
                "refused",
                np.nan,
                np.nan,
                np.nan,
                probe_note="1 label class",
                best_layer_accuracy=np.nan,
            ),
        ]
    )
    rows = {r.target.split("(")[1].split(",")[0]: r for r in E.declared_rows(table, t)}
    verdicts = {k: r.verdict for k, r in rows.items()}
    assert verdicts == {
        "null-level": V.REPRODUCED,
        "decodes": V.DIFFERS,
        "few": V.INCONCLUSIVE,
        "bos": S.NOT_APPLICABLE,
        "unsaid": S.NOT_RUN,
        "refused": S.NOT_RUN,
    }
    assert rows["decodes"].measured == (
        "sink-value probe 0.7 [0.52, 0.83] vs null mean 0.2 (p = 0.5, chance 0.2; 3 heads); "
        "position 0 best layer L2 0.3 (p = 0.2); token-0 embedding 0.3 (p = 0.2); "
        "32 prompts, 5 classes"
    )
    assert "by construction" in rows["bos"].note and rows["bos"].measured  # kept
    assert rows["unsaid"].note == "the table does not say whether token 0 is fixed"
    # a part whose cell is not finite is left out; a not-run row shows no measurement
    refused = rows["refused"]
    assert (refused.note, refused.measured) == (
        "no sink-value probe: 1 label class (3 sink heads)",
        "",
    )
    parts = E.measured_text(table.iloc[5], t)
    assert parts == "token-0 embedding 0.3 (p = 0.2); 32 prompts, 5 classes"


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"premises": [{"if": {"a": 1}, "verdict": "skipped", "why": "x"}]}, "has premise"),
        ({"premises": [{"if": {}, "verdict": "not run", "why": "x"}]}, "has premise"),
        ({"premises": {"if": {"a": 1}, "verdict": "not run", "why": "x"}}, "has premise"),
        ({"measured": ["a {x}", {"text": "b", "if": "x"}]}, "has measured part"),
    ],
)
def test_a_malformed_premise_or_measured_part_is_refused_at_load(fields, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim8_content"] |= fields
    with pytest.raises(ValueError, match=rf"target 'claim8_content' {problem}"):
        S.load_targets(spec)


def _head(variant, x, d=np.nan, model="m", window="all"):
    return {
        "model": model,
        "dataset": "d",
        "variant": variant,
        "window": window,
        "target": "logattn",
        "leakage": x,
        "leakage_lo": x - 0.01,
        "leakage_hi": x + 0.01,
        "local_minus_whole": d,
        "local_minus_whole_lo": d - 0.005,
        "local_minus_whole_hi": d + 0.005,
        "init_of": "",
    }


def test_measured_parts_join_with_measured_sep_and_a_joined_part_needs_its_match():
    t = copy.deepcopy(S.load_targets()["targets"]["additivity_ablation"])
    head = pd.DataFrame(
        [
            _head("bidirectional", 0.02),
            _head("bidirectional", 0.9, window="w16"),  # another window: not the match
            _head("layer_bidirectional", 0.05, 0.03),
            _head("layer_bidirectional", 0.04, 0.01, model="alone"),  # no whole-forward run
        ]
    )
    rows = E.declared_rows(head, t)
    assert [(r.target, r.verdict, r.measured) for r in rows] == [
        (
            "Eq. 5 additivity, layer-local vs whole-forward (m, d)",
            S.MEASURED,
            "layer-local - whole-forward 0.03 [0.025, 0.035]; layer-local 0.05 [0.04, 0.06], "
            "whole-forward 0.02 [0.01, 0.03] (window all)",
        ),
        (
            "Eq. 5 additivity, layer-local vs whole-forward (alone, d)",
            S.MEASURED,
            "layer-local - whole-forward 0.01 [0.005, 0.015]; layer-local 0.04 [0.03, 0.05] "
            "(window all)",
        ),
    ]
    assert rows[0].note == "a measurement: the paper assumes 0"
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["additivity_ablation"]["measured_sep"] = 0
    with pytest.raises(ValueError, match="target 'additivity_ablation' has measured_sep: 0"):
        S.load_targets(spec)


def test_a_reason_premise_decides_with_its_text_and_unless_spares_the_rows_it_matches():
    t = {
        "premises": [
            {"reason": "ring_missing", "verdict": S.NOT_RUN},
            {"if": {"free": "*"}, "unless": {"free": "measured"}, "verdict": "x", "why": "{free}"},
        ]
    }
    no_ring = pd.Series({"ring_run": "", "status": "not run: no 'ring' run", "free": "measured"})
    p = P.premise(no_ring, t)
    assert p["verdict"] == S.NOT_RUN and p["why_text"].startswith("no 'ring' run: the residual")
    assert P.premise(pd.Series({"ring_run": "rope+ring", "free": "measured"}), t) is None
    assert (
        P.premise(pd.Series({"ring_run": "rope+ring", "free": "by symmetry"}), t)["why"] == "{free}"
    )
    assert P.premise(pd.Series({"ring_run": "rope+ring", "free": np.nan}), t) is None
    assert P.matches(pd.Series({"k": "global"}), {"k": ["sliding", "global"]})


def _kind(model, kind, e, n=16, **kw):
    return {
        "model": model,
        "dataset": "d",
        "condition": "rope",
        "landmark": "modelled",
        "window": "all",
        "layer_kind": kind,
        "residual_stream": e,
        "residual_stream_lo": e - 0.004,
        "residual_stream_hi": e + 0.004,
        "total": 0.02,
        "total_lo": 0.01,
        "total_hi": 0.03,
        "n_layers": 3,
        "init_of": "",
        "n_sequences": n,
        "ring_run": "rope+ring",
        "mask_free_status": "measured",
    } | kw


def test_exclude_several_and_power_select_the_kinds_and_say_what_would_decide():
    t = copy.deepcopy(S.load_targets()["targets"]["claim2_kinds"]) | {"threshold": 0.002}
    table = pd.DataFrame(
        [
            _kind("gemma", "sliding512", 0.003),  # [-0.001, 0.007]: inconclusive
            _kind("gemma", "global", 0.01),  # reproduced
            _kind("gemma", "sliding512 minus global", -0.007),  # excluded: not a kind
            _kind("gemma", "global", 0.5, landmark="counted"),  # not selected
            _kind("smol", "global", 0.01),  # one kind only (its contrast excluded)
            _kind("smol", "global minus global", 0.0),
            _kind("ringless", "sliding512", 0.01, ring_run=""),
            _kind("ringless", "global", 0.01, mask_free_status="reads 0 by symmetry"),
        ]
    )
    rows = E.declared_rows(table, t)
    got = [(r.target, r.verdict) for r in rows]
    assert got == [
        ("claim 2 (per layer kind) (gemma, d, sliding512: 3 layers)", V.INCONCLUSIVE),
        ("claim 2 (per layer kind) (gemma, d, global: 3 layers)", V.REPRODUCED),
        ("claim 2 (per layer kind) (ringless, d, sliding512: 3 layers)", S.NOT_RUN),
        ("claim 2 (per layer kind) (ringless, d, global: 3 layers)", S.NOT_APPLICABLE),
    ]
    need = K.prompts_needed(0.003, -0.001, 0.007, 0.002, 16)
    assert rows[0].note.startswith(f"about {need} prompts would resolve it at 80 % power (16 here)")
    assert rows[1].note == "" and rows[3].note == "reads 0 by symmetry"
    assert "ring run's logits" in rows[2].note


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"premises": [{"reason": "no_reason", "verdict": "not run"}]}, "has premise"),
        ({"several": {"by": ["model"]}}, "has several: .*it lacks of"),
        ({"exclude": ["layer_kind"]}, "has exclude: .*set it to"),
        ({"keep": "* minus global"}, "has keep: .*set it to {column: value}"),
        ({"decided_note": "prompts"}, "has decided_note: 'prompts'; set it to a template"),
        ({"measured": [{"text": "{total}", "when": "total", "else": 1}]}, "has measured part"),
        ({"several": {"of": "layer_kind", "ignore": []}}, "has several: .*ignore must be"),
        ({"power": 1}, "has power: 1; set it to true or false"),
    ],
)
def test_a_malformed_reason_several_exclude_keep_or_power_is_refused_at_load(fields, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim2_kinds"] |= fields
    with pytest.raises(ValueError, match=rf"target 'claim2_kinds' {problem}"):
        S.load_targets(spec)


def test_a_table_without_a_required_column_says_so_apart_from_an_absent_table(tmp_path):
    from tests.scorecard_tables import _card, _one

    pr = pd.DataFrame([_probe("a", 0.2, 0.18, 0.25)])
    absent = _one(_card(tmp_path), "claim 8")
    assert (absent["verdict"], absent["note"]) == (
        S.NOT_RUN,
        "the config has no position-0 experiment",
    )
    # requires: token0_fixed (a premise's column) must be in the table
    old = _one(_card(tmp_path, position0_probes=pr.drop(columns="token0_fixed")), "claim 8")
    assert old["verdict"] == S.NOT_RUN and old["note"].startswith(
        "the probe table has no token0_fixed"
    )
    t = S.load_targets()["targets"]["claim8_content"]
    assert "token0_fixed" in E.columns(t).split()
    assert E.declared_rows(None, t, raw=pr)[0].note.startswith("the probe table has no")
    assert E.declared_rows(None, t)[0].note == "the config has no position-0 experiment"
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim8_content"]["requires"] = "token0_fixed"
    with pytest.raises(ValueError, match="target 'claim8_content' has requires: 'token0_fixed'"):
        S.load_targets(spec)


def test_a_reason_premises_unless_spares_its_rows_and_a_premise_states_its_own_falsified_if():
    t = copy.deepcopy(S.load_targets()["targets"]["claim1_logit"]) | {"threshold": 0.002}
    base = {"dataset": "d", "variant": "causal", "window": "all", "target": "logit"}
    leak = {"leakage": 0.01, "leakage_lo": 0.005, "leakage_hi": 0.015, "init_of": ""}
    head = pd.DataFrame(
        [
            base | leak | {"model": "nope", "positional": "nope"},
            base | leak | {"model": "open", "data_mode": "first"},
            base | leak | {"model": "twin", "data_mode": "first", "init_of": "open"},
            base
            | leak
            | {"model": "rope", "per_prompt": 0.2}
            | {"per_prompt_lo": 0.1, "per_prompt_hi": 0.3},
        ]
    )
    rows = {r.target: r for r in E.declared_rows(head, t)}
    nope = rows["claim 1 (nope, d)"]
    assert (nope.verdict, nope.measured) == (S.NOT_APPLICABLE, "0.01 [0.005, 0.015]")
    assert nope.falsified_if == (
        "none: not applicable (the claim's premise, a RoPE decoder, does not hold)"
    )
    assert nope.note.startswith("a NoPE model: the claim is about RoPE-trained decoders")
    opened = rows["claim 1 (open, d)"]
    assert opened.verdict == S.NOT_RUN and opened.note.startswith("the prompts are document")
    assert opened.falsified_if == "the CI of the model's logit leakage lies at or below 0.002"
    # unless: a twin is measured, whatever its prompts (the reason premise spares it)
    twin = rows["claim 1 (twin, d)"]
    assert (twin.verdict, twin.note) == (
        S.MEASURED,
        "init weights of open: a baseline, not a trained model",
    )
    # measured_judged: after the own control's text on a judged row, absent from the others
    assert rows["claim 1 (rope, d)"].measured == (
        "0.01 [0.005, 0.015]; no negative control of this model on these prompts; "
        "per-prompt reading 0.2 [0.1, 0.3]"
    )
    assert twin.measured == "0.01 [0.005, 0.015]"
    no_pp = E.declared_rows(head.drop(columns=["per_prompt"]), t)[-1]
    assert no_pp.measured.endswith("; no per-prompt reading")


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"measured_judged": "a {x}"}, "has measured_judged: 'a {x}'; set it to a list"),
        (
            {"premises": [{"reason": "openings", "verdict": "not run", "why": "x"}]},
            "has premise",
        ),
    ],
)
def test_a_malformed_measured_judged_or_reason_premise_is_refused_at_load(fields, problem):
    spec = copy.deepcopy(S.load_targets())
    spec["targets"]["claim1_logit"] |= fields
    with pytest.raises(ValueError, match=rf"target 'claim1_logit' {problem}"):
        S.load_targets(spec)
