"""Figures of the models trained here (causalpos.figures.training): the comparison's error bars
are drawn from intervals checked to hold their estimates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from causalpos.figures import training as F

#: The upper bound one ulp below the estimate: the zero-width interval of copies of one prompt.
E = 0.759
BELOW = float(np.nextafter(E, 0.0))


def _comparison() -> pd.DataFrame:
    """Three variants: a zero-width interval with rounding (rope), an interval that does not
    hold its estimate (nope), an ordinary one (ntk)."""
    return pd.DataFrame(
        {
            "variant": ["rope", "nope", "ntk"],
            "index_mean": [E, 0.5, 0.3],
            "index_mean_lo": [E, 0.6, 0.2],
            "index_mean_hi": [BELOW, 0.9, 0.4],
            "leak_total": [E, 0.02, 0.03],
            "leak_total_lo": [E, 0.01, 0.02],
            "leak_total_hi": [BELOW, 0.03, 0.04],
            "leak_residual": [0.5, 0.01, 0.01],
            "leak_causal_mask": [0.259, 0.01, 0.02],
            "excess_beyond_context": [0.1, 0.2, 0.3],
            "excess_beyond_context_lo": [0.05, 0.1, 0.2],
            "excess_beyond_context_hi": [0.15, 0.3, 0.4],
            "confidence": [0.95] * 3,
        }
    )


def test_error_bars_hold_their_estimates():
    est, err = F._with_err(_comparison(), "index_mean")
    np.testing.assert_array_equal(est, [E, 0.5, 0.3])
    np.testing.assert_array_equal(err[:, 0], [0.0, 0.0])  # rounding: onto the estimate
    assert np.isnan(err[:, 1]).all()  # [0.6, 0.9] does not hold 0.5: no bar
    np.testing.assert_allclose(err[:, 2], [0.1, 0.1])
    assert F._with_err(_comparison(), "leak_residual")[1] is None  # no interval columns


def test_plot_comparison_draws_a_zero_width_interval_and_marks_what_it_cannot(
    tmp_path, monkeypatch
):
    """matplotlib refused the table before ("'yerr' must not contain negative values": the
    upper bound one ulp below the estimate); the figure is drawn, the zero-width interval marked
    "CI width 0" and the interval that does not hold its estimate "no CI"."""
    drawn = {}
    monkeypatch.setattr(F, "save", lambda fig, paths: drawn.setdefault("fig", fig))
    F.plot_comparison(_comparison(), [tmp_path / "c.png"])
    ax_index, ax_leak = drawn["fig"].axes[:2]
    assert [t.get_text() for t in ax_index.texts[:2]] == ["CI width 0", "no CI"]
    assert [t.xy for t in ax_index.texts[:2]] == [(0.0, E), (1.0, 0.5)]
    assert [t.get_text() for t in ax_leak.texts] == ["CI width 0"]
    errorbars = next(c for c in ax_index.containers if isinstance(c, ErrorbarContainer))
    bars = errorbars.lines[2][0].get_segments()  # the trained models' bars
    assert bars[0][0][1] == bars[0][1][1] == E and np.isnan(bars[1]).all()
    assert bars[2][:, 1] == pytest.approx([0.2, 0.4])


def test_plot_comparison_writes_the_figure(tmp_path):
    path = tmp_path / "c.png"
    F.plot_comparison(_comparison(), [path])
    assert path.stat().st_size > 10_000
