"""The Markdown digest of paper 2's tables (paper2.tables.markdown): one section per table that
has rows, in a fixed order, each estimate with its interval as the table holds it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causalpos.catalogue import PAPER2_TABLES
from causalpos.paper2.tables.markdown import paper2_markdown


def _tables(**rows) -> dict[str, pd.DataFrame]:
    out = {name: pd.DataFrame(columns=["model", "dataset"]) for name in PAPER2_TABLES}
    out.update({k: pd.DataFrame(v) for k, v in rows.items()})
    return out


def test_sections_hold_the_tables_rows_with_their_intervals():
    dec = {
        "model": ["m"],
        "dataset": ["d"],
        "condition": ["rope"],
        "window": ["all"],
        "target": ["logattn"],
    }
    for k, (est, lo, hi) in {
        "total": (0.25, 0.2, 0.3),
        "residual_stream": (np.nan, np.nan, np.nan),
        "causal_mask": (0.2, 0.15, 0.25),
        "share_causal_mask": (0.8, 0.7, 0.9),
    }.items():
        dec |= {k: [est], f"{k}_lo": [lo], f"{k}_hi": [hi]}
    sink = {
        "model": ["m", "m"],
        "dataset": ["d", "d"],
        "variant": ["causal", "causal"],
        "tau": [0.3, 0.5],
        "fraction": [0.25, np.nan],
    }
    md = paper2_markdown(_tables(decomposition_headline=dec, sink_heads=sink))
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads == [
        "## Headline (expected-map reading): total leakage and component shares, log-attention",
        "## Sink-reading heads (fraction of heads with mean attention to key 0 ≥ τ)",
    ]
    row = next(line for line in md.splitlines() if line.startswith("| m | d | rope"))
    assert row == (
        "| m | d | rope | all | 0.25 [0.2, 0.3] | – | 0.2 [0.15, 0.25] | 80.0 % [70.0, 90.0] |"
    )
    # a missing estimate is a dash, never "nan"; a threshold without a value has no column
    assert "| m | d | causal | 0.25 |" in md and "nan" not in md and "τ = 0.5" not in md


def test_no_rows_no_sections():
    md = paper2_markdown(_tables(), title="T")
    assert md.startswith("# T\n") and "## " not in md


def test_the_dose_series_has_its_section_with_each_runs_reading_and_step():
    doses = {
        "model": ["m", "m"],
        "dataset": ["d", "d"],
        "variant": ["identity_rope+bidirectional", "identity_rope+plant_stream1+bidirectional"],
        "layer": [2, 2],
        "dose": [0.0, 0.175],
        "leakage": [0.0003, 0.0023],
        "leakage_lo": [-0.0012, 0.0008],
        "leakage_hi": [0.0022, 0.0042],
        "step": [np.nan, 0.002],
        "step_lo": [np.nan, 0.0016],
        "step_hi": [np.nan, 0.0024],
    }
    md = paper2_markdown(_tables(plant_doses=doses))
    assert [line for line in md.splitlines() if line.startswith("## ")] == [
        "## Positive control that propagates: a dose series planted in the residual stream "
        "(logits, the model's units, the layers from the plant up)"
    ]
    assert "| m | d | identity_rope+bidirectional | 2 | 0 | 0.0003 [-0.0012, 0.0022] | – |" in md
    assert "| 0.175 | 0.0023 [0.0008, 0.0042] | 0.002 [0.0016, 0.0024] |" in md
    assert "recovered" not in md  # the verdicts are the scorecard's


def test_an_interval_column_a_table_lacks_is_one_empty_cell_per_row():
    """A reading whose columns a table does not carry (a run without it) gives each row an empty
    cell, as many as the table has rows, not an error (all three columns broadcast as scalars)."""
    from causalpos.paper2.tables.markdown import _ci

    df = pd.DataFrame({"effect": [0.5, 0.25], "effect_lo": [0.4, 0.2], "effect_hi": [0.6, 0.3]})
    assert _ci(df, "c_res") == ["–", "–"]
    assert _ci(df.iloc[:0], "c_res") == []
    assert len(_ci(df, "effect")) == 2 and _ci(df, "effect")[0] != "–"
