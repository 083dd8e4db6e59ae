"""The notebook API (causalpos.api): its numbers are the pipeline's on the smoke run's stores (the
same tokens, the same tiny models, the same settings), its names resolve without importing
anything heavy, its reference is built by pdoc from the docstrings, and the notebook example
runs on a tiny model."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

import causalpos.paths as P
from causalpos.catalogue import BY_NAME
from causalpos.scorecard.controls import with_verdicts
from tests.wfutil import REPO, SMOKE

DATASET = "kjv-first24"
#: The smoke run's tiny models: a random-init Llama (runs causal, bidirectional) and the model
#: trained here, with the controls experiment's planted and stream-dosed runs beside them.
MODELS = ("tiny-random", "trained-rope")


@pytest.fixture(scope="module")
def smoke(smoke_pipeline):
    """(the smoke run's directory, its resolved config)."""
    from snakemake.utils import validate

    from causalpos.config import Resolved

    cfg = yaml.safe_load((smoke_pipeline / SMOKE).read_text())
    validate(cfg, str(smoke_pipeline / "workflow" / "schemas" / "config.schema.yaml"))
    return smoke_pipeline, Resolved(cfg)


def _inputs(smoke, model):
    """(the loaded model, its data store opened, the extraction settings of the smoke run)."""
    from causalpos.capture.settings import ExtractSettings
    from causalpos.io.store import open_dataset
    from causalpos.models.load import load_model

    root, cfg = smoke
    loaded, _ = load_model(root / P.MODEL_DIR.format(model=model), device="cpu", dtype="float32")
    data = open_dataset(root / cfg.data_store(model, DATASET))
    sec = cfg.config["extract"]
    settings = ExtractSettings(
        batch_size=sec["batch_size"], n_groups=sec["n_groups"], seed=cfg.config["seed"]
    )
    return loaded, data, settings


@pytest.mark.slow  # reads the smoke run (built once per session)
@pytest.mark.parametrize("model", MODELS)
def test_capture_is_the_pipelines_score_store(smoke, model):
    """Every map of causalpos.capture equals the smoke run's final store of the causal run (paper
    1's maps) bit for bit, though the run extracted the 12 prompts in two shards and merged them;
    the bidirectional run beside it has no mask."""
    import causalpos
    from causalpos.io.store import open_dataset

    root, cfg = smoke
    loaded, data, settings = _inputs(smoke, model)
    assert (model, DATASET, "causal") in cfg.paper1_triples() and cfg.n_shards(DATASET) == 2
    got = causalpos.capture(loaded, data, ["causal", "bidirectional"], extract=settings)
    assert got["score_mean"].dims == ("variant", "layer", "head", "query", "key")
    assert got["variant"].values.tolist() == ["causal", "bidirectional"]
    assert "score_maps" not in got
    store = open_dataset(root / P.SCORE_STORE.format(model=model, dataset=DATASET, variant="causal"))  # fmt: skip
    for name in ("score_mean", "score_m2"):
        a, b = got[name].sel(variant="causal").values, store[name].values
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_array_equal(a, b)  # NaN where masked, in both
    assert int(got["n_sequences"].sel(variant="causal")) == int(store["n_sequences"]) == 12
    assert got["layer_kind"].values.tolist() == store["layer_kind"].values.tolist()
    causal = got["score_mean"].sel(variant="causal").values
    assert np.isnan(causal[..., 0, 1]).all() and not np.isnan(causal[..., 1, 0]).any()
    assert not np.isnan(got["score_mean"].sel(variant="bidirectional").values).any()


@pytest.mark.slow  # reads the smoke run
def test_index_is_the_pipelines_llm_index_table(smoke):
    """causalpos.paper1.index equals every cell of results/stats/llm_index.csv for each of the
    smoke run's paper-1 models, with the run's interval settings."""
    import causalpos.paper1
    from causalpos.paper1.settings import IndexSettings

    root, cfg = smoke
    table = pd.read_csv(root / P.LLM_INDEX_TABLE)
    stats = cfg.llm_stats_params()
    assert stats["twins"] == {}  # no twin among the smoke run's paper-1 models
    settings = IndexSettings(**{k: v for k, v in stats.items() if k != "twins"})
    assert settings.n_boot == 200 and settings.first_keys == 4
    for model in ("tiny-random", "trained-rope"):
        loaded, data, extract = _inputs(smoke, model)
        got = causalpos.paper1.index(loaded, data, settings=settings, extract=extract)
        want = table[table["model"] == model].drop(columns=["model", "dataset"])
        assert len(got) == 2 and got["layer"].tolist() == [1, 2]
        pd.testing.assert_frame_equal(got, want.reset_index(drop=True), check_dtype=False)


def _leakage_inputs(smoke, model):
    """The smoke run's runs of ``model`` (each with its planted term or dose) and its summary and
    reducer settings, as the config resolver gives them to the rules."""
    from causalpos.paper2.settings import LeakageReducerSettings, LeakageSettings

    _, cfg = smoke
    spec = cfg.extraction_params(model, DATASET)
    runs = {
        v: {k: spec[v][k] for k in ("plant", "stream") if k in spec[v]}
        for v in cfg.leakage_variants(model, DATASET)
    }
    summary = LeakageSettings.from_params(cfg.leakage_summary_params())
    red = cfg.pair_reducer(model, DATASET)
    reducer = LeakageReducerSettings(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in red.items()}
    )
    for v in runs:  # the reducer's arguments are the extraction rule's
        assert reducer.reducer_kwargs(v, summary) == cfg.leakage_reducer_kwargs(v, model, DATASET)
    return runs, summary, reducer


#: Each part of the tidy frame, its scope, and the table whose cells it holds (with the
#: columns that find a row).
TABLES = {
    ("leakage", "model"): ("headline", ["variant", "window", "target"]),
    ("decomposition", "model"): ("decomposition_headline", ["condition", "window", "target"]),
    ("components", "model"): ("decomposition_components", ["condition", "landmark", "window"]),
    ("components", "layer"): (
        "decomposition_components_by_layer",
        ["condition", "landmark", "window", "layer"],
    ),
    ("components", "layer_kind"): (
        "decomposition_components_by_kind",
        ["condition", "landmark", "window", "layer_kind"],
    ),
    ("doses", "model"): ("plant_doses", ["variant", "window", "target"]),
}


@pytest.mark.slow  # reads the smoke run
@pytest.mark.parametrize("model", MODELS)
def test_leakage_is_the_pipelines_summary_and_tables(smoke, model):
    """causalpos.paper2.leakage on the smoke run's tokens and model: its summary equals the
    run's summary store in every variable, and its tidy frame holds exactly the cells of the
    run's headline tables (every number with an interval, each once), the headline per layer
    and the controls' verdicts. trained-rope runs seven variants: planted, stream-dosed and
    BOS-replaced runs beside causal and bidirectional."""
    from causalpos.api.paper2 import COLUMNS, leakage_frame, paper2_summary
    from causalpos.io.store import open_dataset

    root, cfg = smoke
    loaded, data, extract = _inputs(smoke, model)
    runs, settings, reducer = _leakage_inputs(smoke, model)
    summary = paper2_summary(
        loaded,
        data,
        runs,
        settings=settings,
        reducer=reducer,
        extract=extract,
        strata=cfg.config["leakage"]["bootstrap_strata"],
        attrs=cfg.model_attrs(model),
    )
    store = open_dataset(root / P.LEAKAGE_STORE.format(model=model, dataset=DATASET))
    assert set(summary.data_vars) == set(store.data_vars) and len(store.data_vars) >= 40
    for name in store.data_vars:
        xr.testing.assert_identical(summary[name].load(), store[name].load())
    rule_only = {"model", "dataset", "code_fingerprint"}  # the script's attrs
    assert set(store.attrs) - set(summary.attrs) == rule_only
    for k in set(summary.attrs) & set(store.attrs):
        assert json.dumps(summary.attrs[k], default=str) == json.dumps(store.attrs[k], default=str), k  # fmt: skip

    frame = leakage_frame(summary)
    assert tuple(frame.columns) == COLUMNS and frame["layer"].dtype == "Int64"
    assert frame.attrs["controls_note"] == store.attrs["controls_note"]
    for (part, scope), (table, keys) in TABLES.items():
        csv = pd.read_csv(root / BY_NAME[table].path, keep_default_na=False, na_values=[""])
        csv = csv[csv["model"] == model]
        rows = frame[(frame["part"] == part) & (frame["scope"] == scope)]
        if table == "plant_doses" and model == "tiny-random":
            assert csv.empty and rows.empty
            continue
        triples = [  # every number with an interval (a TOST interval has no estimate)
            c[:-3]
            for c in csv.columns
            if c.endswith("_lo")
            and f"{c[:-3]}_hi" in csv
            and (c[:-3] in csv or f"{c[:-3]}_estimate" in csv)
        ]
        assert len(rows) == len(csv) * len(triples) > 0, (part, scope)
        run = keys[0]
        for r in rows.itertuples():
            sel = csv[run] == r.run
            for k in keys[1:]:
                sel &= csv[k].astype(str) == str(getattr(r, k))
            (i,) = np.flatnonzero(sel)
            cell = csv.iloc[i]
            np.testing.assert_array_equal(
                [r.estimate, r.lo, r.hi],
                np.asarray(
                    [cell[r.quantity], cell[f"{r.quantity}_lo"], cell[f"{r.quantity}_hi"]],
                    dtype=float,
                ),
                err_msg=f"{table}: {r}",
            )
    by_layer = frame[(frame["part"] == "leakage") & (frame["scope"] == "layer")]
    exp = store["leakage_layer"]
    assert len(by_layer) == exp.size // 3
    for r in by_layer.itertuples():
        sel = dict(variant=r.run, window=r.window, target=r.target, layer=r.layer)
        assert [r.estimate, r.lo, r.hi] == exp.sel(**sel).values.tolist()
        assert r.layer_kind == str(store["layer_kind"].sel(layer=r.layer).values)
    headline = pd.read_csv(root / P.paper2_table("headline"), keep_default_na=False)
    headline = headline[headline["model"] == model]
    rows = frame[(frame["part"] == "leakage") & (frame["quantity"] == "leakage")]
    rows = rows[rows["scope"] == "model"]
    assert set(rows["verdict"]) == {""}  # a run's headline row: a number, no verdict
    units = frame[(frame["part"] == "leakage") & (frame["quantity"] == "control_model_units")]
    judged = with_verdicts("headline", headline)
    assert sorted(units["verdict"]) == sorted(judged["control_verdict"])


def test_the_notebook_names_resolve_without_importing_anything_heavy():
    """``causalpos.capture``, ``causalpos.paper1.index``, ``causalpos.paper2.leakage`` and
    ``causalpos.tokenize_texts`` are the API's functions; reaching them imports neither torch,
    transformers, xarray nor pandas (light jobs import the packages), and ``causalpos.capture``
    stays the capture package (its modules import as before)."""
    code = """
import sys
import causalpos
assert causalpos.paper1.index.__name__ == "paper1_index"  # after `import causalpos` alone
import causalpos.api.paper1, causalpos.api.paper2, causalpos.api.scores, causalpos.sampling
assert causalpos.paper1.index is causalpos.api.paper1.paper1_index
assert causalpos.paper2.leakage is causalpos.api.paper2.paper2_leakage
assert causalpos.tokenize_texts is causalpos.sampling.tokenize_texts
assert callable(causalpos.capture) and causalpos.capture.__name__ == "causalpos.capture"
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "xarray", "pandas"))
assert not heavy, heavy
import causalpos.capture.settings
assert causalpos.capture is sys.modules["causalpos.capture"] and callable(causalpos.capture)
for name in ("nothing", "leakage_summary"):
    for mod in (causalpos, causalpos.paper1, causalpos.paper2):
        try:
            getattr(mod, name)
        except AttributeError as exc:
            assert name in str(exc)
        else:
            raise AssertionError((mod, name))
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_api_reference_is_built_from_the_docstrings(tmp_path):
    """pdoc builds the reference (docs/api.md's command) with a page for each of the API's
    functions and settings, each with its signature and the docstring's text."""
    from causalpos.api import REFERENCE_MODULES

    doc = (REPO / "docs" / "api.md").read_text()
    assert f"pdoc -d google -o docs/reference {' '.join(REFERENCE_MODULES)}" in doc
    out = subprocess.run(
        [sys.executable, "-m", "pdoc", "-d", "google", "-o", str(tmp_path), *REFERENCE_MODULES],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert out.returncode == 0, out.stderr
    pages = {
        "causalpos/api/scores.html": ["capture", "token_dataset", "variant_specs"],
        "causalpos/api/paper1.html": ["paper1_index"],
        "causalpos/api/paper2.html": ["paper2_leakage", "paper2_summary", "leakage_frame"],
        "causalpos/sampling.html": ["tokenize_texts"],
        "causalpos/capture/settings.html": ["ExtractSettings"],
        "causalpos/paper1/settings.html": ["IndexSettings"],
        "causalpos/paper2/settings.html": ["LeakageSettings", "LeakageReducerSettings"],
    }
    for page, names in pages.items():
        html = (tmp_path / page).read_text()
        for name in names:
            assert f'id="{name}"' in html, (page, name)
    scores = (tmp_path / "causalpos/api/scores.html").read_text()
    assert "per_sequence" in scores and "score_mean" in scores  # the signature and the docstring
    assert "the controls' verdicts" in (tmp_path / "causalpos/api/paper2.html").read_text()


def test_the_notebook_example_runs_on_a_tiny_model(tmp_path, tokenizer_bos, monkeypatch):
    """docs/examples/notebook_api.py run as a script on a random-init tiny Llama saved with the
    tests' BPE tokenizer: its captured maps, paper 1's index and paper 2's frame are what each
    promises (shapes, masks, one row a layer, the decomposition's identity, a control's
    verdict)."""
    import torch
    from transformers import AutoModelForCausalLM

    from causalpos.models.architectures import architecture_config

    torch.manual_seed(0)
    cfg = architecture_config("llama", "tiny", {"vocab_size": len(tokenizer_bos)})
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    tokenizer_bos.save_pretrained(tmp_path)
    monkeypatch.setenv("CAUSALPOS_EXAMPLE_MODEL", str(tmp_path))
    ns = runpy.run_path(str(REPO / "docs" / "examples" / "notebook_api.py"))

    tokens, scores, index, leak = ns["tokens"], ns["scores"], ns["index"], ns["leak"]
    assert tokens["tokens"].shape == (24, 64) and tokens.attrs["mode"] == "chunks"
    assert (tokens["tokens"].values[:, 0] == tokenizer_bos.bos_token_id).all()
    mean = scores["score_mean"]
    assert mean.dims == ("variant", "layer", "head", "query", "key") and mean.shape[:2] == (2, 2)
    causal, ring = mean.sel(variant="causal").values, mean.sel(variant="ring").values
    assert np.isnan(causal[:, :, 0, 1:]).all() and not np.isnan(ring).any()
    assert index["layer"].tolist() == [1, 2] and (index["ci_lo"] <= index["index"]).all()
    comp = leak[(leak["part"] == "components") & (leak["run"] == "rope")]
    comp = comp[(comp["scope"] == "model") & (comp["landmark"] == "modelled")]
    est = comp.set_index(["window", "quantity"])["estimate"]
    for w in comp["window"].unique():  # total = residual stream + causal mask, exactly
        assert est[(w, "total")] == pytest.approx(
            est[(w, "residual_stream")] + est[(w, "causal_mask")], rel=1e-12, abs=1e-15
        )
    controls = leak[(leak["part"] == "controls") & (leak["quantity"] == "negative")]
    assert set(controls["run"]) == {"identity_rope+ring"}
    assert set(controls["verdict"]) <= {"passed", "reads position", "underpowered"}
    assert len(ns["by_layer"]) == 2 * 4  # two layers, four components
