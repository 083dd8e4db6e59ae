"""Paper 2's stage (workflow/rules/leakage.smk) end to end in a temporary copy of the pipeline.

A tiny random Llama with a BPE tokenizer that defines a BOS but never adds it (SmolLM2-style) is
placed as a `local` model; the dataset's `prepend_bos` puts the BOS at position 0 of every prompt.
Two experiments name the same (model, dataset) pair, so its summary is the union of their variants,
compositions among them (a RoPE control and a BOS replacement, each also run bidirectionally). The numbers asserted are identities of the decomposition,
the exact zero of the position-0 trajectory, and tables that equal the stores; dry runs under an
edited config or library then say what each edit reruns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from tests.wfutil import copy_pipeline, planned_jobs, rule_counts, snakemake

pytestmark = pytest.mark.slow

CONFIG = "configs/leakage_test.yaml"
MODEL, DATASET = "tinybos", "ruth"
UNION = [
    "causal",
    "bidirectional",
    "scrambled_rope",
    "scrambled_rope+bidirectional",
    "bos_replace_mean",
    "bos_replace_mean+bidirectional",
]


def _config(model_dir: Path) -> dict:
    return {
        "seed": 0,
        "device": "cpu",
        "dtype": "float32",
        "simulate": {"settings": {}},
        "models": {MODEL: {"source": "local", "path": str(model_dir)}},
        "datasets": {
            DATASET: {
                "corpus": {"type": "kjv", "books": ["Ruth", "Jonah"], "stratify": True},
                "mode": "chunks",
                "seq_len": 24,
                "n_sequences": 12,
                "prepend_bos": True,
            }
        },
        "paper1_llm": {"models": [], "datasets": []},
        "train": {"enabled": False},
        "extract": {"batch_size": 4, "shard_size": 12, "n_groups": 4},
        "leakage": {
            "experiments": {
                "main": {
                    "models": [MODEL],
                    "datasets": [DATASET],
                    "variants": ["causal", "bidirectional"],
                },
                "controls": {
                    "models": [MODEL],
                    "datasets": [DATASET],
                    "variants": [
                        "causal",
                        "scrambled_rope",
                        "scrambled_rope+bidirectional",
                        "bos_replace_mean",
                        "bos_replace_mean+bidirectional",
                    ],
                },
            },
            "reducer": {
                "fits": ["saturated+query", "linear+query"],
                "windows": ["all", "early8", "late"],
            },
            "n_permutations": 50,
            "bos_windows": ["early8", "late"],
            "position0": {
                "conditions": ["causal", "bidirectional", "bos_replace_mean"],
                "n_folds": 3,
                "n_permutations": 20,
            },
        },
        "stats": {"n_bootstrap": 200},
        "figures": {"formats": ["png"], "simulation": {}},
    }


def _targets() -> list[str]:
    tables = [
        "per_prompt_decomposition",
        "per_prompt_rope_controls",
        "per_prompt_bos_effects",
        "position0",
        "per_prompt_leakage_by_model",
    ]
    out = ["results/stats/paper2_tables.md"] + [f"results/stats/paper2_{t}.csv" for t in tables]
    out += [f"results/figures/paper2_{f}_main.png" for f in ("layers", "shares", "position0")]
    out.append(f"results/figures/paper2_heads_{MODEL}_{DATASET}.png")
    return out


def _make_model(dest: Path) -> Path:
    """A tiny random Llama and a byte-level BPE tokenizer whose BOS (id 0) it never adds."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from causalpos.data import kjv_documents
    from causalpos.models.load import architecture_config
    from causalpos.training.tokenizer import fit_tokenizer

    tok_dir = fit_tokenizer(
        [d.text for d in kjv_documents(books=["Ruth", "Jonah"])], 320, dest / "tok", add_bos=False
    )
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = architecture_config(
        "llama",
        "tiny",
        {
            "vocab_size": len(tok),
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id,
        },
    )
    torch.manual_seed(0)
    model_dir = dest / "model"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return model_dir


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    work = copy_pipeline(tmp_path_factory.mktemp("pipeline"))
    model_dir = _make_model(tmp_path_factory.mktemp("tinybos"))
    (work / CONFIG).write_text(yaml.safe_dump(_config(model_dir), sort_keys=False))
    snakemake(work, *_targets(), "--cores", "2", "--configfile", CONFIG)
    return work


def _open(path: Path) -> xr.Dataset:
    return xr.open_zarr(path, consolidated=False, chunks=None)


def _edited(pipeline: Path, tmp_path: Path, edit) -> str:
    cfg = yaml.safe_load((pipeline / CONFIG).read_text())
    edit(cfg)
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _reruns(pipeline: Path, configfile: str = CONFIG) -> list[tuple[str, str]]:
    return planned_jobs(pipeline, *_targets(), "--configfile", configfile)


# ---------------------------------------------------------------------------------------------
# Numbers


def test_decomposition_is_exact_and_equals_the_score_stores(pipeline):
    s = _open(pipeline / "results" / "leakage" / MODEL / f"{DATASET}.zarr")
    # the pair is summarized over the union of both experiments' variants
    assert list(s["variant"].values) == UNION and list(s.attrs["variants"]) == UNION
    dec = s["per_prompt_decomposition"].sel(per_prompt_condition="rope", stat="estimate")
    total, res, mask = (
        float(dec.sel(component=c)) for c in ("total", "residual_stream", "causal_mask")
    )
    # Eq. 5: causal-mask = total - residual, so they add back up to float64 rounding
    assert total == pytest.approx(res + mask, rel=1e-12, abs=1e-15)
    shares = float(dec.sel(component="share_residual_stream")) + float(
        dec.sel(component="share_causal_mask")
    )
    assert shares == pytest.approx(1.0, abs=1e-12)
    layer = s["per_prompt_decomposition_layer"].sel(per_prompt_condition="rope", stat="estimate")
    np.testing.assert_allclose(
        layer.sel(component="total"),
        layer.sel(component="residual_stream") + layer.sel(component="causal_mask"),
        rtol=1e-12,
        atol=1e-15,
    )
    # total / residual are the causal / bidirectional log-attention leakage of the score stores:
    # per-prompt dR2 minus its exact permutation-null mean, averaged over prompts, layers and heads
    for variant, value in (("causal", total), ("bidirectional", res)):
        sc = _open(pipeline / "results" / "scores" / MODEL / DATASET / f"{variant}.zarr")
        sel = dict(leak_fit="saturated+query", leak_window="all", leak_target="logattn")
        direct = float((sc["leak_delta"].sel(**sel) - sc["leak_null"].sel(**sel)).mean())
        assert value == pytest.approx(direct, rel=1e-12)
        assert (
            float(
                s["per_prompt_leakage_model"].sel(
                    variant=variant, target="logattn", stat="estimate"
                )
            )
            == value
        )
        assert sc["leak_delta"].attrs["leak_fits"] == ["saturated+query", "linear+query"]
        assert "sink_attention" in sc  # the sink reducer ran beside the leakage reducer
    ci = s["per_prompt_decomposition"].sel(per_prompt_condition="rope", component="total")
    assert float(ci.sel(stat="lo")) <= total <= float(ci.sel(stat="hi"))
    # the probe-less controls still have their observational split and the Table 9 effects
    assert set(s["causal_variant"].values) == {"causal", "scrambled_rope", "bos_replace_mean"}
    assert list(s["intervention"].values) == ["mean", "mean+bidirectional"]
    assert list(s["bos_window"].values) == ["early8", "late"]
    # the decomposition under scrambled RoPE: its causal run and its bidirectional composition
    assert list(s["per_prompt_condition"].values) == ["rope", "scrambled_rope"]
    scr = s["per_prompt_decomposition"].sel(per_prompt_condition="scrambled_rope", stat="estimate")
    for variant, comp in (
        ("scrambled_rope", "total"),
        ("scrambled_rope+bidirectional", "residual_stream"),
    ):
        assert float(scr.sel(component=comp)) == float(
            s["per_prompt_leakage_model"].sel(variant=variant, target="logattn", stat="estimate")
        )
    assert float(scr.sel(component="causal_mask")) == float(
        scr.sel(component="total") - scr.sel(component="residual_stream")
    )
    diff = s["per_prompt_decomposition_difference"].sel(
        per_prompt_condition="scrambled_rope",
        per_prompt_condition_ref="rope",
        component="share_causal_mask",
    )
    assert float(diff.sel(stat="estimate")) == pytest.approx(
        float(scr.sel(component="share_causal_mask"))
        - float(dec.sel(component="share_causal_mask")),
        rel=1e-12,
    )
    assert json.loads(s.attrs["conditions_not_run"]) == {}  # identity_rope: not configured


def test_tables_equal_the_stores(pipeline):
    s = _open(pipeline / "results" / "leakage" / MODEL / f"{DATASET}.zarr")
    stats = pipeline / "results" / "stats"
    dec = pd.read_csv(stats / "paper2_per_prompt_decomposition.csv")
    row = dec[(dec["model"] == MODEL) & (dec["condition"] == "rope")].iloc[0]
    for comp in (
        "total",
        "residual_stream",
        "causal_mask",
        "share_residual_stream",
        "share_causal_mask",
    ):
        for col, stat in ((comp, "estimate"), (f"{comp}_lo", "lo"), (f"{comp}_hi", "hi")):
            assert row[col] == float(
                s["per_prompt_decomposition"].sel(
                    per_prompt_condition="rope", component=comp, stat=stat
                )
            )
    rc = pd.read_csv(stats / "paper2_per_prompt_rope_controls.csv")
    assert list(rc["condition"]) == ["rope", "scrambled_rope"]  # identity_rope was not configured
    assert set(rc["status"]) == {"measured"} and (rc["fixed_bos"] == 1).all()
    scr = rc[rc["condition"] == "scrambled_rope"].iloc[0]
    assert scr["total"] == float(
        s["per_prompt_leakage_model"].sel(
            variant="scrambled_rope", target="logattn", stat="estimate"
        )
    )
    assert scr["bidirectional_variant"] == "scrambled_rope+bidirectional"
    for col, stat in (("share_causal_mask", "estimate"), ("share_causal_mask_lo", "lo")):
        assert scr[col] == float(
            s["per_prompt_decomposition"].sel(
                per_prompt_condition="scrambled_rope", component="share_causal_mask", stat=stat
            )
        )
    assert scr["share_causal_mask_minus_rope_hi"] == float(
        s["per_prompt_decomposition_difference"].sel(
            per_prompt_condition="scrambled_rope",
            per_prompt_condition_ref="rope",
            component="share_causal_mask",
            stat="hi",
        )
    )
    bos = pd.read_csv(stats / "paper2_per_prompt_bos_effects.csv")
    for name, measure in (("mean", "logit"), ("mean+bidirectional", "residual_stream_paper")):
        early = bos[(bos["bos_window"] == "early8") & (bos["intervention"] == name)].iloc[0]
        assert early["effect"] == float(
            s["per_prompt_bos_effect"].sel(intervention=name, bos_window="early8", stat="estimate")
        )
        assert early["effect"] == pytest.approx(
            1 - early["c_res"] / early["c_res_baseline"], rel=1e-12
        )
        assert (early["measure"], early["replacement"]) == (measure, "mean")
    # Table 9's C_res is the bidirectional run's log-attention leakage
    early = bos[(bos["bos_window"] == "early8") & (bos["intervention"] == "mean+bidirectional")]
    sc = _open(pipeline / "results" / "scores" / MODEL / DATASET / "bidirectional.zarr")
    sel = dict(leak_fit="saturated+query", leak_window="early8", leak_target="logattn")
    assert float(early["c_res_baseline"].iloc[0]) == pytest.approx(
        float((sc["leak_delta"].sel(**sel) - sc["leak_null"].sel(**sel)).mean()), rel=1e-12
    )
    from causalpos.catalogue import BY_NAME
    from causalpos.scorecard import build_scorecard

    names = ("bos_effects", "position0", "decomposition_headline")
    card = build_scorecard({k: stats / Path(BY_NAME[k].path).name for k in names})
    # the per-prompt rows: this config replaces the BOS bidirectionally only, so Table 9's
    # residual-stream component (the ring's) is not run, and the row says what to add
    t9 = card[card["target"].str.startswith("Table 9")]
    t9 = t9[t9["reading"] == "per-prompt"]
    assert list(t9["verdict"]) == ["not run"] and "+ring" in t9["note"].iloc[0]
    # Table 6 on the headline: the causal-mask share needs each condition's run on the ring
    # (the residual stream); this config runs the conditions bidirectionally only, so the
    # comparison and the position-free condition's check are not run, saying what is missing
    t6 = card[card["target"] == f"Table 6 ({MODEL}, {DATASET})"]
    assert t6["verdict"].iloc[0] == "not run" and t6["section"].iloc[0] == "paper 2"
    assert "on the ring" in t6["note"].iloc[0] and "missing for rope" in t6["note"].iloc[0]
    free = card[card["target"].str.startswith("Table 6, position-free condition (")]
    assert list(free["target"]) == [
        f"Table 6, position-free condition ({MODEL}, {DATASET}, scrambled_rope)"
    ]
    assert free["section"].iloc[0] == "checks" and free["verdict"].iloc[0] == "not run"
    md = (stats / "paper2_tables.md").read_text()
    assert "Table 6 analog" in md and "Table 9 analog" in md and f"{row['total']:.4g}" in md


def test_position0_std_is_exactly_zero_with_a_fixed_bos(pipeline):
    data = _open(pipeline / "results" / "data" / DATASET / f"{MODEL}.zarr")
    tokens = data["tokens"].values
    # every prompt starts with the BOS, prepended by the pipeline (the tokenizer adds none)
    assert data.attrs["bos"] and (tokens[:, 0] == data.attrs["bos_id"]).all()
    assert data.attrs["bos_added"] and data.attrs["prefix_ids"] == [data.attrs["bos_id"]]
    sc = _open(pipeline / "results" / "scores" / MODEL / DATASET / "causal.zarr")
    assert sc.attrs["bos"] and sc.attrs["prefix_ids"] == data.attrs["prefix_ids"]
    p0 = _open(pipeline / "results" / "position0" / MODEL / f"{DATASET}.zarr")
    assert p0.sizes["layer"] == 3  # embedding + 2 blocks
    for cond in ("causal", "bos_replace_mean"):  # same input at position 0, causal attention
        assert (p0["std"].sel(condition=cond).values == 0.0).all(), cond
        assert (p0["max_abs_dev"].sel(condition=cond).values == 0.0).all(), cond
    bi = p0["std"].sel(condition="bidirectional").values
    assert bi[0] == 0.0 and (bi[1:] > 0).all()  # position 0 sees the other tokens after block 1
    # the probe on constant features sits at chance exactly
    causal = p0.sel(condition="causal")
    np.testing.assert_array_equal(causal["probe_accuracy"].values, causal["probe_chance"].values)
    table = pd.read_csv(pipeline / "results" / "stats" / "paper2_position0.csv")
    assert (table.loc[table["model"] == MODEL, "token0_fixed"] == 1).all()  # claim 7's premise
    for cond in ("causal", "bidirectional", "bos_replace_mean"):
        rows = table[(table["model"] == MODEL) & (table["condition"] == cond)].sort_values("layer")
        np.testing.assert_array_equal(rows["std"].values, p0["std"].sel(condition=cond).values)


# ---------------------------------------------------------------------------------------------
# Rerun guarantees


def test_second_run_has_nothing_to_do(pipeline):
    assert _reruns(pipeline) == []


def test_figure_module_edit_reruns_only_paper2_figures(pipeline):
    module = pipeline / "src" / "causalpos" / "figures" / "paper2.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit\n")
        counts = rule_counts(_reruns(pipeline))
        assert counts == {
            "plot_paper2_layers": 1,
            "plot_paper2_shares": 1,
            "plot_paper2_position0": 1,
            "plot_paper2_heads": 1,
        }, counts
    finally:
        module.write_text(original)


def test_leakage_reducer_edit_reruns_extraction_too(pipeline):
    """extract_scores imports paper2/extraction/reducers.py (the LeakageReducer runs inside
    extraction), so
    editing it reruns the extraction (one job: every variant of the pair with one model load,
    written as the pair's final stores: the dataset is one shard, so no merge job), then
    everything downstream — but not the model or the data."""
    module = pipeline / "src" / "causalpos" / "paper2" / "extraction" / "reducers.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit\n")
        counts = rule_counts(_reruns(pipeline))
        assert counts == {
            "extract_scores": 1,
            "leakage": 1,
            "position0": 1,
            "aggregate_leakage": 1,
            "plot_paper2_layers": 1,
            "plot_paper2_shares": 1,
            "plot_paper2_position0": 1,
            "plot_paper2_heads": 1,
        }, counts
    finally:
        module.write_text(original)
    assert _reruns(pipeline) == []


def test_paper2_tables_edit_reruns_only_the_tables(pipeline):
    """The Markdown digest and the tables live in paper2/tables/, which only aggregate_leakage
    imports: editing them reruns no extraction and no summary."""
    module = pipeline / "src" / "causalpos" / "paper2" / "tables" / "assemble.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit\n")
        assert rule_counts(_reruns(pipeline)) == {"aggregate_leakage": 1}
    finally:
        module.write_text(original)


def test_summary_setting_reruns_the_summary_not_extraction(pipeline, tmp_path):
    edited = _edited(pipeline, tmp_path, lambda c: c["leakage"].update(n_permutations=40))
    counts = rule_counts(_reruns(pipeline, edited))
    assert counts == {
        "leakage": 1,
        "aggregate_leakage": 1,
        "plot_paper2_layers": 1,
        "plot_paper2_shares": 1,
        "plot_paper2_heads": 1,
    }, counts


def test_position0_setting_reruns_only_position0(pipeline, tmp_path):
    edited = _edited(pipeline, tmp_path, lambda c: c["leakage"]["position0"].update(ridge=2.0))
    counts = rule_counts(_reruns(pipeline, edited))
    assert counts == {"position0": 1, "aggregate_leakage": 1, "plot_paper2_position0": 1}, counts


def test_a_new_position0_condition_reruns_the_pairs_extraction_and_what_reads_it(
    pipeline, tmp_path
):
    # position 0 is read inside extraction's forward passes: a new condition is one more forward
    # pass of the pair's extraction job (identity_rope: no experiment extracts it, so it reads
    # position 0 alone; one shard: the job writes the final stores, no merge), then the paper-2
    # analyses; nothing of paper 1 or training
    edited = _edited(
        pipeline,
        tmp_path,
        lambda c: c["leakage"]["position0"].update(
            conditions=["causal", "bidirectional", "bos_replace_mean", "identity_rope"]
        ),
    )
    jobs = _reruns(pipeline, edited)
    assert [w for r, w in jobs if r == "extract_scores"] == [f"model={MODEL}, dataset={DATASET}"]
    counts = rule_counts(jobs)
    assert counts["position0"] == 1
    assert set(counts) <= {
        "extract_scores",
        "leakage",
        "position0",
        "aggregate_leakage",
        "plot_paper2_layers",
        "plot_paper2_shares",
        "plot_paper2_heads",
        "plot_paper2_position0",
    }, counts


def test_reducer_setting_reruns_only_the_wanted_extractions(pipeline, tmp_path):
    edited = _edited(
        pipeline,
        tmp_path,
        lambda c: c["leakage"]["reducer"].update(windows=["all", "early8", "late", "early16"]),
    )
    jobs = _reruns(pipeline, edited)
    # the pair's one extraction job (every variant) writes its final stores: one shard, no merge
    assert [w for r, w in jobs if r == "extract_scores"] == [f"model={MODEL}, dataset={DATASET}"]
    assert not [w for r, w in jobs if r in ("extract_scores_shard", "merge_scores")]


def test_a_second_shard_reruns_the_extraction_as_shards_and_their_merge(pipeline, tmp_path):
    """The pair's dataset is one shard, extracted straight into its final stores (no merge job);
    a shard size that splits it reruns the extraction as one job per shard, then their merge
    (one job: every variant), then what reads the stores; neither the model nor the data."""
    edited = _edited(pipeline, tmp_path, lambda c: c["extract"].update(shard_size=8))
    jobs = _reruns(pipeline, edited)
    assert [w for r, w in jobs if r == "extract_scores_shard"] == [
        f"model={MODEL}, dataset={DATASET}, shard=000{k}" for k in (0, 1)
    ]
    assert [w for r, w in jobs if r == "merge_scores"] == [f"model={MODEL}, dataset={DATASET}"]
    counts = rule_counts(jobs)
    assert "extract_scores" not in counts and counts["leakage"] == 1, counts
    assert {"prepare_model", "sample_sequences"}.isdisjoint(counts), counts


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["leakage"]["experiments"]["main"].update(variants=["bidirectional"]),
            "must include 'causal'",
        ),
        (lambda c: c["leakage"].update(fit="saturated+both"), "leakage.fit"),
        (lambda c: c["leakage"].update(bos_windows=["early32"]), "leakage.bos_windows"),
        (lambda c: c["leakage"]["experiments"]["main"].update(datasets=["nope"]), "nope"),
        (
            lambda c: c["leakage"]["experiments"]["main"].update(variants=["causal", "sideways"]),
            "sideways",
        ),
        (
            lambda c: c["leakage"]["experiments"]["main"].update(
                variants=["causal", "bidirectional+scrambled_rope"]
            ),
            "'scrambled_rope+bidirectional'",
        ),
    ],
)
def test_bad_leakage_config_fails_before_any_job(pipeline, tmp_path, edit, message):
    proc = snakemake(
        pipeline, "-n", *_targets(), "--configfile", _edited(pipeline, tmp_path, edit), check=False
    )
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# The stage helpers' edge cases (no pipeline needed)


def test_small_source_strata_are_pooled_for_the_bootstrap():
    from causalpos.paper2.prompts import pool_small_strata

    labels, n = pool_small_strata(np.array(["Ruth"] * 6 + ["Mark"] * 2 + ["Hosea"]), 5)
    assert n == 3 and list(labels[:6]) == ["Ruth"] * 6 and len(set(labels[6:])) == 1
    # one article per chunk (Wikipedia by title): everything pooled, i.e. the plain bootstrap
    labels, n = pool_small_strata(np.array([f"article {i}" for i in range(64)]), 5)
    assert n == 64 and len(set(labels)) == 1


def test_probe_uses_only_classes_with_enough_prompts():
    from causalpos.paper2.position0 import probe_labels

    keep, note = probe_labels(np.array(["a"] * 5 + ["b"] * 5 + ["c"] * 2), 5)
    assert keep.tolist() == [True] * 10 + [False] * 2 and "dropped" in note
    keep, note = probe_labels(np.array(["random_tokens"] * 16), 5)
    assert not keep.any() and note.startswith("no probe")
