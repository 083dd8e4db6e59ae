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
        store=directory(PATHS.LEAKAGE_STORE),
        # the job's CPU time and peak memory: the scorecard's power notes price a larger
        # summary from them (a benchmark table samples a 15-45 s job at about 15 s)
        cost=PATHS.LEAKAGE_COST,
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
        **CFG.settings(StrataSettings),
        variants=leakage_variants_params,
        summary=leakage_summary_params,
        model_attrs=leakage_model_attrs,
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
    priority: PRIORITY_TABLES
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10 + 5 * len(CFG.position0_family()),
    params:
        pairs=CFG.position0_family(),
        settings=position0_params,
        seed=COMMON.seed,
        code=code_fingerprint("position0"),
    script:
        "../scripts/position0.py"


rule aggregate_leakage:
    input:
        summaries=leakage_summary_stores,
        position0=position0_stores,
    output:
        **catalogue_outputs("aggregate_leakage"),
    log:
        "logs/aggregate_leakage/aggregate_leakage.log",
    benchmark:
        PATHS.benchmark("aggregate_leakage/aggregate_leakage")
    priority: PRIORITY_TABLES
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
            "paper2_experiment",
            caption="paper2_layers",
            category="Paper 2 — figures",
            subcategory="Components by layer",
            figure="Components by layer",
        ),
        *family_reports(
            CFG.paper2_experiment_family("layers"),
            "claim1",
            "paper2_experiment",
            caption="paper2_claim1",
            category="Paper 2 — figures",
            subcategory="Claim 1 by layer",
            figure="Claim 1 by layer",
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
            "paper2_experiment",
            caption="paper2_shares",
            category="Paper 2 — figures",
            subcategory="Causal-mask shares",
            figure="Causal-mask shares",
        ),
        *family_reports(
            CFG.paper2_experiment_family("shares"),
            "routes",
            "paper2_experiment",
            caption="paper2_routes",
            category="Paper 2 — figures",
            subcategory="Three routes by layer",
            figure="Three routes by layer",
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
            "paper2_experiment",
            caption="paper2_position0_figure",
            category="Paper 2 — figures",
            subcategory="Position-0 std by layer",
            figure="Position-0 std by layer",
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
            "paper2_heads",
            caption="paper2_heads_figure",
            category="Paper 2 — figures",
            subcategory="Head heat maps",
            figure="Head heat maps",
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
