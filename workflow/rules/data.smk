# Corpora -> token sequences, one store per (dataset, tokenizer).


rule sample_sequences:
    input:
        unpack(sample_inputs),
    output:
        directory(PATHS.DATA_STORE),
    log:
        "logs/sample_sequences/{dataset}/{tokenizer}.log",
    benchmark:
        PATHS.benchmark("sample_sequences/{dataset}/{tokenizer}")
    priority: PRIORITY_FIRST
    conda:
        ENV_MODELS
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        spec=dataset_spec_params,
        seed=COMMON.seed,
        sources=corpus_sha256,
        code=code_fingerprint("sample_sequences"),
    script:
        "../scripts/sample_sequences.py"
