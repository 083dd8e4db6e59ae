"""causalpos.figures.training_compare: the trained-vs-twin figures draw the tables' numbers, leave
out what the config did not run and say what their marks mean."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

import tests.figures.figure_inputs as FI
from causalpos.figures import training_compare as F


@pytest.fixture
def saved(monkeypatch):
    """The figures as laid out (every artist drawn, no file written: the file is
    test_plot_comparison_writes_the_figure's)."""
    import matplotlib.pyplot as plt

    figs = []

    def lay_out(fig, paths):
        fig.draw_without_rendering()
        figs.append(fig)
        plt.close(fig)

    monkeypatch.setattr(F, "save", lay_out)
    return figs


def test_comparison_leaves_out_the_panel_the_config_did_not_run(tmp_path, saved):
    """The default run decomposes no model trained here: two panels, not an empty (b), and the
    title names what was not run and the key that runs it; with the decomposition, three."""
    assert F.plot_comparison(FI.comparison_table(), [tmp_path / "c.png"]) == ["index", "lengthgen"]
    fig = saved[0]
    visible = [ax for ax in fig.axes if ax.axison]
    assert len(visible) == 2
    assert [ax.get_title().split(")")[0] for ax in visible] == ["(a", "(b"]
    title = " ".join(fig._suptitle.get_text().split())
    assert "not run in this config: paper 2's decomposition (leakage.experiments)" in title
    assert "95 % CI" in title
    index = visible[0]
    assert index.get_ylabel().startswith(F.INDEX_AXIS)
    assert index.get_yscale() == "log"  # the twins' bars, 85 × lower, show
    assert "×r: trained / init twin" in [t.get_text() for t in index.get_legend().get_texts()]
    assert [t.get_text() for t in index.texts] == ["×85.0"] * 4
    full = F.plot_comparison(FI.comparison_table(decomposition=True), [tmp_path / "d.png"])
    assert full == ["index", "decomposition", "lengthgen"]
    assert "not run" not in saved[1]._suptitle.get_text()


def test_index_vs_init_counts_layers_from_0_and_says_what_a_dash_is(tmp_path, saved):
    F.plot_index_vs_init(FI.index_table(), [tmp_path / "i.png"], subject="prompts: KJV")
    fig = saved[0]
    ax = fig.axes[0]
    assert ax.get_xlabel() == "layer (0 = first block)"
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), [0, 1, 2, 3])  # table layers 1..4
    assert ax.texts[0].get_text() == "trained / init twin by layer:\n–, –, 100, 100"
    assert F.NO_RATIO in " ".join(fig._suptitle.get_text().split())


# Error bars from intervals checked to hold their estimates (causalpos.stats.ordered_interval)

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
            "leak_residual_stream": [0.5, 0.01, 0.01],
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
    assert F._with_err(_comparison(), "leak_residual_stream")[1] is None  # no interval columns


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
