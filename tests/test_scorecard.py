"""The scorecard's verdicts from synthetic tables with known answers."""

from __future__ import annotations

import pandas as pd

from causalpos import scorecard as S
from causalpos.paper1.theory import theory_table


def test_fig1_rows_from_the_closed_form(tmp_path):
    path = tmp_path / "theory.csv"
    theory_table(None, n=5, alphas=[0.0, 0.2]).to_csv(path, index=False)
    card = S.build_scorecard({"theory": path})
    fig1 = card[card["target"].str.startswith("Fig. 1")].set_index("target")
    # the paper prints 0.154 and 0.132 (match) and 0.150 for S(3,2) = 0.15082 (rounds to 0.151)
    assert fig1.loc["Fig. 1 S(2,1)", "verdict"] == S.REPRODUCED
    assert fig1.loc["Fig. 1 S(3,1)", "verdict"] == S.REPRODUCED
    assert fig1.loc["Fig. 1 S(3,2)", "verdict"].startswith(S.DIFFERS)
    exact = card[card["target"] == "§3 closed form"].iloc[0]
    assert exact["verdict"] == S.REPRODUCED


def test_missing_tables_are_not_run_rather_than_dropped():
    card = S.build_scorecard({})
    assert (card["verdict"] == S.NOT_RUN).all()
    assert {"paper 1", "paper 2"} == set(card["paper"])
    assert (
        card["target"].str.contains("Table 9").any() and card["target"].str.contains("Fig. 5").any()
    )


def test_empty_or_header_only_tables_are_not_run(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("model,dataset,intervention,bos_window,effect\n")
    card = S.build_scorecard(
        {"bos_effects": tmp_path / "empty.csv", "decomposition": tmp_path / "header.csv"}
    )
    rows = card[card["target"].isin(["Table 9", "claims 1-4"])]
    assert len(rows) == 2 and (rows["verdict"] == S.NOT_RUN).all()


def test_compare_verdicts():
    assert S._compare(0.80, 0.75, 0.86, 0.82, 0.1) == S.REPRODUCED
    assert S._compare(0.30, 0.25, 0.35, 0.82, 0.1) == S.DIFFERS
    # a CI wide enough to hold both 0 and the paper's value decides nothing
    assert S._compare(0.02, -0.72, 0.40, -0.28, 0.1) == S.INCONCLUSIVE


def test_paper2_rows_from_tables(tmp_path):
    dec = pd.DataFrame(
        {
            "model": ["llama-3.2-1b", "llama-3.2-1b"],
            "dataset": ["wiki", "random"],
            "condition": ["rope", "rope"],
            "total": [0.1, 0.1],
            "total_lo": [0.09, 0.09],
            "total_hi": [0.11, 0.11],
            "share_causal_mask": [0.80, 0.50],
            "share_causal_mask_lo": [0.76, 0.45],
            "share_causal_mask_hi": [0.84, 0.55],
        }
    )
    dec.to_csv(tmp_path / "dec.csv", index=False)
    p0 = pd.DataFrame(
        {
            "model": ["m", "m", "q"],
            "dataset": ["d"] * 3,
            "condition": ["causal"] * 3,
            "layer": [0, 1, 0],
            "std": [0.0, 0.0, 0.3],
            "max_abs_dev": [0.0, 0.0, 1.2],
        }
    )
    p0.to_csv(tmp_path / "p0.csv", index=False)
    card = S.build_scorecard(
        {"decomposition": tmp_path / "dec.csv", "position0": tmp_path / "p0.csv"}
    ).set_index("target")
    assert card.loc["claim 4 (llama-3.2-1b, wiki)", "verdict"] == S.REPRODUCED  # 82 % in the paper
    assert card.loc["claim 4 (llama-3.2-1b, random)", "verdict"] == S.DIFFERS
    assert card.loc["claim 10 (llama-3.2-1b)", "verdict"] == S.DIFFERS  # shares 0.80 vs 0.50
    assert card.loc["claim 7 (m, d)", "verdict"] == S.REPRODUCED
    assert card.loc["claim 7 (q, d)", "verdict"].startswith("not applicable")
    md = S.to_markdown(card.reset_index())
    assert md.startswith("# Reproduction scorecard")
    assert md.count("\n| paper 1 |") + md.count("\n| paper 2 |") == len(card)


def test_trained_vs_init_rows_follow_the_paired_interval(tmp_path):
    path = tmp_path / "cmp.csv"
    pd.DataFrame(
        {
            "variant": ["rope", "nope", "swa"],
            "minus_init": [0.05, 0.01, -0.03],
            "minus_init_lo": [0.02, -0.01, -0.05],
            "minus_init_hi": [0.08, 0.03, -0.01],
            "amplification": [4.0, float("nan"), 0.5],
            "amplification_lo": [2.0, float("nan"), 0.3],
            "amplification_hi": [7.0, float("nan"), 0.8],
        }
    ).to_csv(path, index=False)
    card = S.build_scorecard({"train_comparison": path}).set_index("target")
    assert card.loc["§3 (trained-rope vs init)", "verdict"] == S.REPRODUCED
    assert card.loc["§3 (trained-nope vs init)", "verdict"] == S.INCONCLUSIVE
    assert card.loc["§3 (trained-swa vs init)", "verdict"] == S.DIFFERS
    assert "x4 [2, 7]" in card.loc["§3 (trained-rope vs init)", "measured"]
    assert "x" not in card.loc["§3 (trained-nope vs init)", "measured"].replace("0.01", "")
    assert (S.build_scorecard({})["target"] == "§3 (trained vs init)").any()
