# Model sources -> HF-format directories under resources/models/{model} (design.md: models).


rule prepare_model:
    input:
        prepare_model_inputs,
    output:
        directory(PATHS.MODEL_DIR),
    log:
        "logs/prepare_model/{model}.log",
    benchmark:
        PATHS.benchmark("prepare_model/{model}")
    wildcard_constraints:
        model=CFG.model_wildcard_pattern(),
    # One thread, so that the job can start whenever one core is free (see simulate).
    priority: PRIORITY_FIRST
    conda:
        ENV_MODELS
    threads: 1
    # From the model's parameter count and dtype (causalpos.models.footprint.prepare_request).
    resources:
        mem_mb=prepare_mem_mb,
        disk_mb=prepare_disk_mb,
        runtime=60,
    params:
        spec=model_spec_params,
        # the content of the user's files: a replacement with an older mtime reruns it too
        sources=model_source_sha256,
        dtype=prepare_dtype_params,
        tokenizer_dir=prepare_tokenizer_dir_params,
        code=code_fingerprint("prepare_model"),
    script:
        "../scripts/prepare_model.py"
