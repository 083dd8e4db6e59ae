"""Tests of causalpos.figures.paper2: each figure plots the summary's numbers, the headline first
(summaries built from tests/paper2_headline_runs.py's stores over several layers)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from causalpos.catalogue_stores import LEAKAGE_SUMMARY, PER_PROMPT
from causalpos.figures import paper2 as F
from causalpos.figures.paper2_layers import CURVES
from causalpos.paper2 import position0 as P_position0
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as L_summary
from tests.paper2_headline_runs import HEADS, N, T, store
from tests.paper2_maps import content_maps

#: The headline's variables (every summary variable but the per-prompt reading's and the sink
#: heads'; the planted model's positive control is the headline's too).
HEADLINE = {
    v.name for v in LEAKAGE_SUMMARY if v.reading != PER_PROMPT and not v.name.startswith("sink_")
}


def without_headline(summary):
    """``summary`` as a run without the headline's statistics writes it."""
    drop = [v for v in summary.data_vars if v in HEADLINE or v.startswith("plant_model")]
    return summary.drop_vars(drop)


FREE = "identity_rope+bidirectional"


def layered(maps: list[np.ndarray], causal: bool) -> xr.Dataset:
    """A leakage store with one layer per entry of ``maps`` (each (n, heads, T, T)), built with
    paper2_headline_runs' one-layer :func:`store`."""
    parts = [store(y, causal).assign_coords(layer=[i]) for i, y in enumerate(maps)]
    return xr.concat(parts, "layer", data_vars="minimal", coords="minimal", compat="override")


@pytest.fixture(scope="module")
def stores() -> dict[str, xr.Dataset]:
    """paper2_headline_runs' runs over three layers: a causal run whose planted query effect grows
    with depth, its ablation carrying half of it, and a position-free run."""
    rng = np.random.default_rng(11)
    maps: dict[str, list[np.ndarray]] = {v: [] for v in ("causal", "bidirectional", FREE)}
    for layer in range(3):
        free, _ = content_maps(N, HEADS, T, rng)
        planted = (0.5 + layer) * np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
        leaky, _ = content_maps(N, HEADS, T, rng, planted=planted)
        maps["causal"].append(leaky)
        maps["bidirectional"].append(free + 0.5 * (leaky - free).mean(0))
        maps[FREE].append(free)
    out = {v: layered(m, v == "causal") for v, m in maps.items()}
    out["ring"] = out["bidirectional"]  # the decomposition's ablation: the same maps here
    return out


def summarise(stores: dict[str, xr.Dataset]) -> xr.Dataset:
    return L_summary.leakage_summary(
        stores,
        LeakageSettings(n_boot=100, n_perm=0, seed=0, bos_windows=("late",)),
        position_free_runs=[v for v in stores if v == FREE],
    )


@pytest.fixture(scope="module")
def summary(stores) -> xr.Dataset:
    """The summary, token 0 one fixed id (a BOS): the mask-free route applies."""
    return summarise(stores).assign_attrs(token0_fixed=1, token0_ids=[1])


def per_layer(arr: xr.DataArray) -> np.ndarray:
    return arr.transpose("layer", "stat").sel(stat=["estimate", "lo", "hi"]).values


def test_leakage_by_layer_draws_the_headline_first_in_one_unit(summary, tmp_path):
    paths = [tmp_path / "by_layer.png", tmp_path / "by_layer.pdf"]
    got = F.leakage_by_layer({"tiny": summary}, paths, per_prompt=True)
    for p in paths:
        assert p.stat().st_size > 1000
    # the normaliser dwarfs the decomposition here: each reading gets a row of its own scale
    rows = ["headline", "headline_scale", "counted", "counted_scale", "per_prompt"]
    assert list(got["tiny"]) == rows  # per-prompt last
    w = str(summary["window"].values[0])
    assert w == "all"
    comp = summary["components_layer"].sel(condition="rope", window=w)
    for row, lm in (("headline", "modelled"), ("counted", "counted")):
        drawn = {**got["tiny"][row], **got["tiny"][f"{row}_scale"]}
        # every curve with a number, the position-free control among them (no window edges:
        # this model has no windows)
        assert set(drawn) == set(CURVES) - {"window_edges"}
        assert set(got["tiny"][f"{row}_scale"]) == {"normaliser"}
        for k, arr in drawn.items():
            np.testing.assert_array_equal(arr, per_layer(comp.sel(landmark=lm, component_full=k)))
    head = {**got["tiny"]["headline"], **got["tiny"]["headline_scale"]}
    assert head["total"].shape == (3, 3)
    # the drawn total is the causal run's own headline per layer (one denominator per layer)
    np.testing.assert_allclose(
        head["total"],
        per_layer(summary["leakage_layer"].sel(variant="causal", window=w, target="logattn")),
        rtol=1e-12,
    )
    # the components add in the drawn unit; the planted effect grows with depth
    np.testing.assert_allclose(
        head["causal_mask"][:, 0], head["total"][:, 0] - head["residual_stream"][:, 0]
    )
    assert np.all(np.diff(head["total"][:, 0]) > 0)
    assert np.isnan(head["artefact"][:, 1:]).all() and np.isfinite(head["artefact"][:, 0]).all()
    dl = summary["per_prompt_decomposition_layer"].sel(per_prompt_condition="rope")
    np.testing.assert_array_equal(
        got["tiny"]["per_prompt"]["total"], per_layer(dl.sel(component="total"))
    )
    np.testing.assert_array_equal(
        got["tiny"]["per_prompt"]["logit"],
        per_layer(summary["per_prompt_leakage_layer"].sel(variant="causal", target="logit")),
    )
    # by default the per-prompt reading is not drawn where the headline is
    assert list(F.leakage_by_layer({"tiny": summary}, [tmp_path / "d.png"])["tiny"]) == rows[:-1]


def test_leakage_by_layer_without_an_ablation_run_or_a_headline(stores, summary, tmp_path):
    causal_only = summarise({"causal": stores["causal"]})
    assert "components_layer" not in causal_only
    no_headline = without_headline(summary)
    got = F.leakage_by_layer(
        {"full": summary, "causal-only": causal_only, "no-headline": no_headline},
        [tmp_path / "mixed.png"],
    )
    assert list(got["full"]) == ["headline", "headline_scale", "counted", "counted_scale"]
    assert list(got["causal-only"]) == ["headline"]
    np.testing.assert_array_equal(
        got["causal-only"]["headline"]["total"],
        per_layer(
            causal_only["leakage_layer"].sel(variant="causal", window="all", target="logattn")
        ),
    )
    # the same causal run, the same prompts: the same headline total as the decomposed summary
    np.testing.assert_allclose(
        got["causal-only"]["headline"]["total"][:, 0], got["full"]["headline"]["total"][:, 0]
    )
    # no headline at all: the per-prompt reading is drawn, below a note in the headline row
    assert list(got["no-headline"]) == ["per_prompt"]
    with pytest.raises(ValueError, match="no summaries"):
        F.leakage_by_layer({}, [tmp_path / "x.png"])


def test_component_shares_four_readings_with_the_paper_band(summary, tmp_path):
    got = F.component_shares({"tiny": summary, "tiny-again": summary}, [tmp_path / "shares.png"])
    assert (tmp_path / "shares.png").stat().st_size > 1000
    assert list(got) == ["tiny/rope", "tiny-again/rope"]
    comp = summary["components"].sel(condition="rope", window="all")
    assert got["tiny/rope"].shape == (4, 3)
    for k, (lm, name, _) in enumerate(F.SHARE_READINGS):
        np.testing.assert_array_equal(
            got["tiny/rope"][k],
            comp.sel(landmark=lm, component_full=name, stat=["estimate", "lo", "hi"]).values,
        )
    # paper 2's reading (key 0 counted, the ablation's log-attention) is the last, and each
    # plotted share is 1 − residual / total of its own reading
    assert F.SHARE_READINGS[-1][:2] == ("counted", "share_causal_mask_paper")
    e = comp.sel(stat="estimate")
    for k, (lm, name, _) in enumerate(F.SHARE_READINGS):
        res = "residual_stream_paper" if name.endswith("_paper") else "residual_stream"
        x = e.sel(landmark=lm)
        want = 1 - float(x.sel(component_full=res)) / float(x.sel(component_full="total"))
        assert got["tiny/rope"][k, 0] == pytest.approx(want, rel=1e-9)
    assert F.PAPER2_SHARE == (0.64, 0.82)
    # no decomposition on the headline: a note, nothing plotted
    bare = without_headline(summary)
    assert F.component_shares({"bare": bare}, [tmp_path / "none.png"]) == {}
    assert (tmp_path / "none.png").stat().st_size > 1000


def test_without_a_fixed_token_0_the_mask_free_readings_are_not_drawn(summary, tmp_path):
    """The ring's logits (the residual stream on the ablation mapping, the mask-free route) read
    0 by symmetry where token 0 varies: the tables mark them not applicable, and so do the
    figures — left out of the layers figure (said below it), NaN in the shares figure — while
    the readings that do not rest on it keep their numbers."""
    varying = summary.assign_attrs(token0_fixed=0, token0_ids=[3, 4])
    comp = varying["components"].sel(condition="rope", window="all")
    assert np.isfinite(comp.sel(component_full="share_causal_mask").values).all()
    got = F.leakage_by_layer({"tiny": varying}, [tmp_path / "layers.png"])["tiny"]
    drawn = {**got["headline"], **got.get("headline_scale", {})}
    assert "residual_stream" not in drawn and "causal_mask" in drawn
    shares = F.component_shares({"tiny": varying}, [tmp_path / "shares.png"])["tiny/rope"]
    for k, (lm, name, _) in enumerate(F.SHARE_READINGS):
        want = comp.sel(landmark=lm, component_full=name, stat=["estimate", "lo", "hi"])
        if name == "share_causal_mask":
            assert np.isnan(shares[k]).all()
        else:
            np.testing.assert_array_equal(shares[k], want.values)


def test_head_maps_draw_the_headline_and_mark_bh_heads(summary, tmp_path):
    got = F.head_maps(summary, [tmp_path / "heads.png"], variants=("causal", FREE))
    assert (tmp_path / "heads.png").stat().st_size > 1000
    assert list(got) == [f"{v}/{t}" for t in ("logit", "logattn") for v in ("causal", FREE)]
    for key, m in got.items():
        v, t = key.split("/")
        sel = dict(variant=v, window="all", target=t)
        np.testing.assert_array_equal(
            m["estimate"], summary["leakage_head"].sel(**sel, stat="estimate").values
        )
        np.testing.assert_array_equal(m["marked"], summary["q_value"].sel(**sel).values <= 0.05)
        assert m["estimate"].shape == (3, HEADS)
    # the leaky causal run's heads are marked, the position-free run's are not
    assert got["causal/logattn"]["marked"].all()
    assert not got[f"{FREE}/logattn"]["marked"].any()
    bare = without_headline(summary)
    per_prompt = F.head_maps(bare, [tmp_path / "bare.png"], alpha=0.5)
    assert list(per_prompt) == ["per_prompt/causal/logattn", "per_prompt/bidirectional/logattn"]
    np.testing.assert_array_equal(
        per_prompt["per_prompt/causal/logattn"]["estimate"],
        summary["per_prompt_leakage_head"].sel(variant="causal", target="logattn", stat="estimate"),
    )
    with pytest.raises(ValueError, match="none of the variants"):
        F.head_maps(summary, [tmp_path / "x.png"], variants=("nope",))


def test_position0_std(tmp_path):
    zero = P_position0.trajectory(np.ones((4, 3, 5)))
    rng = np.random.default_rng(0)
    pos = P_position0.trajectory(rng.normal(size=(4, 3, 5)))
    got = F.position0_std({"causal, BOS": zero, "varying token 0": pos}, [tmp_path / "p0.png"])
    np.testing.assert_array_equal(got["causal, BOS"], 0.0)
    np.testing.assert_array_equal(got["varying token 0"], pos["ratio"].values)
    assert (tmp_path / "p0.png").stat().st_size > 1000


# ---------------------------------------------------------------------------------------------
# Layout: each model on its own y scale; claim 1 by layer; layer kinds.


@pytest.fixture
def drawn(monkeypatch):
    """Figures as drawn: every ``save`` of the paper-2 figure modules lays the figure out (a
    draw without rendering: every artist drawn, the layout engine run) and records its axes (y
    limits, titles, x tick labels, legend labels, shaded spans), then closes it unwritten — the
    recorded values are those of the laid-out figure, and the files (a raster draw each, half of
    such a test's time) are checked by the tests without this fixture and by
    tests/figures/test_common.py, which saves every figure."""
    import matplotlib.pyplot as plt

    from causalpos.figures import common, paper2_claim1, paper2_layers

    figs: list[dict] = []

    def capture(fig, paths):
        fig.draw_without_rendering()
        legends = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
        legends += [
            t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()
        ]
        figs.append(
            {
                "axes": [
                    {
                        "ylim": ax.get_ylim(),
                        "title": ax.get_title(),
                        "xticks": [t.get_text() for t in ax.get_xticklabels()],
                        "yticks": [t.get_text() for t in ax.get_yticklabels()],
                        "spans": [
                            (round(p.get_x(), 6), round(p.get_x() + p.get_width(), 6))
                            for p in ax.patches
                            if hasattr(p, "get_width")
                        ],
                        "markers": [ln.get_marker() for ln in ax.lines],
                        "visible": ax.axison,
                        "xlabel": ax.get_xlabel(),
                    }
                    for ax in fig.axes
                ],
                "legend": legends,
                "size_px": tuple(fig.get_size_inches() * common.DPI),
                "suptitle": fig._suptitle.get_text() if fig._suptitle else "",
                "colorbars": sum(ax.get_label() == "<colorbar>" for ax in fig.axes),
                "ylabel": fig.axes[0].get_ylabel(),
            }
        )
        plt.close(fig)

    for mod in (paper2_layers, paper2_claim1, F):
        monkeypatch.setattr(mod, "save", capture)
    return figs


def scaled(summary: xr.Dataset, factor: float) -> xr.Dataset:
    """The summary with every headline number (``exp_*`` per layer and pooled) times ``factor``:
    a model whose effects are ``factor`` times as large."""
    out = summary.copy()
    for v in ("components_layer", "leakage_layer", "leakage_model", "control_units"):
        out[v] = summary[v] * factor
    return out


KINDS = ["sliding4", "sliding4", "global"]


def test_each_model_has_its_own_y_scale(summary, tmp_path, drawn):
    """A loud model (30 × the effects) beside a quiet one: the quiet one's panels keep a y range
    of its own size, in both per-layer figures (on a shared axis it would be 30 × too wide)."""
    models = {"quiet": summary, "loud": scaled(summary, 30.0)}
    F.leakage_by_layer(models, [tmp_path / "layers.png"])
    F.claim1_by_layer(models, [tmp_path / "claim1.png"])
    layers, claim1 = drawn
    quiet_total = summary["components_layer"].sel(
        condition="rope", window="all", landmark="modelled", component_full="total"
    )
    for fig in (layers, claim1):
        span = {m: [] for m in models}
        for ax in fig["axes"]:
            for m in models:
                if ax["title"].startswith(m + "\n"):
                    span[m].append(ax["ylim"][1] - ax["ylim"][0])
        assert span["quiet"] and span["loud"]
        assert max(span["quiet"]) < 0.2 * min(span["loud"]), fig["suptitle"]
        assert "own y scale" in fig["suptitle"]
    # the quiet model's axis still holds every one of its estimates
    quiet_axes = [a for a in layers["axes"] if a["title"].startswith("quiet\n")]
    top = float(quiet_total.sel(stat="estimate").max())
    assert all(a["ylim"][0] <= 0 <= top <= a["ylim"][1] for a in quiet_axes)


@pytest.mark.slow
def test_grids_stay_legible_at_page_width(summary, tmp_path, drawn):
    """Eight models: at most three panels a row (two for claim 1, whose panels carry a pooled
    axes) and a figure near 10 inches wide, not one row of eight (5,537 px)."""
    from causalpos.figures.common import grid_columns

    assert [grid_columns(n) for n in (1, 2, 3, 4, 5, 6, 7, 8)] == [1, 2, 3, 2, 3, 3, 3, 3]
    assert grid_columns(8, 2) == 2
    with pytest.raises(ValueError, match="at least one panel"):
        grid_columns(0)
    models = {f"m{i}": summary for i in range(8)}
    F.leakage_by_layer(models, [tmp_path / "layers.png"])
    F.claim1_by_layer(models, [tmp_path / "claim1.png"])
    for fig in drawn:
        assert fig["size_px"][0] <= 1700, fig["size_px"]
    layer_panels = [a for a in drawn[0]["axes"] if a["visible"]]
    assert len(layer_panels) == 32  # 8 models × (headline, counted, each with its own scale)


def test_claim1_by_layer_draws_the_headline_per_layer_pooled_and_the_control(summary, tmp_path):
    got = F.claim1_by_layer({"tiny": summary}, [tmp_path / "claim1.png"])
    assert (tmp_path / "claim1.png").stat().st_size > 1000
    p = got["tiny"]
    assert p["window"] == "all" and list(p["kinds"]) == ["global"] * 3
    assert list(p["layers"]) == ["causal", "bidirectional"]
    for v, arr in p["layers"].items():
        np.testing.assert_array_equal(
            arr, per_layer(summary["leakage_layer"].sel(variant=v, window="all", target="logit"))
        )
        np.testing.assert_array_equal(
            p["pooled"][(v, "all layers: 3 layers, all global")],
            summary["leakage_model"].sel(variant=v, window="all", target="logit").values,
        )
    # the position-free control, in the model's units, on the modelled landmark
    (key,) = p["controls"]
    assert key[0] == FREE
    want = summary["control_units"].sel(
        variant=FREE, landmark="modelled", window="all", target="logit"
    )
    np.testing.assert_array_equal(p["controls"][key], want.values)
    # the planted causal run clears the control: its pooled lower limit above the control's upper
    assert p["pooled"][("causal", key[1])][1] > p["controls"][key][2]
    # every drawn estimate lies within the panel
    lo, hi = p["ylim"]
    for arr in [*p["layers"].values(), *p["pooled"].values(), *p["controls"].values()]:
        e = np.asarray(arr).reshape(-1, 3)[:, 0]
        assert np.all((lo <= e) & (e <= hi))
    # no headline: None, with a note in its panel; no summaries: refused
    bare = without_headline(summary)
    assert F.claim1_by_layer({"bare": bare}, [tmp_path / "bare.png"]) == {"bare": None}
    with pytest.raises(ValueError, match="no summaries"):
        F.claim1_by_layer({}, [tmp_path / "x.png"])


def test_claim1_cuts_an_ill_conditioned_interval_at_the_edge(summary, tmp_path, drawn):
    """One layer's interval ±100 (a ratio over a nearly flat map) must not set the scale: it is
    cut at the panel's edge, marked by arrowheads, and every estimate stays inside."""
    wide = summary.copy()
    el = summary["leakage_layer"].copy()
    sel = dict(variant="bidirectional", window="all", target="logit", layer=0)
    el.loc[dict(**sel, stat="lo")] = -100.0
    el.loc[dict(**sel, stat="hi")] = 100.0
    wide["leakage_layer"] = el
    got = F.claim1_by_layer({"wide": wide}, [tmp_path / "wide.png"])["wide"]
    lo, hi = got["ylim"]
    est = np.concatenate([a[:, 0] for a in got["layers"].values()])
    assert lo <= est.min() and est.max() <= hi
    assert hi - lo < 10 * (est.max() - min(est.min(), 0.0))  # not stretched to ±100
    markers = drawn[0]["axes"][0]["markers"]
    assert "^" in markers and "v" in markers  # both ends cut
    # without the wide interval nothing is cut
    F.claim1_by_layer({"tiny": summary}, [tmp_path / "tiny.png"])
    assert "^" not in drawn[1]["axes"][0]["markers"]


def with_kinds(summary: xr.Dataset, kinds=KINDS) -> xr.Dataset:
    return summary.assign_coords(layer_kind=("layer", list(kinds)))


def split_by_kind(summary: xr.Dataset, var: str) -> xr.Dataset:
    """``var`` pooled per layer kind (a dim of kinds, as a summary that pools like with like
    stores it): 2 × the pooled value on the sliding layers, 1 × on the global one."""
    k = xr.DataArray([2.0, 1.0], dims="pool_kind", coords={"pool_kind": ["sliding4", "global"]})
    return summary.assign({var: summary[var] * k})


def test_layer_kinds_read_from_the_store_or_all_global(summary):
    from causalpos.figures.common import kind_dim, kinds_text, pooled_by_kind
    from causalpos.models.layer_kinds import layer_kinds

    assert list(layer_kinds(summary)) == ["global"] * 3
    assert list(layer_kinds(with_kinds(summary))) == KINDS
    assert kinds_text(layer_kinds(summary)) == "3 layers, all global"
    assert kinds_text(KINDS) == "2 sliding4 + 1 global"
    assert (
        kinds_text(["sliding512", "global", "sliding64"]) == "1 sliding64 + 1 sliding512 + 1 global"
    )
    with pytest.raises(ValueError, match=r"\['window4'\] are not layer kinds.*sliding<W>"):
        layer_kinds(with_kinds(summary, ["window4", "global", "global"]))
    pooled = summary["leakage_model"].sel(variant="causal", window="all", target="logit")
    assert kind_dim(pooled) is None and kind_dim(summary["leakage_layer"]) is None
    assert list(pooled_by_kind(pooled, KINDS)) == ["all layers: 2 sliding4 + 1 global"]
    split = split_by_kind(summary, "leakage_model")["leakage_model"]
    assert kind_dim(split) == "pool_kind"
    got = pooled_by_kind(split.sel(variant="causal", window="all", target="logit"), KINDS)
    assert list(got) == ["2 sliding4 layers", "1 global layer"]
    np.testing.assert_allclose(got["2 sliding4 layers"].values, 2 * pooled.values)


def test_per_layer_figures_mark_layer_kinds(summary, tmp_path, drawn):
    """Mixed kinds: titles name them, the global layer (2) is shaded, the legend says so, claim 1
    marks each kind by its marker and pools per kind where the store splits the pooled reading.
    One kind (no coordinate): titles say "all global", nothing shaded."""
    mixed = split_by_kind(with_kinds(summary), "leakage_model")
    F.leakage_by_layer({"mixed": mixed, "plain": summary}, [tmp_path / "layers.png"])
    got = F.claim1_by_layer({"mixed": mixed, "plain": summary}, [tmp_path / "claim1.png"])
    layers, claim1 = drawn
    for fig in (layers, claim1):
        axes = {
            m: [a for a in fig["axes"] if a["title"].startswith(m + "\n")]
            for m in ("mixed", "plain")
        }
        assert all("2 sliding4 + 1 global" in a["title"] for a in axes["mixed"])
        assert all("3 layers, all global" in a["title"] for a in axes["plain"])
        assert all((1.5, 2.5) in a["spans"] for a in axes["mixed"])  # layer 2 shaded
        assert not any((1.5, 2.5) in a["spans"] for a in axes["plain"])
        assert "global layer (grey background)" in fig["legend"]
    assert "sliding4 layer (window 4)" in claim1["legend"] and "global layer" in claim1["legend"]
    mixed_axes = claim1["axes"][0]
    assert "^" in mixed_axes["markers"] and "o" in mixed_axes["markers"]
    m = got["mixed"]
    assert list(m["kinds"]) == KINDS
    base = summary["leakage_model"].sel(variant="causal", window="all", target="logit").values
    np.testing.assert_allclose(m["pooled"][("causal", "2 sliding4 layers")], 2 * base)
    np.testing.assert_allclose(m["pooled"][("causal", "1 global layer")], base)
    assert claim1["axes"][1]["xticks"][:2] == ["pooled\nsliding4", "pooled\nglobal"]
    # mixed kinds without a per-kind split: one pooled reading, said to pool all kinds
    F.claim1_by_layer({"mixed": with_kinds(summary)}, [tmp_path / "unsplit.png"])
    assert drawn[2]["axes"][1]["xticks"][0] == "pooled\nall kinds"


def test_shares_and_head_maps_name_layer_kinds(summary, tmp_path, drawn):
    mixed = with_kinds(summary)
    got = F.component_shares({"mixed": mixed}, [tmp_path / "shares.png"])
    assert list(got) == ["mixed/rope"]
    assert "all layers:\n2 sliding4\n+ 1 global" in drawn[0]["axes"][0]["xticks"][0]
    split = F.component_shares(
        {"split": split_by_kind(mixed, "components")}, [tmp_path / "split.png"]
    )
    assert list(split) == ["split/rope/sliding4", "split/rope/global"]
    np.testing.assert_allclose(split["split/rope/global"], got["mixed/rope"])
    F.head_maps(mixed, [tmp_path / "heads.png"])
    heads = drawn[2]
    assert "\nlayers: 2 sliding4 + 1 global (G: global" in heads["suptitle"]
    assert heads["axes"][0]["yticks"] == ["0 S4", "1 S4", "2 G"]
    F.head_maps(summary, [tmp_path / "plain.png"])
    assert "\n3 layers, all global" in drawn[3]["suptitle"]


def test_position0_conditions_colour_per_store_style_per_condition(tmp_path, drawn):
    rng = np.random.default_rng(1)
    tr = {
        c: P_position0.trajectory(rng.normal(size=(4, 3, 5))).expand_dims(condition=[c])
        for c in ("causal", "bidirectional")
    }
    store_ = xr.concat(list(tr.values()), "condition")
    got = F.position0_conditions({"a": store_, "b": store_}, [tmp_path / "p0.png"])
    assert list(got) == ["a · causal", "a · bidirectional", "b · causal", "b · bidirectional"]
    np.testing.assert_array_equal(got["b · bidirectional"], tr["bidirectional"]["ratio"].values[0])
    # one legend entry per store and per condition, not one per line
    assert drawn[0]["legend"] == ["a", "b", "condition: causal", "condition: bidirectional"]


# ---------------------------------------------------------------------------------------------
# Figures that stand alone (tests/figures/figure_inputs.py's summaries: the numbers are chosen).

GEMMA = "gemma3-270m/kjv-chunks640-bos"
GEMMA_KINDS = ["sliding512"] * 5 + ["global"]


def test_gemma_controls_draws_its_controls_and_paper2s_reading_on_its_own_scale(tmp_path, drawn):
    """Gemma's figure as the default run draws it: paper 2's residual-stream reading (~3) over
    a total near 0.1 gets a row of its own scale instead of flattening the decomposition; the
    controls in the same unit (the position-free run, the window edges) are drawn; the counted
    key-0 column, reading as the headline, is said rather than drawn twice; one model gets a
    wide panel."""
    import tests.figures.figure_inputs as FI
    from causalpos.figures.paper2_layers import WIDE_PANEL

    s = FI.summary(kinds=GEMMA_KINDS, paper_residual=3.0)
    got = F.leakage_by_layer({GEMMA: s}, [tmp_path / "g.png"], names=FI.NAMES)[GEMMA]
    assert list(got) == ["headline", "headline_scale"]
    assert {"control_residual_stream", "window_edges"} <= set(got["headline"])
    assert set(got["headline_scale"]) == {"residual_stream_paper", "artefact"}
    (fig,) = drawn
    head = fig["axes"][0]
    assert head["title"].startswith("Gemma-3 270M (Q4_K_M)\n")
    assert head["ylim"][1] - head["ylim"][0] < 0.5  # the total's scale (0.12), not 3's
    assert "reads as the headline" in " ".join(fig["suptitle"].split())
    assert fig["size_px"][0] >= WIDE_PANEL * 150
    # where the counted column differs, it is drawn, on the headline's scale
    s2 = FI.summary(kinds=GEMMA_KINDS, counted_offset=0.05)
    rows = F.leakage_by_layer({GEMMA: s2}, [tmp_path / "g2.png"])[GEMMA]
    assert list(rows) == ["headline", "headline_scale", "counted", "counted_scale"]
    assert drawn[1]["axes"][0]["ylim"] == drawn[1]["axes"][2]["ylim"]


def test_claim1_numbers_each_control_and_an_ill_conditioned_point_sets_no_scale(tmp_path, drawn):
    """Two position-free controls get two ticks ("control 1", "control 2") and legend entries
    naming each run; a random twin's layer 0 at −0.5 [−7.5, 11] is cut at the edge with its
    numbers under the panel instead of stretching the scale of its 0.01–0.06 readings."""
    import tests.figures.figure_inputs as FI

    s = FI.summary()
    free = s["position_free"].copy()
    free[1] = True  # the bidirectional run as a second control
    cu = s["control_units"].copy()
    cu[1] = cu[2] * 2
    el = s["leakage_layer"].copy()
    el.loc[dict(variant="causal", layer=0)] = [-0.5, -7.5, 11.0]
    s = s.assign(position_free=free, control_units=cu, leakage_layer=el)
    got = F.claim1_by_layer({"smollm2-135m-random/kjv-first256": s}, [tmp_path / "c.png"])
    p = got["smollm2-135m-random/kjv-first256"]
    (fig,) = drawn
    ticks = fig["axes"][1]["xticks"]
    assert ticks[-2:] == ["control 1", "control 2"]
    assert any(lab.startswith("control 2: identity RoPE + ring") for lab in fig["legend"])
    assert p["ylim"][1] - p["ylim"][0] < 0.2  # the readings' scale, not −7.5 to 11
    label = " ".join(fig["axes"][0]["xlabel"].split())
    assert "cut at the edge: causal layer 0 -0.5 [-7.5, 11]" in label


def test_head_maps_name_the_pair_on_one_colour_scale_in_one_row(tmp_path, drawn):
    """30 layers × 9 heads: one row of the four (target, variant) panels, wider than tall (not
    a 960 × 2357 strip), one colour bar for all of them, the model and dataset in the title."""
    import tests.figures.figure_inputs as FI

    s = FI.summary(n_layers=30, heads=9)
    F.head_maps(s, [tmp_path / "h.png"], pair="smollm2-135m/kjv-first256", names=FI.NAMES)
    (fig,) = drawn
    w, h = fig["size_px"]
    assert w > h
    assert fig["colorbars"] == 1
    title = " ".join(fig["suptitle"].split())
    assert "SmolLM2-135M-Instruct (Q4_1) · KJV Bible, first 256 tokens (BOS)" in title


def test_shares_band_in_the_axis_units_and_position0_names_coinciding_lines(tmp_path, drawn):
    import tests.figures.figure_inputs as FI

    F.component_shares({"smollm2-135m/kjv-first256": FI.summary()}, [tmp_path / "s.png"])
    assert "0.64–0.82" in F.PAPER2_SHARE_LABEL and "%" not in F.PAPER2_SHARE_LABEL
    assert drawn[0]["legend"][0] == F.PAPER2_SHARE_LABEL
    assert "(fraction)" in drawn[0]["ylabel"]
    tr = FI.trajectories()
    stores = {"smollm2-135m/kjv-first256": tr, "smollm2-135m-random/kjv-first256": tr}
    F.position0_conditions(stores, [tmp_path / "p.png"], names=FI.NAMES)
    title = " ".join(drawn[1]["suptitle"].split())
    assert (
        "identical lines, drawn on top of each other: SmolLM2-135M-Instruct (Q4_1) · causal = "
        "SmolLM2-135M-Instruct, random init · causal" in title
    )
    markers = drawn[1]["axes"][0]["markers"]
    assert markers[:2] == ["o", "o"] and markers[2:] == ["s", "s"]  # each store its marker
