# Score extraction: every forward-pass variant a stage asks for, in one job per (model, dataset,
# shard of sequences): one model load, one read of the prompts. Where the dataset is one shard
# (extract.shard_size >= its n_sequences: config.yaml, configs/paper.yaml), that job,
# extract_scores, writes the pair's final stores, results/scores/{model}/{dataset}/{variant}.zarr,
# as merge_scores writes the merge of one shard (causalpos.stages.extract.as_merged): no merge
# job, no shard copy. Where it is several, extract_scores_shard writes one store per variant in
# each shard directory (temporary: snakemake --notemp keeps them) and merge_scores merges them
# exactly into the same final stores. The shard count decides the rule (wildcard constraints
# from the config); the rules reading the stores name the directory. Then diagonal normalization.


rule extract_scores:
    input:
        model=PATHS.MODEL_DIR,
        data=data_store,
    output:
        directory(PATHS.SCORE_DIR),
    # the pair's one shard: logged where a shard's job logs (benchmarks/budget.py reads them)
    log:
        "logs/extract_scores/{model}/{dataset}/shard-0000.log",
    benchmark:
        PATHS.benchmark("extract_scores/{model}/{dataset}/shard-0000")
    wildcard_constraints:
        dataset=CFG.shard_count_pattern(one=True),
    # One thread: paper 2's per-map fits are single-threaded and small ops scale poorly, so two
    # 1-thread extraction jobs finish more work than one 2-thread job (measured on SmolLM2:
    # 47.7 CPU-s at 1 thread vs 58.7 at 2 for the same job). On SLURM the host side of a GPU
    # job gets up to 4, capped at the partition's largest node (common.smk: extract_threads).
    priority: PRIORITY_LONG
    conda:
        ENV_MODELS
    threads: extract_threads
    resources:
        mem_mb=extract_mem_mb,
        runtime=120,
        gpu=SCHEDULING.gpu,
    params:
        bounds=one_shard_bounds_params,
        final=True,
        variants=extraction_params,
        # ExtractSettings but the device: where the model runs is the untracked `run` (results
        # cannot change); the dtype is a setting
        settings=extract_settings_params,
        run=CFG.run_options(),
        code=code_fingerprint("extract_scores"),
    script:
        "../scripts/extract_scores.py"


# The same job on one shard of several: the shard's stores, merged by merge_scores.
use rule extract_scores as extract_scores_shard with:
    output:
        temp(directory(PATHS.SCORE_SHARD)),
    log:
        "logs/extract_scores/{model}/{dataset}/shard-{shard}.log",
    benchmark:
        PATHS.benchmark("extract_scores/{model}/{dataset}/shard-{shard}")
    wildcard_constraints:
        dataset=r"[^/]+",
    params:
        bounds=shard_bounds_params,
        final=False,


rule merge_scores:
    input:
        score_shards,
    output:
        directory(PATHS.SCORE_DIR),
    log:
        "logs/merge_scores/{model}/{dataset}.log",
    benchmark:
        PATHS.benchmark("merge_scores/{model}/{dataset}")
    wildcard_constraints:
        dataset=CFG.shard_count_pattern(one=False),
    priority: PRIORITY_NEXT
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=merge_mem_mb,
        runtime=merge_runtime,
    params:
        variants=merge_variants_params,
        code=code_fingerprint("merge_scores"),
    script:
        "../scripts/merge_scores.py"


rule diagonal_normalize:
    input:
        PATHS.SCORE_DIR,
    output:
        directory(PATHS.NORMALIZED_STORE),
    log:
        "logs/diagonal_normalize/{model}/{dataset}/{variant}.log",
    benchmark:
        PATHS.benchmark("diagonal_normalize/{model}/{dataset}/{variant}")
    priority: PRIORITY_TABLES
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=normalize_mem_mb,
        runtime=30,
    params:
        code=code_fingerprint("diagonal_normalize"),
    script:
        "../scripts/diagonal_normalize.py"
