# The reproduction scorecard: every target of both papers as a row (claim, paper value,
# measured value with CI, verdict), from the pipeline's own tables; and the run's findings page,
# docs/findings.template.md filled from the same tables and the scorecard.


rule scorecard:
    input:
        unpack(scorecard_inputs),
    output:
        **catalogue_outputs("scorecard"),
    log:
        "logs/scorecard/scorecard.log",
    benchmark:
        PATHS.benchmark("scorecard/scorecard")
    priority: PRIORITY_TABLES
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        **CFG.settings(ReportSettings),
        # paper 2's materiality thresholds (leakage.materiality): a change reruns the scorecard
        materiality=CFG.leakage_materiality(),
        code=code_fingerprint("scorecard"),
    script:
        "../scripts/scorecard.py"
