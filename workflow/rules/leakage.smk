# Paper 2 (Ruscio et al. 2026): absolute-position leakage, its causal-mask / residual-stream
# decomposition, RoPE controls, BOS replacement, position 0 and sink heads (paper2.md).
#
# Extraction (extract.smk) adds the LeakageReducer and SinkReducer to the jobs of every
# (model, dataset, variant) an experiment names, and the position-0 reader to the
# leakage.position0 conditions of those pairs (causalpos.config: Resolved.reducers_for), so the
# score stores already hold per-(sequence, layer, head) leakage and position 0's residual
# stream; the rules here only summarize and load no model:
#
#   scores/{model}/{dataset}/{variant}.zarr (every variant of the pair)
#       -> leakage/{model}/{dataset}.zarr      CIs, permutation p / BH q, decomposition, controls
#   data + scores/{model}/{dataset}/{condition}.zarr (each leakage.position0 condition)
#       -> position0/{model}/{dataset}.zarr    trajectory per condition, probes
#   all of them -> stats/paper2_*.csv, stats/paper2_tables.md, figures/paper2_*.{fmt}


rule leakage:
    input:
        scores=score_dir,
        data=data_store,
    output:
        directory(PATHS.LEAKAGE_STORE),
    log:
        "logs/leakage/{model}/{dataset}.log",
    benchmark:
        PATHS.benchmark("leakage/{model}/{dataset}")
    priority: PRIORITY_NEXT
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=leakage_mem_mb,
        runtime=60,
    params:
        variants=leakage_variants_params,
        summary=leakage_summary_params,
        model_attrs=leakage_model_attrs,
        strata=config["leakage"]["bootstrap_strata"],
        code=code_fingerprint("leakage"),
    script:
        "../scripts/leakage.py"


# One job for every pair (a second or two of work each, less than a job's start-up).
rule position0:
    input:
        # position-0 states, one merged store per condition: extraction read them in its own
        # forward passes (reducer "position0"), so this rule loads no model
        position0_inputs,
    output:
        [directory(p) for p in family_paths(CFG.position0_family(), "output")],
    log:
        "logs/position0/position0.log",
    benchmark:
        PATHS.benchmark("position0/position0")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10 + 5 * len(CFG.position0_family()),
    params:
        pairs=CFG.position0_family(),
        settings=position0_params,
        seed=config["seed"],
        code=code_fingerprint("position0"),
    script:
        "../scripts/position0.py"


rule aggregate_leakage:
    input:
        summaries=leakage_summary_stores,
        position0=position0_stores,
    output:
        leakage_by_model=report(
            PATHS.paper2_table("leakage_by_model"),
            caption="../report/paper2_leakage_by_model.rst",
            category="Paper 2 — tables",
        ),
        decomposition=report(
            PATHS.paper2_table("decomposition"),
            caption="../report/paper2_decomposition.rst",
            category="Paper 2 — tables",
        ),
        leakage_by_layer=report(
            PATHS.paper2_table("leakage_by_layer"),
            caption="../report/paper2_leakage_by_layer.rst",
            category="Paper 2 — tables",
        ),
        decomposition_by_layer=report(
            PATHS.paper2_table("decomposition_by_layer"),
            caption="../report/paper2_decomposition_by_layer.rst",
            category="Paper 2 — tables",
        ),
        rope_controls=report(
            PATHS.paper2_table("rope_controls"),
            caption="../report/paper2_rope_controls.rst",
            category="Paper 2 — tables",
        ),
        bos_effects=report(
            PATHS.paper2_table("bos_effects"),
            caption="../report/paper2_bos_effects.rst",
            category="Paper 2 — tables",
        ),
        observational_split=report(
            PATHS.paper2_table("observational_split"),
            caption="../report/paper2_observational_split.rst",
            category="Paper 2 — tables",
        ),
        heads=report(
            PATHS.paper2_table("heads"),
            caption="../report/paper2_heads.rst",
            category="Paper 2 — tables",
        ),
        sink_heads=report(
            PATHS.paper2_table("sink_heads"),
            caption="../report/paper2_sink_heads.rst",
            category="Paper 2 — tables",
        ),
        position0=report(
            PATHS.paper2_table("position0"),
            caption="../report/paper2_position0.rst",
            category="Paper 2 — tables",
        ),
        position0_probes=report(
            PATHS.paper2_table("position0_probes"),
            caption="../report/paper2_position0_probes.rst",
            category="Paper 2 — tables",
        ),
        baseline_comparison=report(
            PATHS.paper2_table("baseline_comparison"),
            caption="../report/paper2_baseline_comparison.rst",
            category="Paper 2 — tables",
        ),
        depth_trend=report(
            PATHS.paper2_table("depth_trend"),
            caption="../report/paper2_depth_trend.rst",
            category="Paper 2 — tables",
        ),
        headline=report(
            PATHS.paper2_table("headline"),
            caption="../report/paper2_headline.rst",
            category="Paper 2 — tables",
        ),
        decomposition_headline=report(
            PATHS.paper2_table("decomposition_headline"),
            caption="../report/paper2_decomposition_headline.rst",
            category="Paper 2 — tables",
        ),
        decomposition_components=report(
            PATHS.paper2_table("decomposition_components"),
            caption="../report/paper2_decomposition_components.rst",
            category="Paper 2 — tables",
        ),
        decomposition_components_by_layer=report(
            PATHS.paper2_table("decomposition_components_by_layer"),
            caption="../report/paper2_decomposition_components.rst",
            category="Paper 2 — tables",
        ),
        decomposition_components_by_kind=report(
            PATHS.paper2_table("decomposition_components_by_kind"),
            caption="../report/paper2_decomposition_components.rst",
            category="Paper 2 — tables",
        ),
        controls=report(
            PATHS.paper2_table("controls"),
            caption="../report/paper2_controls.rst",
            category="Paper 2 — tables",
        ),
        plant_doses=report(
            PATHS.paper2_table("plant_doses"),
            caption="../report/paper2_plant_doses.rst",
            category="Paper 2 — tables",
        ),
        bos_headline=report(
            PATHS.paper2_table("bos_headline"),
            caption="../report/paper2_bos_headline.rst",
            category="Paper 2 — tables",
        ),
        scale_contrast=report(
            PATHS.paper2_table("scale_contrast"),
            caption="../report/paper2_scale_contrast.rst",
            category="Paper 2 — tables",
        ),
        markdown=report(
            PATHS.PAPER2_TABLES_MD,
            caption="../report/paper2_tables.rst",
            category="Paper 2 — tables",
        ),
    log:
        "logs/aggregate_leakage/aggregate_leakage.log",
    benchmark:
        PATHS.benchmark("aggregate_leakage/aggregate_leakage")
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        labels=CFG.leakage_pair_labels(),
        code=code_fingerprint("aggregate_leakage"),
    script:
        "../scripts/aggregate_leakage.py"


# Figures: one job per family, drawing the figure of every experiment (or pair).
rule plot_paper2_layers:
    input:
        family_paths(CFG.paper2_experiment_family("layers"), "stores"),
    output:
        *family_reports(
            CFG.paper2_experiment_family("layers"),
            "outputs",
            caption="../report/paper2_layers.rst",
            category="Paper 2 — figures",
        ),
        *family_reports(
            CFG.paper2_experiment_family("layers"),
            "claim1",
            caption="../report/paper2_claim1.rst",
            category="Paper 2 — figures",
        ),
    log:
        "logs/plot_paper2_layers/plot_paper2_layers.log",
    benchmark:
        PATHS.benchmark("plot_paper2_layers/plot_paper2_layers")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figures=CFG.paper2_experiment_family("layers"),
        code=code_fingerprint("plot_paper2_layers"),
    script:
        "../scripts/plot_paper2_layers.py"


rule plot_paper2_shares:
    input:
        family_paths(CFG.paper2_experiment_family("shares"), "stores"),
    output:
        *family_reports(
            CFG.paper2_experiment_family("shares"),
            "outputs",
            caption="../report/paper2_shares.rst",
            category="Paper 2 — figures",
        ),
    log:
        "logs/plot_paper2_shares/plot_paper2_shares.log",
    benchmark:
        PATHS.benchmark("plot_paper2_shares/plot_paper2_shares")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figures=CFG.paper2_experiment_family("shares"),
        code=code_fingerprint("plot_paper2_shares"),
    script:
        "../scripts/plot_paper2_shares.py"


rule plot_paper2_position0:
    input:
        family_paths(CFG.paper2_experiment_family("position0"), "stores"),
    output:
        *family_reports(
            CFG.paper2_experiment_family("position0"),
            "outputs",
            caption="../report/paper2_position0_figure.rst",
            category="Paper 2 — figures",
        ),
    log:
        "logs/plot_paper2_position0/plot_paper2_position0.log",
    benchmark:
        PATHS.benchmark("plot_paper2_position0/plot_paper2_position0")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figures=CFG.paper2_experiment_family("position0"),
        code=code_fingerprint("plot_paper2_position0"),
    script:
        "../scripts/plot_paper2_position0.py"


rule plot_paper2_heads:
    input:
        family_paths(CFG.paper2_heads_family(), "store"),
    output:
        *family_reports(
            CFG.paper2_heads_family(),
            "outputs",
            caption="../report/paper2_heads_figure.rst",
            category="Paper 2 — figures",
        ),
    log:
        "logs/plot_paper2_heads/plot_paper2_heads.log",
    benchmark:
        PATHS.benchmark("plot_paper2_heads/plot_paper2_heads")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figures=CFG.paper2_heads_family(),
        code=code_fingerprint("plot_paper2_heads"),
    script:
        "../scripts/plot_paper2_heads.py"
