"""Paper 1 figures: each is written and draws the numbers of its source (closed form or store)."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos.figures import paper1 as F
from causalpos.figures import paper1_llm as FL
from causalpos.figures.labels import setting_name
from causalpos.paper1 import theory as T
from causalpos.paper1.diagonal import non_relativeness_index, normalize
from causalpos.paper1.settings import SimulationSettings
from causalpos.paper1.simulate import run_simulation


@pytest.fixture(scope="module")
def stores():
    kw = dict(n_samples=512, seq_len=12, dim=16, n_layers=3, seed=0, n_groups=8)
    return {
        "l2": run_simulation(SimulationSettings(alpha=0.0, **kw)),
        "ln": run_simulation(
            SimulationSettings(alpha=0.2, norm="layernorm", scaling="sqrt_d", **kw)
        ),
        "rope_bidir": run_simulation(SimulationSettings(alpha=0.0, rope=True, causal=False, **kw)),
    }


@pytest.mark.slow
def test_fig1_annotates_the_closed_form(tmp_path):
    paths = [tmp_path / "fig1.png", tmp_path / "fig1.pdf"]
    got = F.draw_fig1(paths)
    assert all(p.stat().st_size > 10_000 for p in paths)
    np.testing.assert_array_equal(got["layer2_n3"], T.layer2_matrix(3, 0.0), strict=True)
    # row-major over the lower triangle: (1,1) (2,1) (2,2) (3,1) (3,2) (3,3)
    assert got["annotations"] == ["1.000", "0.154", "1.000", "0.132", "0.151", "1.000"]
    lim = got["clims"]["second layer, closed form, α = 0\n(diagonal = 1, blank)"]
    off = T.layer2_matrix(50, 0.0)[np.tril_indices(50, -1)]
    assert lim == (off.min(), off.max())


@pytest.mark.slow
def test_simulation_figure_limits_and_rows(tmp_path, stores):
    paths = [tmp_path / "sim.png"]
    got = F.draw_simulation(
        [stores["l2"], stores["ln"], stores["rope_bidir"]],
        ["l2", "ln", "rope"],
        paths,
        normalized_row=True,
        title="test",
    )
    assert paths[0].stat().st_size > 10_000
    rows = got["rows"]
    assert [(r["label"], r["kind"]) for r in rows] == [
        ("l2", "raw"),
        ("l2", "normalized"),
        ("ln", "raw"),
        ("ln", "normalized"),
        ("rope", "raw"),
        ("rope", "normalized"),
    ]
    # raw rows: the diagonal (the constant raw_limits gives) blank, the colour range the other
    # cells' (as Fig. 1), so the off-diagonal structure is not flattened by the diagonal
    for r, name in ((0, "l2"), (2, "ln")):
        raw = stores[name]["score"].values
        off = raw[:, ~np.eye(raw.shape[-1], dtype=bool)]
        off = off[np.isfinite(off)]
        assert (rows[r]["vmin"], rows[r]["vmax"]) == (off.min(), off.max())
        assert rows[r]["vmax"] < 0.9 * F.raw_limits(stores[name].attrs)[1]
    for r in rows[1::2]:
        assert r["vmin"] == -r["vmax"] and r["vmax"] > 0
        assert r["layers"] == 3
    norm = stores["rope_bidir"]["score_normalized"].values
    np.testing.assert_allclose(
        rows[5]["index"], non_relativeness_index(norm, normalized=True), rtol=1e-12
    )
    assert len(rows[5]["noise_floor"]) == 3 and rows[0]["index"] is None


def test_raw_limits_follow_the_diagonal_logit(stores):
    for name in ("l2", "ln"):
        ds = stores[name]
        lo, hi = F.raw_limits(ds.attrs)
        diag = np.diagonal(ds["score"].values, axis1=1, axis2=2)
        np.testing.assert_allclose(diag, hi, rtol=1e-3)  # LN: eps shrinks sqrt(d) by ~1e-4
        assert lo == 0.0
    assert F.raw_limits({"norm": "layernorm", "scaling": "d", "dim": 64}) == (0.0, 1.0)
    assert F.raw_limits({"norm": "layernorm", "scaling": "none", "dim": 64}) == (0.0, 64.0)


def test_setting_name_names_everything():
    desc = setting_name(
        {
            "alpha": 0.5,
            "norm": "layernorm",
            "scaling": "sqrt_d",
            "rope": True,
            "rope_theta": 10000.0,
            "causal": False,
            "residual": False,
        }
    )
    assert desc == "α = 0.5, LayerNorm, QKᵀ/√d, RoPE θ=10000, bidirectional, no residual"


def test_simulation_figure_rejects_mismatched_labels(tmp_path, stores):
    with pytest.raises(ValueError, match="one label per store"):
        F.draw_simulation(
            [stores["l2"]], ["a", "b"], [tmp_path / "x.png"], normalized_row=False, title="t"
        )


def _heatmap_figure(seed: int):
    import matplotlib.pyplot as plt

    from causalpos.figures import common

    rng = np.random.default_rng(seed)
    fig, axes = plt.subplots(2, 3, figsize=(7, 4.5), layout="constrained")
    for i, ax in enumerate(axes.ravel()):
        im = common.heatmap(ax, rng.normal(size=(9, 9)), title=f"panel {i}")
    fig.colorbar(im, ax=axes[:, -1].tolist(), label="value")
    fig.suptitle("two rows")
    return fig


def test_save_writes_savefigs_png_and_a_pdf_of_its_box(tmp_path):
    """figures.common.save lays a figure out once: its PNG is what savefig(bbox_inches="tight")
    writes, byte for byte, and its PDF has the PNG's size (at 72 points per inch)."""
    import io
    import re

    from PIL import Image

    from causalpos.figures import common

    want = io.BytesIO()
    _heatmap_figure(1).savefig(want, format="png", dpi=common.DPI, bbox_inches="tight")
    paths = [tmp_path / "sub" / "f.png", tmp_path / "f.pdf"]
    common.save(_heatmap_figure(1), paths)
    assert paths[0].read_bytes() == want.getvalue()
    w_px, h_px = Image.open(paths[0]).size
    box = re.search(rb"/MediaBox \[ *0 0 ([\d.]+) ([\d.]+) *\]", paths[1].read_bytes())
    w_pt, h_pt = float(box.group(1)), float(box.group(2))
    assert w_pt == pytest.approx(w_px * 72 / common.DPI, abs=0.5)
    assert h_pt == pytest.approx(h_px * 72 / common.DPI, abs=0.5)


def test_rows_are_labelled_by_what_they_are_not_by_their_slugs(tmp_path, stores, monkeypatch):
    """Simulation rows by their setting's words (α, norm, scaling, PE, mask), Fig. 5's rows by
    the models' display names (what differs between rows; the title names the rest), with the
    index I defined in the title and layers counted from 0."""
    import tests.figures.figure_inputs as FI
    from causalpos.figures import common

    figs = []

    def save(fig, paths):
        figs.append(fig)
        common.save(fig, paths)

    monkeypatch.setattr(F, "save", save)
    monkeypatch.setattr(FL, "save", save)
    F.draw_simulation(
        [stores["l2"]],
        ["l2_a000"],
        [tmp_path / "s.png"],
        normalized_row=True,
        title="Paper 1 Fig. 4",
    )
    runs = ["smollm2-135m/kjv-first256/causal", "smollm2-135m-random/kjv-first256/causal"]
    FL.draw_llm_fig5(
        [FI.normalized_store(T=32), FI.normalized_store(T=32, scale=0.1)],
        runs,
        [tmp_path / "f.png"],
        names=FI.NAMES,
    )
    sim, fig5 = figs
    ylabels = [ax.get_ylabel() for ax in sim.axes if ax.get_ylabel()]
    assert ylabels[0].startswith("α = 0, L2, QKᵀ, no PE,\ncausal\nraw logits")
    assert not any("l2_a000" in y for y in ylabels)
    assert sim.axes[0].get_title() == "layer 0"
    rows = [ax.get_ylabel() for ax in fig5.axes if ax.get_ylabel().endswith("query position")]
    assert rows == [
        "SmolLM2-135M-Instruct (Q4_1)\nquery position",
        "SmolLM2-135M-Instruct, random init\nquery position",
    ]
    title = " ".join(fig5._suptitle.get_text().split())
    assert "KJV Bible, first 256 tokens (BOS) · causal (as trained)" in title
    assert "I: non-relativeness index" in title


def test_fig5_panels_give_the_index_without_key0(tmp_path):
    """Fig. 5's panel titles: the index of the raw map's queries and keys >= 1 (the table's), not
    of the drawn map, whose normalization spreads key 0 over every offset."""
    import tests.figures.figure_inputs as FI

    ds = FI.normalized_store(T=16)
    raw = ds["score_mean_head_avg"].values.astype(np.float64)
    raw[:, 1:, 0] += 5.0  # a sink column: the drawn map's index takes it, the panel's does not
    ds["score_mean_head_avg"] = (("layer", "query", "key"), raw)
    ds["score_normalized_mean"] = (("layer", "query", "key"), normalize(raw))
    run = "smollm2-135m/kjv-first256/causal"
    drawn = FL.draw_llm_fig5([ds], [run], [tmp_path / "f.png"], names=FI.NAMES)[run]
    np.testing.assert_allclose(drawn, non_relativeness_index(raw[:, 1:, 1:]), rtol=1e-12)
    with_key0 = non_relativeness_index(normalize(raw), normalized=True)
    assert np.all(with_key0 > np.asarray(drawn) + 0.5)
    with pytest.raises(ValueError, match="score_mean_head_avg"):
        FL.draw_llm_fig5([ds.drop_vars("score_mean_head_avg")], [run], [tmp_path / "g.png"])
