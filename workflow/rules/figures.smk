# Figures: PNG/PDF reproductions with the papers' layouts. Figure-only options live under
# `figures:` in the config, so changing them reruns only these rules.


rule plot_fig1:
    output:
        *figure_reports(
            CFG.figure_paths(PATHS.FIG1_FIGURE),
            caption="../report/fig1.rst",
            category="Paper 1 — theory",
            labels=CFG.report_labels(
                "Fig. 1", "parameter-free decoder", "closed form"
            ),
        ),
    log:
        "logs/plot_fig1/plot_fig1.log",
    benchmark:
        PATHS.benchmark("plot_fig1/plot_fig1")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        code=code_fingerprint("plot_fig1"),
    script:
        "../scripts/plot_fig1.py"


# One job draws every simulation figure (and one every App. E figure, below).
rule plot_simulation:
    input:
        family_paths(CFG.sim_figure_family(), "stores"),
    output:
        *family_reports(
            CFG.sim_figure_family(),
            "outputs",
            "simulation",
            caption="sim_figure",
            category="Paper 1 — simulations",
            subcategory="Simulation figures",
            figure="simulation",
        ),
    log:
        "logs/plot_simulation/plot_simulation.log",
    benchmark:
        PATHS.benchmark("plot_simulation/plot_simulation")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figures=CFG.sim_figure_family(),
        code=code_fingerprint("plot_simulation"),
    script:
        "../scripts/plot_simulation.py"


rule plot_llm_fig5:
    input:
        paper1_normalized_stores,
    output:
        *figure_reports(
            CFG.figure_paths(PATHS.LLM_FIG5_FIGURE),
            caption="../report/llm_fig5.rst",
            category="Paper 1 — pretrained models",
            labels=CFG.paper1_report_labels("Fig. 5"),
        ),
    log:
        "logs/plot_llm_fig5/plot_llm_fig5.log",
    benchmark:
        PATHS.benchmark("plot_llm_fig5/plot_llm_fig5")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        **CFG.settings(Fig5Settings),
        labels=CFG.paper1_labels(),
        names=CFG.paper1_display_names(),
        code=code_fingerprint("plot_llm_fig5"),
    script:
        "../scripts/plot_llm_fig5.py"


rule plot_llm_appendix:
    input:
        family_paths(CFG.llm_appendix_family(), "store"),
    output:
        *family_reports(
            CFG.llm_appendix_family(),
            "outputs",
            "llm_appendix",
            caption="llm_appE",
            category="Paper 1 — pretrained models",
            subcategory="App. E",
            figure="App. E",
        ),
    log:
        "logs/plot_llm_appendix/plot_llm_appendix.log",
    benchmark:
        PATHS.benchmark("plot_llm_appendix/plot_llm_appendix")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        figures=CFG.llm_appendix_family(),
        names=CFG.paper1_display_names(),
        code=code_fingerprint("plot_llm_appendix"),
    script:
        "../scripts/plot_llm_appendix.py"
