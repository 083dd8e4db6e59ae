# Statistical aggregation: per-layer non-relativeness index (logit units), non-relative share
# (scale-free) and first-keys band, with Monte-Carlo CIs.


rule aggregate_sim_stats:
    input:
        sim_stores,
    output:
        **catalogue_outputs("aggregate_sim_stats"),
    log:
        "logs/aggregate_sim_stats/aggregate_sim_stats.log",
    benchmark:
        PATHS.benchmark("aggregate_sim_stats/aggregate_sim_stats")
    priority: PRIORITY_TABLES
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        settings=CFG.sim_settings(),
        stats=CFG.settings(BootstrapSettings),
        code=code_fingerprint("aggregate_sim_stats"),
    script:
        "../scripts/aggregate_sim_stats.py"


rule aggregate_llm_stats:
    input:
        paper1_score_dirs,
    output:
        **catalogue_outputs("aggregate_llm_stats"),
    log:
        "logs/aggregate_llm_stats/aggregate_llm_stats.log",
    benchmark:
        PATHS.benchmark("aggregate_llm_stats/aggregate_llm_stats")
    priority: PRIORITY_TABLES
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        labels=CFG.paper1_labels(),
        stores=CFG.paper1_score_stores(),
        stats=CFG.llm_stats_params(),
        code=code_fingerprint("aggregate_llm_stats"),
    script:
        "../scripts/aggregate_llm_stats.py"
