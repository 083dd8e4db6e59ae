"""causalpos.figures.training_compare: the trained-vs-twin figures draw the tables' numbers, leave
out what the config did not run and say what their marks mean."""

from __future__ import annotations

import figure_inputs as FI
import numpy as np
import pytest

from causalpos.figures import common
from causalpos.figures import training_compare as F


@pytest.fixture
def saved(monkeypatch):
    figs = []
    monkeypatch.setattr(F, "save", lambda fig, paths: figs.append(fig) or common.save(fig, paths))
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
