"""causalpos.figures.common: the shared style and title, and with them every figure standing
alone — drawn from small synthetic inputs (tests/figures/figure_inputs.py), each names its model and
dataset in its title, labels its axes, and no two of its texts overlap (tests/figures/figure_checks.py)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tests.figures.figure_inputs as FI  # noqa: E402
from causalpos.figures import (  # noqa: E402, F401  (every figure module, for `saved`)
    common,
    paper1,
    paper1_llm,
    paper2,
    paper2_claim1,
    paper2_layers,
    paper2_routes,
    training,
    training_compare,
)
from tests.figures.figure_checks import text_overlaps  # noqa: E402
from tests.figures.figure_inputs import NAMES  # noqa: E402


def test_text_overlaps_finds_run_together_ticks_and_a_title_on_tick_labels():
    """The check the figure tests rely on: ticks 30 positions apart on a 256-wide panel of 2
    inches run together ("120150180"); a title drawn on the tick labels above it is found too;
    the same panel with 4 ticks is clean."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(2, 3))
    top.set_xlim(0, 256)
    top.set_xticks(range(0, 256, 30))
    got = text_overlaps(fig)
    assert ("120", "150") in got and ("210", "240") in got
    assert not any("layer 1" in pair for pair in got)
    fig.subplots_adjust(hspace=0.0)  # the bottom panel's title on the top one's tick labels
    bottom.set_title("layer 1", y=0.8)
    assert any("layer 1" in pair for pair in text_overlaps(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(2, 2))
    common.heatmap(ax, np.zeros((256, 256)))  # at most 4 intervals per axis
    assert text_overlaps(fig) == []
    assert len([t for t in ax.get_xticklabels() if 0 <= t.get_position()[0] <= 255]) <= 5
    plt.close(fig)


def test_suptitle_names_the_subject_and_fits_the_figure():
    fig = plt.figure(figsize=(4, 3))
    text = common.suptitle(fig, "Paper 2 per head", "a model · a dataset", "x " * 80).get_text()
    assert text.startswith("Paper 2 per head — a model · a dataset\n")
    assert max(len(line) for line in text.split("\n")) <= 0.9 * 4 * 72 / (0.6 * 9)
    assert common.ci_text(0.95) == "95 % CI"
    assert common.tick_words("NoPE (causal mask only) · KJV", 12) == "NoPE (causal\nmask only)\nKJV"
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Every figure stands alone.


def _p2(**kw):
    return {"smollm2-135m/kjv-first256": FI.summary(**kw)}


def _two_models():
    return {
        "smollm2-135m/kjv-first256": FI.summary(),
        "smollm2-135m-random/kjv-first256": FI.summary(paper_residual=0.01, seed=1),
    }


SMOLLM2 = [NAMES["smollm2-135m"], NAMES["kjv-first256"]]
BOTH = SMOLLM2 + [NAMES["smollm2-135m-random"]]


def _sim(normalized_row):
    from causalpos.paper1.settings import SimulationSettings
    from causalpos.paper1.simulate import run_simulation

    kw = dict(n_samples=64, seq_len=8, dim=8, n_layers=2, seed=0, n_groups=4)
    stores = [
        run_simulation(SimulationSettings(alpha=a, rope=normalized_row, causal=c, **kw))
        for a, c in ((0.0, True), (0.2, False))
    ]
    return stores


def draw(name: str, path):
    """Draw figure ``name`` into ``path``; returns the words its title must hold."""
    out = [path]
    runs = ["smollm2-135m/kjv-first256/causal", "smollm2-135m-random/kjv-first256/causal"]
    p0 = FI.trajectories()
    if name == "fig1":
        paper1.draw_fig1(out, n=20)
        return ["Paper 1 Fig. 1", "parameter-free"]
    if name in ("sim_raw", "sim_normalized"):
        normalized = name == "sim_normalized"
        paper1.draw_simulation(
            _sim(normalized), ["a", "b"], out, normalized_row=normalized, title="Paper 1 Fig. 4"
        )
        return ["Paper 1 Fig. 4", "parameter-free decoder"]
    if name == "llm_fig5":
        stores = [FI.normalized_store(), FI.normalized_store(scale=0.01)]
        paper1_llm.draw_llm_fig5(stores, runs, out, names=NAMES)
        return ["Paper 1 Fig. 5", *BOTH, "I: non-relativeness index"]
    if name == "llm_appendix":
        paper1_llm.draw_llm_appendix(
            FI.normalized_store(n_layers=10, T=64), runs[0], out, names=NAMES
        )
        return ["Paper 1 App. E", *SMOLLM2]
    if name == "paper2_layers":
        paper2.leakage_by_layer(_p2(), out, names=NAMES, experiment="smollm2")
        return ["experiment smollm2", *SMOLLM2]
    if name == "paper2_layers_two":
        paper2.leakage_by_layer(_two_models(), out, names=NAMES, experiment="smollm2")
        return ["experiment smollm2", *BOTH]
    if name == "paper2_claim1":
        paper2.claim1_by_layer(_two_models(), out, names=NAMES, experiment="smollm2")
        return ["claim 1", *BOTH]
    if name == "paper2_shares":
        paper2.component_shares(_two_models(), out, names=NAMES, experiment="smollm2")
        return ["Eq. 5", *BOTH]
    if name == "paper2_routes":
        paper2_routes.routes_by_layer(_two_models(), out, names=NAMES, experiment="smollm2")
        return ["§3 by layer", "three routes", *BOTH]
    if name == "paper2_heads":
        s = FI.summary(n_layers=30, heads=9)
        paper2.head_maps(s, out, pair="smollm2-135m/kjv-first256", names=NAMES)
        return ["per head", *SMOLLM2]
    if name == "paper2_position0":
        stores = {"smollm2-135m/kjv-first256": p0, "smollm2-135m-random/kjv-first256": p0}
        paper2.position0_conditions(stores, out, names=NAMES, experiment="smollm2")
        return ["position 0", *BOTH]
    if name == "train_loss_curves":
        training.draw_loss_curves(FI.loss_curves(), out, heldout="the held-out books (Ruth)")
        return ["trained here", "held-out books (Ruth)"]
    if name == "train_fig3":
        training.plot_gram_panels(FI.gram_store(), out, model="trained here: RoPE")
        return ["Fig. 3", "trained here: RoPE", "12 held-out sequences"]
    if name == "train_fig8":
        training.plot_layer_scores(FI.gram_store(), out, model="trained here: RoPE")
        return ["Fig. 8", "trained here: RoPE", "12 held-out sequences"]
    if name == "train_loss_by_position":
        training.draw_loss_by_position(FI.lengthgen(), out, smooth=4)
        return ["loss by position", "held-out chunks of 256 tokens", "95 % CI"]
    subject = "prompts: KJV Bible, held-out 128-token chunks"
    if name == "train_index":
        training_compare.plot_index_vs_init(FI.index_table(), out, subject=subject)
        return ["index by layer", subject, "95 % CI"]
    if name == "train_comparison":
        training_compare.plot_comparison(FI.comparison_table(), out, subject=subject)
        return ["side by side", subject, "95 % CI"]
    if name == "train_maps":
        trained = {v: FI.group_store() for v in FI.VARIANTS}
        init = {v: FI.group_store(scale=0.01) for v in FI.VARIANTS}
        training_compare.plot_variant_maps(trained, init, out, subject=subject)
        return ["diagonal-normalized", subject]
    raise KeyError(name)


#: The figures drawn on a larger canvas, with more panels or from more data (the others take
#: about half a second each).
SLOW = {"fig1", "sim_normalized", "llm_fig5", "llm_appendix", "paper2_layers", "paper2_heads"}
SLOW |= {"train_fig3", "train_fig8", "train_maps"}
FIGURES = [
    "fig1",
    "sim_raw",
    "sim_normalized",
    "llm_fig5",
    "llm_appendix",
    "paper2_layers",
    "paper2_layers_two",
    "paper2_claim1",
    "paper2_shares",
    "paper2_routes",
    "paper2_heads",
    "paper2_position0",
    "train_loss_curves",
    "train_fig3",
    "train_fig8",
    "train_loss_by_position",
    "train_index",
    "train_comparison",
    "train_maps",
]


@pytest.fixture
def saved(monkeypatch):
    """Every figure as saved (laid out, positions frozen): each figure module's ``save``
    records the figure after writing it."""
    import sys

    figs = []
    real = common.save

    def capture(fig, paths):
        real(fig, paths)
        figs.append(fig)

    for name, mod in list(sys.modules.items()):
        if name.startswith("causalpos.figures.") and getattr(mod, "save", None) is real:
            monkeypatch.setattr(mod, "save", capture)
    return figs


def _row_and_column_labels(fig) -> list[str]:
    """Each drawn axes with data lacking a y label in its row or an x label in its column."""
    axes = [
        ax
        for ax in fig.axes
        if ax.axison
        and ax.get_visible()
        and (ax.images or ax.lines or ax.collections)
        and ax.get_label() != "<colorbar>"
    ]
    missing = []
    for ax in axes:
        box = ax.get_position()
        row = [a for a in axes if abs(a.get_position().y0 - box.y0) < 0.02]
        column = [a for a in axes if abs(a.get_position().x0 - box.x0) < 0.02]
        if not any(a.get_ylabel().strip() for a in row):
            missing.append(f"y of {ax.get_title()!r}")
        if not any(a.get_xlabel().strip() for a in column) and ax.xaxis.get_ticklabels():
            if any(t.get_text() for t in ax.get_xticklabels()):
                xticks_named = any(len(t.get_text()) > 3 for t in ax.get_xticklabels())
                if not xticks_named:  # ticks that name their bars need no axis label
                    missing.append(f"x of {ax.get_title()!r}")
    return missing


@pytest.mark.parametrize(
    "name", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW else f for f in FIGURES]
)
def test_every_figure_stands_alone(name, tmp_path, saved):
    """Its title names what it shows and of which model and dataset (display names, not
    slugs), every panel's axes are labelled in its row and column, and no two drawn texts
    overlap (tick labels of one axis included)."""
    words = draw(name, tmp_path / f"{name}.png")
    assert (tmp_path / f"{name}.png").stat().st_size > 1000
    (fig,) = saved
    title = fig._suptitle.get_text() if fig._suptitle else ""
    flat = " ".join(title.split())
    for w in words:
        assert w in flat, (w, title)
    assert "smollm2-135m/" not in flat and "kjv-first256" not in flat  # no slugs
    assert _row_and_column_labels(fig) == []
    assert text_overlaps(fig) == []
