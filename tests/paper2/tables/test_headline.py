"""The headline reading's tables (paper2.tables.headline): the reading and the controls, the
scale contrast and Table 9 on the headline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from causalpos import verdicts as V
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as S
from causalpos.scorecard.controls import with_verdicts
from tests.paper2_headline_runs import headline_runs


@pytest.fixture(scope="module")
def runs():
    return headline_runs()


def test_tables_carry_the_reading_and_the_controls(runs):
    from causalpos.paper2.tables.assemble import paper2_tables

    margins = dict(control_margin_logit=0.05, control_margin_logattn=0.05)  # this design's
    summ = S.leakage_summary(
        runs,
        LeakageSettings(n_boot=200, n_perm=0, bos_windows=("late",), planted=0.2, **margins),
        position_free_runs=["identity_rope+bidirectional"],
    )
    tabs = paper2_tables({("m", "d"): summ})
    head = tabs["headline"]
    assert set(head["reading"]) == {"expected-map"}
    assert set(head["data_mode"]) == {""}  # a summary that names no data store
    with_mode = paper2_tables({("m", "d"): summ.assign_attrs(data_mode="chunks")})
    assert set(with_mode["decomposition_headline"]["data_mode"]) == {"chunks"}
    assert len(head) == 4 * 2 * 2  # variant x window x target
    row = head[(head.variant == "causal") & (head.window == "all") & (head.target == "logit")]
    assert float(row["leakage"].iloc[0]) == float(
        summ["leakage_model"].sel(variant="causal", window="all", target="logit", stat="estimate")
    )
    assert float(row["per_prompt"].iloc[0]) == float(
        summ["per_prompt_leakage_model"].sel(variant="causal", target="logit", stat="estimate")
    )
    ctl = tabs["controls"]
    assert list(ctl["variant"].unique()) == ["identity_rope+bidirectional"]
    # the table carries the numbers, the scorecard decides (causalpos.scorecard.controls)
    words = {"negative_control", "per_prompt_control", "positive_control", "control"}
    words |= {"negative_modelled_control", "negative_counted_control", "control_verdict"}
    assert not words & (set(ctl.columns) | set(head.columns))
    assert set(ctl["per_prompt_margin"]) == {0.01}
    ctl = with_verdicts("controls", ctl)
    # the verdict rules on the table's numbers: the modelled reading passes its declared
    # margin, the counted one reads the fixed BOS's key-0 column
    assert set(ctl["negative_control"]) == {"passed"}
    assert set(ctl["negative_modelled_control"]) == {"passed"}
    assert set(ctl["negative_modelled_margin"]) == {0.05}
    assert np.allclose(ctl["negative_tost_level"], 0.9)
    for r in ctl.itertuples():
        for lm in ("modelled", "counted"):
            got = getattr(r, f"negative_{lm}_control")
            tost = (getattr(r, f"negative_{lm}_tost_lo"), getattr(r, f"negative_{lm}_tost_hi"))
            assert got == V.negative_control(tost, 0.05), (r.target, lm)
    assert "reads position" in set(ctl["negative_counted_control"])
    # one word for one outcome: the scorecard's rows of the same statistics say what the table
    # says (negative controls per landmark reading, the plants)
    from causalpos.scorecard.paper2_headline import control_rows
    from causalpos.scorecard.rows import load_targets

    card = {c.target: c.verdict for c in control_rows(ctl, load_targets()["targets"])}
    for r in ctl.itertuples():
        where = f"{r.model}, {r.dataset}, {r.variant}, {r.target}"
        for lm in ("modelled", "counted"):
            got = card[f"negative control ({where}, landmark {lm})"]
            assert got == getattr(r, f"negative_{lm}_control"), (where, lm)
        assert card[f"positive control ({where})"] == r.positive_control
    # a second variant of the same pass (the ring with identity RoPE on a model without
    # windows): one row, naming both, in the table and in the scorecard
    from causalpos.paper2.tables.headline import one_row_per_pass

    ring = "identity_rope+ring"
    two = pd.concat([ctl.assign(variant=ring), ctl]).drop(columns="same_pass")
    one = one_row_per_pass(two, summ)
    assert list(one["variant"]) == [ring] * len(ctl)
    assert set(one["same_pass"]) == {"identity_rope+bidirectional"}
    rows = control_rows(one, load_targets()["targets"])
    assert len(rows) == len(control_rows(ctl, load_targets()["targets"]))
    assert all(f"{ring} = identity_rope+bidirectional (one pass)" in r.target for r in rows)
    # with a fixed BOS the counted reading has no control here: not run, as in the scorecard
    fixed = paper2_tables({("m", "d"): summ.assign_attrs(fixed_bos=1)})["controls"]
    fixed = with_verdicts("controls", fixed)
    assert set(fixed["negative_counted_control"]) == {"not run"}
    assert set(fixed["negative_modelled_control"]) == {"passed"}
    assert set(ctl[ctl.target == "logit"]["per_prompt_control"]) == {"reads position"}
    assert set(ctl["positive_control"]) == {"recovered"}
    assert set(ctl["positive_control"]) <= set(V.POSITIVE_CONTROL)
    # the causal run's rows carry its first position-free run's control, the same words
    causal = with_verdicts("headline", head[head.variant == "causal"])
    assert set(causal["control_verdict"]) <= set(V.NEGATIVE_CONTROL)
    assert (causal["control_margin"] == 0.05).all()
    dec = tabs["decomposition_headline"]
    assert set(dec["condition"]) == {"rope"} and set(dec["reading"]) == {"expected-map"}
    from causalpos.paper2.tables.markdown import paper2_markdown

    md = paper2_markdown(tabs)
    assert "Headline (expected-map reading)" in md and "Controls: position-free runs" in md
    controls = md.split("## Controls:")[1].split("\n## ")[0]
    assert "recovered" in controls and "–" not in controls


def test_scale_contrast_and_bos_headline_tables(runs):
    """The scale contrast pairs two models' share replicates: a model against an identical copy
    reads 0 exactly (negative control); against a model whose share is known to differ it reads
    the difference of the two decompositions; summaries drawn on other prompts are not paired."""
    from causalpos.paper2.tables.assemble import paper2_tables

    kw = dict(n_boot=200, n_perm=0, bos_windows=("late",))
    a = S.leakage_summary(runs, LeakageSettings(**kw))
    other = dict(runs, ring=runs["identity_rope+bidirectional"])  # residual ~0
    b = S.leakage_summary(other, LeakageSettings(**kw))
    c = S.leakage_summary(runs, LeakageSettings(**kw, seed=3))
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
        s["decomposition"].sel(
            condition="rope",
            window="all",
            target="logattn",
            component="share_causal_mask",
            stat="estimate",
        )
    )
    assert ab["difference"] == pytest.approx(share(b) - share(a))
    assert ab["difference_lo"] <= ab["difference"] <= ab["difference_hi"]
    assert ab["difference_lo"] > 0  # removing the residual component raises the mask's share
    assert tabs["bos_headline"].empty  # these runs replace no BOS


def test_the_decomposition_tables_name_the_ring_run_they_read(runs):
    """Each decomposition row says which ring run its residual-stream component is read on;
    without one (a config running [causal, bidirectional]) its ring components are NaN and the
    headline table's status says which run is missing, so the scorecard says "not run"."""
    from causalpos.paper2.tables.assemble import paper2_tables

    settings = LeakageSettings(n_boot=50, n_perm=0, bos_windows=("late",))
    with_ring = paper2_tables({("m", "d"): S.leakage_summary(runs, settings)})
    no_ring = {k: v for k, v in runs.items() if k != "ring"}
    without = paper2_tables({("m", "d"): S.leakage_summary(no_ring, settings)})
    dec, dec0 = with_ring["decomposition_headline"], without["decomposition_headline"]
    assert set(dec["ring_run"]) == {"ring"} and set(dec["status"]) == {"measured"}
    assert set(dec0["ring_run"]) == {""} and set(dec0["status"]) == {"not run: no 'ring' run"}
    logattn = dec0[dec0["target"] == "logattn"]
    assert logattn[["residual_stream", "causal_mask"]].isna().all().all()
    assert np.isfinite(logattn["total"]).all()  # the causal run's own reading is there
    assert np.isfinite(dec[dec["target"] == "logattn"]["residual_stream"]).all()
    for name in ("decomposition_components", "decomposition_components_by_layer"):
        assert set(with_ring[name]["ring_run"]) == {"ring"}
        assert set(without[name]["ring_run"]) == {""}
        assert without[name]["residual_stream"].isna().all()
    from causalpos.paper2.tables.markdown import paper2_markdown

    md = paper2_markdown(without).split("## Headline (expected-map reading): total")[1]
    assert "| – | – | – | not run: no 'ring' run |" in md.split("\n## ")[0]


def _summary_of(kinds, T):
    import xarray as xr

    return xr.Dataset(
        coords={"layer": range(len(kinds)), "layer_kind": ("layer", kinds)}
    ).assign_attrs(seq_len=T)


def test_same_pass_reads_the_variants_meaning_and_the_models_windows():
    from causalpos.models.variants import same_pass

    ring, bidir = "identity_rope+ring", "identity_rope+bidirectional"
    assert same_pass(ring, bidir, windows_mask=False)
    assert same_pass(bidir, ring, windows_mask=False)
    # every other atom alike: still one pass (a BOS replacement, a stream plant)
    assert same_pass("identity_rope+plant_stream1+ring", "identity_rope+plant_stream1+bidirectional", False)  # fmt: skip
    # a window that masks pairs at the run's length: the bidirectional pass keeps it, the ring not
    assert not same_pass(ring, bidir, windows_mask=True)
    # RoPE rotates: the ring's cyclic offsets differ from the bidirectional pass's
    assert not same_pass("ring", "bidirectional", False)
    assert not same_pass("scrambled_rope+ring", "scrambled_rope+bidirectional", False)
    # another part differs, or a mask is left
    assert not same_pass("identity_rope+bos_replace_mean+ring", bidir, False)
    assert not same_pass("identity_rope", ring, False)
    assert not same_pass(ring, ring, False)


def test_controls_keep_one_row_per_pass_naming_both_variants():
    from causalpos.paper2.tables.headline import one_row_per_pass

    ring, bidir = "identity_rope+ring", "identity_rope+bidirectional"
    # different numbers on purpose: the rows are merged by meaning, never by comparing them
    ctl = pd.DataFrame(
        {
            "variant": [ring, ring, bidir, bidir],
            "target": ["logit", "logattn"] * 2,
            "negative": [0.1, 0.2, 0.3, 0.4],
        }
    )
    one = one_row_per_pass(ctl, _summary_of(["global"] * 4, 128))
    assert list(one["variant"]) == [ring, ring] and list(one["same_pass"]) == [bidir, bidir]
    assert list(one["negative"]) == [0.1, 0.2]
    # a sliding window of 64 < T = 128 masks pairs: two passes, both kept
    two = one_row_per_pass(ctl, _summary_of(["sliding64", "global"], 128))
    assert list(two["variant"]) == [ring, ring, bidir, bidir] and set(two["same_pass"]) == {""}
    # a window >= T masks nothing: one pass again
    wide = one_row_per_pass(ctl, _summary_of(["sliding512", "global"], 128))
    assert list(wide["variant"]) == [ring, ring]
