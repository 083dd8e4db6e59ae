# Models trained here: one tokenizer, one-factor variants (rope / nope / ntk / swa),
# paper 1 Figs. 3 and 8 on held-out text, loss by position beyond the training length.
#
# Variants differ in exactly one positional factor: same tokenizer, data order, initial weights
# and optimiser (causalpos.training). Hyper-parameters are the `train:` section's (declared once, in
# causalpos.training.settings), each variant's own keys over them; only the keys a variant uses
# enter its params, so changing `train.window` reruns the sliding-window model alone.


rule train_tokenizer:
    output:
        directory(PATHS.TOKENIZER_DIR),
    log:
        "logs/train_tokenizer/{tokenizer}.log",
    benchmark:
        PATHS.benchmark("train_tokenizer/{tokenizer}")
    wildcard_constraints:
        tokenizer=r"[A-Za-z0-9_.-]+",
    priority: PRIORITY_FIRST
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        **CFG.settings(TrainCorpus),
        **CFG.settings(TokenizerSettings),
        code=code_fingerprint("train_tokenizer"),
    script:
        "../scripts/train_tokenizer.py"


rule train_model:
    input:
        tokenizer=train_tokenizer_dir,
    output:
        directory(PATHS.TRAINED_MODEL_DIR),
    log:
        "logs/train_model/{variant}.log",
    benchmark:
        PATHS.benchmark("train_model/{variant}")
    wildcard_constraints:
        variant=r"[A-Za-z0-9_]+",
    # Measured: two 1-thread jobs use 2 cores better than one 2-thread job.
    priority: PRIORITY_LONG
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=240,
        gpu=SCHEDULING.gpu,
    params:
        **CFG.settings(TrainCorpus),
        settings=train_variant_params,
        # where it runs and how often it checkpoints change no number: untracked
        run=CFG.run_options(),
        code=code_fingerprint("train_model"),
    script:
        "../scripts/train_model.py"


rule gram_panels:
    input:
        unpack(gram_inputs),
    output:
        directory(PATHS.GRAM_STORE),
    log:
        "logs/gram_panels/{model}.log",
    benchmark:
        PATHS.benchmark("gram_panels/{model}")
    wildcard_constraints:
        model=r"[A-Za-z0-9_.-]+",
    priority: PRIORITY_TABLES
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=SCHEDULING.gpu,
    params:
        corpus=gram_corpus_params,
        seq_len=gram_seq_len,
        n_sequences=gram_n_sequences,
        seed=COMMON.seed,
        dtype=COMMON.dtype,
        run=CFG.run_options(),
        code=code_fingerprint("gram_panels"),
    script:
        "../scripts/gram_panels.py"


rule gram_table:
    input:
        stores=expand(PATHS.GRAM_STORE, model=CFG.gram_models()),
    output:
        **catalogue_outputs("gram_table"),
    log:
        "logs/gram_table/gram_table.log",
    benchmark:
        PATHS.benchmark("gram_table/gram_table")
    priority: PRIORITY_TABLES
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        models=CFG.gram_models(),
        seed=COMMON.seed,
        code=code_fingerprint("gram_table"),
    script:
        "../scripts/gram_table.py"


rule length_generalization:
    input:
        trained_models,
    output:
        **catalogue_outputs("length_generalization"),
        store=directory(PATHS.LENGTHGEN_STORE),
    log:
        "logs/length_generalization/length_generalization.log",
    benchmark:
        PATHS.benchmark("length_generalization/length_generalization")
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=SCHEDULING.gpu,
    params:
        variants=CFG.train_variants(),
        corpus=train_heldout_params,
        settings=CFG.settings(LengthGenSettings),
        dtype=COMMON.dtype,
        run=CFG.run_options(),
        code=code_fingerprint("length_generalization"),
    script:
        "../scripts/length_generalization.py"


# ---------------------------------------------------------------------------------------------
# Figures of the trained models.


rule plot_loss_curves:
    input:
        trained_models,
    output:
        *figure_reports(
            CFG.figure_paths(PATHS.TRAIN_LOSS_CURVES_FIGURE),
            caption="../report/train_loss_curves.rst",
            category="Models trained here",
            labels=CFG.trained_labels("training curves", "held-out books"),
        ),
    log:
        "logs/plot_loss_curves/plot_loss_curves.log",
    benchmark:
        PATHS.benchmark("plot_loss_curves/plot_loss_curves")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        variants=CFG.train_variants(),
        names=CFG.train_display_names(),
        heldout=CFG.settings(TrainCorpus)["heldout"],
        code=code_fingerprint("plot_loss_curves"),
    script:
        "../scripts/plot_loss_curves.py"


# One job draws Figs. 3 and 8 of every model.
rule plot_gram_figures:
    input:
        family_paths(CFG.gram_figure_family(), "store"),
    output:
        *family_reports(
            CFG.gram_figure_family(),
            "fig3",
            "gram",
            caption="train_fig3",
            category="Models trained here",
            subcategory="Fig. 3",
            figure="Fig. 3",
        ),
        *family_reports(
            CFG.gram_figure_family(),
            "fig8",
            "gram",
            caption="train_fig8",
            category="Models trained here",
            subcategory="Fig. 8",
            figure="Fig. 8",
        ),
    log:
        "logs/plot_gram_figures/plot_gram_figures.log",
    benchmark:
        PATHS.benchmark("plot_gram_figures/plot_gram_figures")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        figures=CFG.gram_figure_family(),
        code=code_fingerprint("plot_gram_figures"),
    script:
        "../scripts/plot_gram_figures.py"


rule plot_loss_by_position:
    input:
        PATHS.LENGTHGEN_STORE,
    output:
        *figure_reports(
            CFG.figure_paths(PATHS.TRAIN_LOSS_BY_POSITION_FIGURE),
            caption="../report/train_loss_by_position.rst",
            category="Models trained here",
            labels=CFG.trained_labels(
                "loss by position", "held-out chunks (train.lengthgen)"
            ),
        ),
    log:
        "logs/plot_loss_by_position/plot_loss_by_position.log",
    benchmark:
        PATHS.benchmark("plot_loss_by_position/plot_loss_by_position")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        **CFG.settings(LossByPositionSettings),
        names=CFG.train_display_names(),
        code=code_fingerprint("plot_loss_by_position"),
    script:
        "../scripts/plot_loss_by_position.py"


# ---------------------------------------------------------------------------------------------
# Controlled comparisons: trained vs the weights training started from, and the variants side by
# side on one held-out dataset (paper 1's index, paper 2's decomposition, length generalization).


rule init_twin:
    input:
        PATHS.TRAINED_MODEL_DIR,
    output:
        directory(PATHS.INIT_TWIN_DIR),
    log:
        "logs/init_twin/{variant}.log",
    benchmark:
        PATHS.benchmark("init_twin/{variant}")
    wildcard_constraints:
        variant=r"[A-Za-z0-9_]+",
    priority: PRIORITY_LONG
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code_fingerprint("init_twin"),
    script:
        "../scripts/init_twin.py"


rule compare_trained:
    input:
        unpack(compare_inputs),
    output:
        **catalogue_outputs("compare_trained"),
    log:
        "logs/compare_trained/compare_trained.log",
    benchmark:
        PATHS.benchmark("compare_trained/compare_trained")
    priority: PRIORITY_TABLES
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        variants=CFG.train_variants(),
        twins=CFG.compare_twin_variants(),
        leakage=CFG.compare_leakage_variants(),
        leakage_init=CFG.compare_leakage_variants("-init"),
        stats=CFG.settings(BootstrapSettings),
        stores=compare_score_stores,
        code=code_fingerprint("compare_trained"),
    script:
        "../scripts/compare_trained.py"


rule plot_train_comparison:
    input:
        unpack(compare_plot_inputs),
    output:
        index=figure_reports(
            CFG.figure_paths(PATHS.TRAIN_INDEX_FIGURE),
            caption="../report/train_index_figure.rst",
            category="Models trained here",
            labels=CFG.trained_labels("index, trained vs init"),
        ),
        comparison=figure_reports(
            CFG.figure_paths(PATHS.TRAIN_COMPARISON_FIGURE),
            caption="../report/train_comparison_figure.rst",
            category="Models trained here",
            labels=CFG.trained_labels("variants side by side"),
        ),
        maps=figure_reports(
            CFG.figure_paths(PATHS.TRAIN_MAPS_FIGURE),
            caption="../report/train_maps.rst",
            category="Models trained here",
            labels=CFG.trained_labels("normalized maps, trained vs init"),
        ),
    log:
        "logs/plot_train_comparison/plot_train_comparison.log",
    benchmark:
        PATHS.benchmark("plot_train_comparison/plot_train_comparison")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        **CFG.settings(ComparisonFigureSettings),
        variants=CFG.train_variants(),
        twins=CFG.compare_twin_variants(),
        names=CFG.train_display_names(),
        stores=compare_score_stores,
        code=code_fingerprint("plot_train_comparison"),
    script:
        "../scripts/plot_train_comparison.py"
