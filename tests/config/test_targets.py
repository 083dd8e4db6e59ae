"""causalpos.config.targets: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import copy
from pathlib import Path

from tests.config.configs import resolved

SMOKE_TARGETS = [
    "results/sim/l2_a000.zarr",
    "results/sim/l2_a020.zarr",
    "results/sim/rope_a000.zarr",
    "results/sim/rope_bidir_a000.zarr",
    "results/stats/simulation_index.csv",
    "results/figures/sim_fig2.png",
    "results/figures/sim_fig4.png",
    "results/figures/sim_fig10.png",
    "results/sim/theory.csv",
    "results/figures/fig1_theory.png",
    "results/normalized/trained-rope/kjv-first24/causal.zarr",
    "results/normalized/tiny-random/kjv-first24/causal.zarr",
    "results/stats/llm_index.csv",
    "results/figures/llm_fig5.png",
    "results/figures/llm_appE_trained-rope_kjv-first24_causal.png",
    "results/figures/llm_appE_tiny-random_kjv-first24_causal.png",
    "resources/models/trained-rope",
    "resources/models/trained-nope",
    "results/figures/train_loss_curves.png",
    "results/gram/trained-nope.zarr",
    "results/figures/train_fig3_trained-nope.png",
    "results/figures/train_fig8_trained-nope.png",
    "results/gram/trained-rope.zarr",
    "results/figures/train_fig3_trained-rope.png",
    "results/figures/train_fig8_trained-rope.png",
    "results/lengthgen/lengthgen.zarr",
    "results/stats/train_lengthgen.csv",
    "results/figures/train_loss_by_position.png",
    "results/stats/train_index.csv",
    "results/stats/train_comparison.csv",
    "results/figures/train_index.png",
    "results/figures/train_comparison.png",
    "results/figures/train_maps.png",
    "results/leakage/trained-rope/kjv-first24.zarr",
    "results/position0/trained-rope/kjv-first24.zarr",
    "results/figures/paper2_heads_trained-rope_kjv-first24.png",
    "results/leakage/trained-rope-init/kjv-first24.zarr",
    "results/position0/trained-rope-init/kjv-first24.zarr",
    "results/figures/paper2_heads_trained-rope-init_kjv-first24.png",
    "results/leakage/tiny-random/kjv-first24.zarr",
    "results/position0/tiny-random/kjv-first24.zarr",
    "results/figures/paper2_heads_tiny-random_kjv-first24.png",
    "results/stats/paper2_per_prompt_leakage_by_model.csv",
    "results/stats/paper2_per_prompt_decomposition.csv",
    "results/stats/paper2_per_prompt_leakage_by_layer.csv",
    "results/stats/paper2_per_prompt_decomposition_by_layer.csv",
    "results/stats/paper2_per_prompt_rope_controls.csv",
    "results/stats/paper2_per_prompt_bos_effects.csv",
    "results/stats/paper2_per_prompt_observational_split.csv",
    "results/stats/paper2_per_prompt_heads.csv",
    "results/stats/paper2_sink_heads.csv",
    "results/stats/paper2_position0.csv",
    "results/stats/paper2_position0_probes.csv",
    "results/stats/paper2_per_prompt_baseline_comparison.csv",
    "results/stats/paper2_per_prompt_depth_trend.csv",
    "results/stats/paper2_headline.csv",
    "results/stats/paper2_decomposition.csv",
    "results/stats/paper2_decomposition_components.csv",
    "results/stats/paper2_decomposition_components_by_layer.csv",
    "results/stats/paper2_decomposition_components_by_kind.csv",
    "results/stats/paper2_decomposition_mappings.csv",
    "results/stats/paper2_controls.csv",
    "results/stats/paper2_plant_doses.csv",
    "results/stats/paper2_bos_headline.csv",
    "results/stats/paper2_claim3_factors.csv",
    "results/stats/paper2_twin_contrast.csv",
    "results/stats/paper2_scale_contrast.csv",
    "results/stats/paper2_tables.md",
    "results/figures/paper2_layers_smoke.png",
    "results/figures/paper2_claim1_smoke.png",
    "results/figures/paper2_position0_smoke.png",
    "results/figures/paper2_shares_smoke.png",
    "results/figures/paper2_routes_smoke.png",
    "results/figures/paper2_layers_controls.png",
    "results/figures/paper2_claim1_controls.png",
    "results/figures/paper2_position0_controls.png",
    "results/figures/paper2_shares_controls.png",
    "results/figures/paper2_routes_controls.png",
    "results/report/scorecard.csv",
    "results/report/scorecard.md",
    "results/report/findings.md",
]


def test_smoke_targets_are_exactly_the_pipelines(smoke):
    # the list `rule all` had before config resolution moved here (snakemake -n of configs/smoke.yaml)
    assert smoke.all_targets() == SMOKE_TARGETS


def test_default_and_paper_target_counts(default, paper):
    targets = default.all_targets()
    assert len(targets) == 166 and len(set(targets)) == 166
    assert targets[:2] == ["results/sim/l2_a000.zarr", "results/sim/l2_a020.zarr"]
    assert "results/figures/paper2_shares_controls.pdf" in targets
    assert "results/figures/train_fig8_trained-rope.pdf" in targets
    # + the Gram panels of paper 1's NoPE checkpoint (store, Fig. 3 and Fig. 8 in two formats)
    assert len(paper.all_targets()) == 215
    assert "results/gram/nope-1.5b.zarr" in paper.all_targets()


def test_sections_switched_off_leave_their_targets_out():
    bare = resolved(
        "configs/smoke.yaml",
        lambda c: (
            c["simulate"].update(settings={}),
            c["figures"].update(simulation={}),
            c["paper1_llm"].update(models=[]),
            c["train"].update(enabled=False),
            c.pop("leakage"),
        ),
    )
    assert bare.all_targets() == [
        "results/figures/fig1_theory.png",
        "results/report/scorecard.csv",
        "results/report/scorecard.md",
        "results/report/findings.md",
    ]
    assert bare.scorecard_inputs() == {}
    assert bare.findings_inputs() == {}


def test_scorecard_inputs(smoke):
    assert smoke.scorecard_inputs() == {
        "theory": "results/sim/theory.csv",
        "sim_index": "results/stats/simulation_index.csv",
        "llm_index": "results/stats/llm_index.csv",
        "train_comparison": "results/stats/train_comparison.csv",
        "gram_nearby": "results/stats/gram_nearby.csv",
        "bos_effects": "results/stats/paper2_per_prompt_bos_effects.csv",
        "position0": "results/stats/paper2_position0.csv",
        "position0_probes": "results/stats/paper2_position0_probes.csv",
        "sink_heads": "results/stats/paper2_sink_heads.csv",
        "baseline_comparison": "results/stats/paper2_per_prompt_baseline_comparison.csv",
        "depth_trend": "results/stats/paper2_per_prompt_depth_trend.csv",
        "headline": "results/stats/paper2_headline.csv",
        "decomposition_headline": "results/stats/paper2_decomposition.csv",
        "decomposition_components": "results/stats/paper2_decomposition_components.csv",
        "decomposition_components_by_kind": (
            "results/stats/paper2_decomposition_components_by_kind.csv"
        ),
        "controls": "results/stats/paper2_controls.csv",
        "plant_doses": "results/stats/paper2_plant_doses.csv",
        "observational_split": "results/stats/paper2_per_prompt_observational_split.csv",
        "bos_headline": "results/stats/paper2_bos_headline.csv",
        "claim3_factors": "results/stats/paper2_claim3_factors.csv",
        "scale_contrast": "results/stats/paper2_scale_contrast.csv",
        "twin_contrast": "results/stats/paper2_twin_contrast.csv",
    }


def test_findings_inputs_are_every_table_the_config_writes(smoke, default):
    """The findings page's tables: every table of the config (by ``table_<file stem>``), not
    the scorecard (the same rule's output)."""
    from causalpos.catalogue import BY_NAME, PAPER2_TABLES

    for cfg in (smoke, default):
        inputs = cfg.findings_inputs()
        assert set(cfg.scorecard_inputs().values()) <= set(inputs.values())
        assert "results/report/scorecard.csv" not in inputs.values()
        assert all(
            k == "table_" + v.rsplit("/", 1)[1].removesuffix(".csv") for k, v in inputs.items()
        )
    inputs = default.findings_inputs()
    assert {"table_" + Path(BY_NAME[n].path).stem for n in PAPER2_TABLES} <= set(inputs)
    assert "table_paper2_per_prompt_leakage_by_model" in inputs
    assert {"table_train_index", "table_train_lengthgen", "table_llm_index", "table_theory"} <= set(
        inputs
    )


def test_resolution_leaves_the_config_alone(paper):
    before = copy.deepcopy(paper.config)
    paper.all_targets()
    paper.scorecard_inputs()
    paper.compare_inputs()
    for m, d in paper.leakage_pairs():
        paper.reducers_for(m, d, "causal")
        paper.data_store(m, d)
    assert paper.config == before
