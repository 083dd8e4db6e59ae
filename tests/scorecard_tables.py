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


def probe_row(model, acc, lo, hi, *, n=32, null=0.2, fixed=0, note="", **kw) -> dict:
    """A position-0 table's row of one model: the probes of claim 8 (accuracy ``acc`` with its
    interval ``lo``, ``hi`` over ``n`` prompts, the null's mean ``null``), token 0 fixed or not."""
    return {
        "model": model,
        "dataset": "d",
        "token0_fixed": fixed,
        "probe_n_prompts": n,
        "probe_n_classes": 5,
        "probe_note": note,
        "best_layer": 2,
        "best_layer_accuracy": 0.3,
        "best_layer_p_value": 0.2,
        "embedding_accuracy": 0.3,
        "embedding_p_value": 0.2,
        "n_sink_heads": 3,
        "sink_probe_accuracy": acc,
        "sink_probe_chance": 0.2,
        "sink_probe_null_mean": null,
        "sink_probe_p_value": 0.5,
        "sink_probe_accuracy_lo": lo,
        "sink_probe_accuracy_hi": hi,
        "sink_probe_note": "",
    } | kw


def baseline_rows(model, diff, half, init_of="", dataset="d") -> list[dict]:
    """A baseline-comparison table's readings of one (model, dataset): saturated, linear and
    their difference ``diff`` (each ± ``half``), raw and corrected."""
    rows = []
    for b, est in (("saturated", 0.05), ("linear", 0.05 + diff), ("linear_minus_saturated", diff)):
        for m in ("raw", "corrected"):
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "variant": "causal",
                    "target": "logit",
                    "baseline": b,
                    "measure": m,
                    "estimate": est,
                    "lo": est - half,
                    "hi": est + half,
                    "init_of": init_of,
                }
            )
    return rows


def _lead(model, leak, ctl=None, tost=None, margin=0.002, **kw):
    """A headline row (causal logit leakage ``leak`` = (est, lo, hi)) with, where given, the
    negative control in the model's units ``ctl`` = (est, lo, hi) and its (1 − 2α) interval
    ``tost`` = (lo, hi) (default: the CI) against ``margin``."""
    row = {"model": model, "dataset": "d", "variant": "causal", "window": "all"}
    row |= {"target": "logit", "reading": "expected-map", "position_free": False}
    row |= {"leakage": leak[0], "leakage_lo": leak[1], "leakage_hi": leak[2]}
    row |= {"per_prompt": 0.1, "per_prompt_lo": 0.09, "per_prompt_hi": 0.11}
    if ctl is not None:
        row |= dict(zip(("control_model_units", "control_model_units_lo"), ctl[:2]))
        row["control_model_units_hi"] = ctl[2]
        lo, hi = tost if tost is not None else ctl[1:]
        row |= {"control_tost_lo": lo, "control_tost_hi": hi, "control_margin": margin}
    return row | kw
