"""End to end on configs/smoke.yaml in a temporary copy of the pipeline, then rerun guarantees.

The pipeline is copied (as a user's clone would be) so that editing its config or a library module
in the copy emulates a user's edit; the dry runs that follow say what Snakemake would rerun.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from tests.wfutil import SMOKE, planned_jobs, rule_counts, snakemake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pipeline(smoke_pipeline) -> Path:
    """The session's smoke run (tests/conftest.py)."""
    return smoke_pipeline


def test_smoke_run_writes_every_store_and_figure(pipeline):
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    sim = cfg["simulate"]
    for name, setting in sim["settings"].items():
        ds = xr.open_zarr(pipeline / "results" / "sim" / f"{name}.zarr", consolidated=False)
        assert ds["score"].dims == ("layer", "query", "key")
        assert ds["score"].shape == (sim["n_layers"], sim["seq_len"], sim["seq_len"])
        assert ds["score"].dtype == np.float32
        score = ds["score"].values
        upper = np.triu_indices(sim["seq_len"], 1)
        causal = setting.get("causal", True)
        # masked cells are NaN (never +-inf or dtype-min), unmasked cells finite
        assert np.isnan(score[:, upper[0], upper[1]]).all() == causal
        assert np.isfinite(
            score[:, np.tril_indices(sim["seq_len"])[0], np.tril_indices(sim["seq_len"])[1]]
        ).all()
        assert ds.attrs["n_samples"] == sim["n_samples"]
        assert math.isclose(ds.attrs["alpha"], setting["alpha"])
        # L2 without scaling: the diagonal logit is exactly 1 (unit vectors), at every layer
        if not setting.get("norm") == "layernorm":
            np.testing.assert_allclose(np.diagonal(score, axis1=1, axis2=2), 1.0, atol=1e-5)
    for fig in cfg["figures"]["simulation"]:
        for fmt in cfg["figures"]["formats"]:
            path = pipeline / "results" / "figures" / f"sim_{fig}.{fmt}"
            assert path.is_file() and path.stat().st_size > 10_000, path
    theory = pd.read_csv(pipeline / "results" / "sim" / "theory.csv")
    # closed form and exact Gram computation agree to machine precision at every (alpha, i, j)
    assert (theory["closed_form"] - theory["exact_gram"]).abs().max() < 1e-10
    assert set(theory["alpha"]) == {0.0, 0.2}
    index = pd.read_csv(pipeline / "results" / "stats" / "simulation_index.csv")
    assert set(index["setting"]) == set(sim["settings"])
    assert (index["ci_lo"] <= index["ci_hi"]).all()
    # without the mask, RoPE's normalized maps are noise: the index sits at its Monte-Carlo floor
    bidir = index[index["setting"] == "rope_bidir_a000"]
    assert (bidir["index_over_floor"] < 1.5).all() and (bidir["ci_lo"] == 0).all()
    # with the mask and alpha > 0 the non-relative pattern is many noise floors above it by layer 3
    causal = index[(index["setting"] == "l2_a020") & (index["layer"] == 3)]
    assert float(causal["index_over_floor"].iloc[0]) > 5


def test_extraction_stores_from_the_smoke_run(pipeline):
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    ds_cfg = cfg["datasets"]["kjv-first24"]
    t = ds_cfg["seq_len"]
    for model in cfg["paper1_llm"]["models"]:
        scores = xr.open_zarr(
            pipeline / "results" / "scores" / model / "kjv-first24" / "causal.zarr",
            consolidated=False,
        )
        assert scores["score_mean"].dims == ("layer", "head", "query", "key")
        assert scores["score_mean"].dtype == np.float32
        # two shards of 8 and 4 sequences merged into one store of 12
        assert (
            int(scores.attrs["n_sequences"]) == ds_cfg["n_sequences"]
            and int(scores.attrs["n_shards"]) == 2
        )
        mean = scores["score_mean"].values
        upper = np.triu(np.ones((t, t), bool), 1)
        assert np.isnan(mean[..., upper]).all() and np.isfinite(mean[..., ~upper]).all()
        # the group maps are head averages of disjoint groups: their count-weighted mean is the
        # head average of the overall mean map
        g = scores["score_group_mean"].values.astype(np.float64)
        w = scores["group_n_sequences"].values.astype(np.float64)
        np.testing.assert_allclose(
            np.tensordot(w / w.sum(), g, axes=1)[..., ~upper],
            mean.astype(np.float64).mean(axis=1)[..., ~upper],
            atol=2e-5,
        )
        norm = xr.open_zarr(
            pipeline / "results" / "normalized" / model / "kjv-first24" / "causal.zarr",
            consolidated=False,
        )
        nm = norm["score_normalized_mean"].values.astype(np.float64)
        for k in range(t):  # every offset band of the normalized head-average has mean 0
            np.testing.assert_allclose(
                np.diagonal(nm, offset=-k, axis1=1, axis2=2).mean(axis=-1), 0.0, atol=1e-5
            )
    llm = pd.read_csv(pipeline / "results" / "stats" / "llm_index.csv")
    assert set(llm["model"]) == set(cfg["paper1_llm"]["models"])
    card = pd.read_csv(pipeline / "results" / "report" / "scorecard.csv")
    assert "reproduced" in set(card["verdict"])
    assert card["falsified_if"].notna().all()
    assert (
        (pipeline / "results" / "report" / "scorecard.md")
        .read_text()
        .startswith("# Reproduction scorecard")
    )
    # the run's own findings page: every reference of the template filled, or marked where the
    # smoke config does not measure it
    findings = (pipeline / "results" / "report" / "findings.md").read_text()
    assert findings.startswith("<!-- Generated by `causalpos findings`")
    assert "{{" not in findings and "have no value in this run" in findings
    assert "⟨not in this run: " in findings


#: Rules that need no model: their jobs never load torch (1.3 s of CPU each).
NO_TORCH = {
    "merge_scores",
    "diagonal_normalize",
    "aggregate_sim_stats",
    "aggregate_llm_stats",
    "compare_trained",
    "theory_check",
    "scorecard",
    "plot_fig1",
    "plot_simulation",
    "plot_llm_fig5",
    "plot_llm_appendix",
    "plot_gram_figures",
    "plot_loss_curves",
    "plot_loss_by_position",
    "plot_train_comparison",
    "plot_paper2_heads",
    "plot_paper2_layers",
    "plot_paper2_shares",
    "plot_paper2_position0",
    "position0",  # reads the position-0 states extraction stored
    "sample_sequences",  # the tokenizer directory loaded directly (models.tokenizers)
    "leakage",  # paper 2's statistics, in numpy
}


def test_jobs_that_need_no_model_never_load_torch(pipeline):
    """Every job's log ends with whether torch was loaded (causalpos.io.runlog.logged): none of
    the model-free rules' jobs did, and the model rules' did (so the check can tell)."""
    seen: dict[str, set[str]] = {}
    for log in (pipeline / "logs").rglob("*.log"):
        rule = log.relative_to(pipeline / "logs").parts[0]
        last = [line for line in log.read_text().splitlines() if line.startswith("done in")]
        assert last, f"{log}: no 'done in' line"
        seen.setdefault(rule, set()).add(last[-1].rsplit("(", 1)[-1].rstrip(")"))
    assert NO_TORCH <= set(seen), sorted(NO_TORCH - set(seen))
    assert {r: s for r, s in seen.items() if r in NO_TORCH and s != {"no torch"}} == {}
    assert seen["extract_scores"] == seen["train_model"] == {"torch loaded"}


#: The columns of Snakemake's benchmark table, in order (snakemake.benchmark.BenchmarkRecord).
BENCHMARK_COLUMNS = ["s", "h:m:s", "max_rss", "max_vms", "max_uss", "max_pss"]
BENCHMARK_COLUMNS += ["io_in", "io_out", "mean_load", "cpu_time"]


def test_every_job_wrote_its_benchmark_table_named_as_its_log(pipeline):
    """Each job's `benchmark:` table (causalpos.paths.benchmark of its log's name): one row of
    Snakemake's columns timing the whole job, the block its log times included."""
    from causalpos.io.joblog import read_job_logs
    from causalpos.paths import BENCHMARKS_ROOT, benchmark

    jobs = read_job_logs(pipeline / "logs")
    assert len(jobs) >= 40
    tables = {p.relative_to(pipeline).as_posix() for p in (pipeline / BENCHMARKS_ROOT).rglob("*")}
    assert {t for t in tables if t.endswith(".tsv")} == {benchmark(j.job) for j in jobs}
    rss: dict[str, list[float]] = {}
    for job in jobs:
        table = pd.read_csv(pipeline / benchmark(job.job), sep="\t")
        assert list(table.columns) == BENCHMARK_COLUMNS and len(table) == 1, job.job
        row = table.iloc[0]
        # the job's processes from start to end: the log's timed block lies inside (0.05 s for
        # the rounding of both)
        assert row["s"] >= job.wall_s - 0.05, (job.job, row["s"], job.wall_s)
        rss.setdefault(job.rule, []).append(float(row["max_rss"]))
    # jobs that import torch and run for seconds are sampled with torch loaded
    assert min(rss["train_model"]) > 100 and min(rss["extract_scores"]) > 100, rss


def test_job_logs_hold_progress_as_lines_never_carriage_return_frames(pipeline):
    """No job's log holds a \\r frame; the simulation's and the extraction's progress bars and
    transformers' (its weights loaded) are lines: each bar's first and last count."""
    from causalpos.paper1.simulate import DEFAULT_CHUNK

    logs = sorted((pipeline / "logs").rglob("*.log"))
    assert len(logs) >= 40 and [p for p in logs if b"\r" in p.read_bytes()] == []
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    chunks = -(-cfg["simulate"]["n_samples"] // DEFAULT_CHUNK)
    for name in cfg["simulate"]["settings"]:
        lines = (pipeline / "logs" / "simulate" / f"{name}.log").read_text().splitlines()
        counts = [line.split(" [")[0] for line in lines if line.startswith("simulate: ")]
        assert counts == [f"simulate: 0/{chunks} (0%)", f"simulate: {chunks}/{chunks} (100%)"]
    extract = [p for p in logs if p.parts[-4] == "extract_scores"]
    assert extract
    for log in extract:
        lines = log.read_text().splitlines()
        causal = [line.split(" [")[0] for line in lines if line.startswith("extract causal: ")]
        assert len(causal) >= 2 and causal[0].startswith("extract causal: 0/"), log
        assert causal[-1].endswith("(100%)"), log
        assert any(line.startswith("Loading weights: 100%") for line in lines), log


def test_scorecard_of_the_smoke_run_gives_the_verdicts_its_tables_imply(pipeline):
    """The smoke run's own scorecard: every row has a falsification condition and a known verdict;
    the exact layer 3-4 computation differs from the paper, and claim 1 (headline logit leakage
    above its declared threshold) is not run on document openings; the twin is measured."""
    from causalpos import scorecard as S
    from causalpos import verdicts as V

    card = pd.read_csv(pipeline / "results" / "report" / "scorecard.csv", keep_default_na=False)
    assert len(card) > 20
    assert (card["falsified_if"].str.strip() != "").all()
    allowed = {*V.TESTED, *V.CONTROL, *V.POSITIVE_CONTROL, *V.CHECK, *S.SECTIONS["paper 1"]}
    assert set(card["verdict"]) <= allowed
    for section, g in card.groupby("section"):  # each row's verdict is one its section allows
        assert set(g["verdict"]) <= set(S.SECTIONS[section]), section
    verdict = card.set_index("target")["verdict"]
    assert verdict["§4.1 nearby keys score higher (layers 3-4)"] == V.DIFFERS
    # claim 1 needs prompts exchangeable over positions (chunks at random offsets); the smoke
    # prompts are document openings, so it is not run, and says why
    row = card.set_index("target").loc["claim 1 (trained-rope, kjv-first24)"]
    assert row["verdict"] == S.NOT_RUN and "random offsets" in row["note"]
    assert "document openings" in row["note"]
    assert row["reading"] == "expected-map"
    assert verdict["claim 1 (trained-rope-init, kjv-first24)"] == S.MEASURED


def test_trained_vs_init_comparison_agrees_with_the_other_stages(pipeline):
    """The trained-model comparison: its numbers are the llm_index and paper-2 tables' own,
    recomputed."""
    from causalpos.models.load import read_source

    stats = pipeline / "results" / "stats"
    index = pd.read_csv(stats / "train_index.csv")
    cmp = pd.read_csv(stats / "train_comparison.csv").set_index("variant")
    assert list(cmp.index) == ["rope", "nope"] and set(index["weights"]) == {"trained", "init"}
    # trained-rope on kjv-first24 is also a paper1_llm model: same store, seed and n_boot, same numbers
    llm = pd.read_csv(stats / "llm_index.csv")
    llm = llm[llm["model"] == "trained-rope"].sort_values("layer")
    ours = index[(index["variant"] == "rope") & (index["weights"] == "trained")].sort_values(
        "layer"
    )
    np.testing.assert_allclose(ours["index"], llm["index_debiased"], rtol=1e-12)
    np.testing.assert_allclose(
        ours[["ci_lo", "ci_hi"]].to_numpy(),
        llm[["ci_lo", "ci_hi"]].to_numpy(),
        rtol=1e-9,
        atol=1e-15,
    )
    np.testing.assert_allclose(
        ours["minus_init"],
        ours["index"].to_numpy()
        - index[(index["variant"] == "rope") & (index["weights"] == "init")]
        .sort_values("layer")["index"]
        .to_numpy(),
        rtol=1e-12,
    )
    # paper 2 decomposes trained-rope on this dataset (smoke experiment), not trained-nope
    dec = pd.read_csv(stats / "paper2_per_prompt_decomposition.csv")
    dec = dec[(dec["model"] == "trained-rope") & (dec["condition"] == "rope")].iloc[0]
    for comp in ("total", "residual_stream", "causal_mask"):
        assert cmp.loc["rope", f"leak_{comp}"] == dec[comp]
    assert np.isnan(cmp.loc["nope", "leak_total"])
    twin = pd.read_csv(stats / "paper2_per_prompt_decomposition.csv")
    twin = twin[(twin["model"] == "trained-rope-init") & (twin["condition"] == "rope")].iloc[0]
    assert cmp.loc["rope", "init_leak_total"] == twin["total"]
    assert cmp.loc["rope", "init_leak_causal_mask_lo"] == twin["causal_mask_lo"]
    lg = pd.read_csv(stats / "train_lengthgen.csv").set_index("variant")
    assert (cmp["excess_beyond_context"] == lg.loc[cmp.index, "excess_mean"]).all()
    for v in ("rope", "nope"):
        src = read_source(pipeline / "resources" / "models" / f"trained-{v}-init")
        assert src["source"] == "init_twin" and src["of"] == f"trained-{v}"
    for stem in ("train_index", "train_comparison", "train_maps"):
        assert (pipeline / "results" / "figures" / f"{stem}.png").stat().st_size > 10_000


def test_report_collects_figures_and_tables_with_captions(pipeline):
    """`snakemake --report` on the smoke run: every caption renders (no docutils "System
    Message"), the build prints no warning of its own, every item is labelled with what it is,
    its model and its dataset, each figure is one item (its PNG), and each figure of a family
    job has a caption naming its own model."""
    import json
    import re

    proc = snakemake(pipeline, "--configfile", SMOKE, "--report", "report.html")
    html = (pipeline / "report.html").read_text(errors="replace")
    assert len(html) > 100_000  # the figures are embedded
    for needle in ("Reproduction scorecard", "Fig. 5", "non-relativeness index"):
        assert needle in html, needle
    assert "System Message" not in html
    output = proc.stdout + proc.stderr
    assert "never awaited" not in output and "(WARNING/" not in output, output[-3000:]
    results = json.loads(re.search(r"var results = (\{.*?\});\n", html, re.S).group(1))
    assert len(results) > 50
    for path, item in results.items():
        labels = item["labels"] or {}
        assert list(labels) == ["figure", "model", "dataset"], path
        assert all(isinstance(v, str) and v for v in labels.values()), (path, labels)
        assert item["caption"].strip(), path
    figures = [p for p in results if p.startswith("results/figures/")]
    assert figures and all(p.endswith(".png") for p in figures)
    heads = {p: results[p] for p in figures if "/paper2_heads_" in p}
    assert len(heads) == 3  # one per (model, dataset) of the smoke experiments
    text = {p: " ".join(re.sub(r"<[^>]+>", "", r["caption"]).split()) for p, r in results.items()}
    for path, item in heads.items():
        model, dataset = item["labels"]["model"], item["labels"]["dataset"]
        assert path.endswith(f"paper2_heads_{model}_{dataset}.png")
        assert f"of model {model} on dataset {dataset}:" in text[path], text[path][:300]
    appendix = [p for p in figures if "/llm_appE_" in p]
    assert appendix and all(
        f"of model {results[p]['labels']['model']} on dataset" in text[p] for p in appendix
    )


def test_second_run_has_nothing_to_do(pipeline):
    assert planned_jobs(pipeline, "--configfile", SMOKE) == []


def test_changed_simulation_parameter_reruns_only_that_setting_and_dependents(pipeline, tmp_path):
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    cfg["simulate"]["settings"]["l2_a020"]["alpha"] = 0.3
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(pipeline, "--configfile", str(changed))
    assert ("simulate", "setting=l2_a020") in jobs
    assert rule_counts(jobs) == {
        "simulate": 1,  # only l2_a020
        "theory_check": 1,  # it reads every L2 setting
        "aggregate_sim_stats": 1,
        "plot_simulation": 1,  # one job draws every simulation figure
        "scorecard": 1,
    }


def test_adding_a_model_reruns_only_its_jobs_and_cross_model_outputs(pipeline, tmp_path):
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    cfg["models"]["tiny-random2"] = dict(cfg["models"]["tiny-random"], seed=1)
    cfg["paper1_llm"]["models"].append("tiny-random2")
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(pipeline, "--configfile", str(changed))
    assert rule_counts(jobs) == {
        "prepare_model": 1,
        "extract_scores_shard": 2,  # its two shards
        "merge_scores": 1,
        "diagonal_normalize": 1,
        "plot_llm_appendix": 1,
        # cross-model outputs
        "aggregate_llm_stats": 1,
        "plot_llm_fig5": 1,
        "scorecard": 1,
    }
    per_model = [
        w for rule, w in jobs if rule in ("prepare_model", "extract_scores_shard", "merge_scores")
    ]
    assert all("model=tiny-random2" in w for w in per_model), per_model


def test_figure_only_option_reruns_only_figures(pipeline, tmp_path):
    # a new format: every figure family's one job (each draws all its figures), nothing else
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    cfg["figures"]["formats"] = ["png", "pdf"]
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    counts = rule_counts(planned_jobs(pipeline, "--configfile", str(changed)))
    assert counts == {rule: 1 for rule in NO_TORCH if rule.startswith("plot_")}, counts
    # one simulation figure's option: the simulation figures' job alone
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    fig2 = cfg["figures"]["simulation"]["fig2"]
    fig2["normalized_row"] = not fig2["normalized_row"]
    changed.write_text(yaml.safe_dump(cfg))
    counts = rule_counts(planned_jobs(pipeline, "--configfile", str(changed)))
    assert counts == {"plot_simulation": 1}, counts


def test_a_changed_plant_reruns_the_planted_pairs_extraction_and_what_reads_it(pipeline, tmp_path):
    """leakage.plant is a param of the extraction of every pair that runs a planted variant (the
    job extracts all of the pair's variants), so a changed scale reruns that job, the merges of
    its variants and the pair's summary; no other pair's extraction."""
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    cfg["leakage"]["plant"]["scale"] = 0.25
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(pipeline, "--configfile", str(changed))
    extract = [w for rule, w in jobs if rule == "extract_scores_shard"]
    assert extract and all("model=trained-rope, dataset=kjv-first24" in w for w in extract)
    # the pair's merge (one job writes every variant store of the pair)
    assert [w for rule, w in jobs if rule == "merge_scores"] == [
        "model=trained-rope, dataset=kjv-first24"
    ]
    assert ("leakage", "model=trained-rope, dataset=kjv-first24") in jobs
    assert not any(
        "tiny-random" in w for rule, w in jobs if rule in ("extract_scores_shard", "leakage")
    )


def test_the_dose_series_runs_end_to_end_and_a_changed_dose_reruns_its_extraction(
    pipeline, tmp_path
):
    """The smoke run's dose series (two doses in layer 0's stream of the position-free run):
    recorded on the stores, read in the summary, in the table and the scorecard (not judged: the
    prompts are document openings); a changed dose reruns the planted pair's extraction and what
    reads it, a changed control margin (dose 0's too) the summaries only."""
    from causalpos.io.store import open_dataset

    scores = pipeline / "results" / "scores" / "trained-rope" / "kjv-first24"
    planted = open_dataset(scores / "identity_rope+plant_stream2+bidirectional.zarr")
    assert (planted.attrs["plant_stream_dose"], planted.attrs["plant_stream_layer"]) == (1.0, 0)
    assert (
        "plant_stream_dose" not in open_dataset(scores / "identity_rope+bidirectional.zarr").attrs
    )
    tab = pd.read_csv(pipeline / "results" / "stats" / "paper2_plant_doses.csv")
    assert list(tab["dose"]) == [0.0, 0.5, 1.0] and set(tab["model"]) == {"trained-rope"}
    assert np.isfinite(tab[["leakage", "leakage_lo", "leakage_hi"]].to_numpy()).all()
    assert set(tab["dose0_is_control"]) == {0}  # the scorecard reads it "not run"
    card = pd.read_csv(pipeline / "results" / "report" / "scorecard.csv", keep_default_na=False)
    rows = card[card["target"].str.startswith("positive control, dose series")]
    assert list(rows["verdict"]) == ["not run"] and set(rows["section"]) == {"controls"}
    cfg = yaml.safe_load((pipeline / SMOKE).read_text())
    cfg["leakage"]["plant_stream"]["doses"] = [0.5, 2.0]
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(pipeline, "--configfile", str(changed))
    extract = [w for rule, w in jobs if rule == "extract_scores_shard"]
    assert extract and all("model=trained-rope, dataset=kjv-first24" in w for w in extract)
    assert ("leakage", "model=trained-rope, dataset=kjv-first24") in jobs
    cfg["leakage"]["plant_stream"]["doses"] = [0.5, 1.0]
    # the dose-0 margin is the model's negative-control margin (one margin per control)
    cfg["leakage"].setdefault("controls", {})["margin"] = {"logit": 0.0005, "logattn": 0.0005}
    changed.write_text(yaml.safe_dump(cfg))
    counts = rule_counts(planned_jobs(pipeline, "--configfile", str(changed)))
    assert "extract_scores_shard" not in counts and counts["leakage"] >= 1, counts
