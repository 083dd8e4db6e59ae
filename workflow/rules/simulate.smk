# Paper 1 §2, §4: the parameter-free decoder, one store per setting; §1: theory check.


rule simulate:
    output:
        directory(PATHS.SIM_STORE),
    log:
        "logs/simulate/{setting}.log",
    benchmark:
        PATHS.benchmark("simulate/{setting}")
    priority: PRIORITY_TABLES
    conda:
        ENV_MODELS
    # One thread (one worker): the settings are independent jobs, and a 1-thread job can start
    # whenever one core is free (a 2-thread job waited for both, leaving one idle).
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        setting=sim_setting_params,
        seed=COMMON.seed,
        code=code_fingerprint("simulate"),
    script:
        "../scripts/simulate.py"


rule theory_check:
    input:
        theory_stores,
    output:
        **catalogue_outputs("theory_check"),
    log:
        "logs/theory_check/theory_check.log",
    benchmark:
        PATHS.benchmark("theory_check/theory_check")
    priority: PRIORITY_TABLES
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        **CFG.settings(TheorySettings),
        code=code_fingerprint("theory_check"),
    script:
        "../scripts/theory_check.py"
