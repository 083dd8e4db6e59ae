"""Tables for the scorecard's tests: the scorecard of tables written as CSVs (:func:`_card`), one
row by its target (:func:`_one`), a row's rule (:func:`_rule`), and rows of the decomposition and
position-0 tables."""

from __future__ import annotations

import re

import pandas as pd

from causalpos import scorecard as S
from causalpos import verdicts as V

R, D, I = V.REPRODUCED, V.DIFFERS, V.INCONCLUSIVE


def _card(tmp_path, materiality=None, **tables) -> pd.DataFrame:
    """The scorecard of the given tables (name -> DataFrame), written as CSVs under tmp_path;
    ``materiality``: paper 2's thresholds (default: the config's defaults)."""
    paths = {}
    for name, df in tables.items():
        paths[name] = tmp_path / f"{name}.csv"
        df.to_csv(paths[name], index=False)
    return S.build_scorecard(paths, materiality=materiality)


def _rule(card: pd.DataFrame, target: str) -> str:
    """The verdict of a row's rule: the row's verdict, or for a row not scored (its quantity
    fails its negative control) the verdict its note keeps."""
    row = _one(card, target)
    m = re.search(r"its rule says (reproduced|differs|inconclusive)", str(row["note"]))
    if row["verdict"] == S.MEASURED and m:
        return m.group(1)
    return row["verdict"]


def _one(card: pd.DataFrame, target: str) -> pd.Series:
    rows = card[card["target"] == target]
    assert len(rows) == 1, (target, card["target"].tolist())
    return rows.iloc[0]


def _h(rows) -> pd.DataFrame:
    """Rows of the headline decomposition table (log-attention, window all)."""
    return pd.DataFrame(rows).assign(window="all", target="logattn")


def _dec(model, dataset, share, half=0.02, condition="rope"):
    return {
        "model": model,
        "dataset": dataset,
        "condition": condition,
        "total": 0.1,
        "total_lo": 0.09,
        "total_hi": 0.11,
        "share_causal_mask": share,
        "share_causal_mask_lo": share - half,
        "share_causal_mask_hi": share + half,
    }


def _p0(model, std, fixed=1, layers=3):
    return pd.DataFrame(
        {
            "model": model,
            "dataset": "d",
            "condition": "causal",
            "layer": range(layers),
            "std": [0.0] + [std] * (layers - 1),
            "max_abs_dev": [0.0] + [10 * std] * (layers - 1),
            "token0_fixed": fixed,
        }
    )
