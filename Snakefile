# causalpos — where positional information comes from in decoder-only transformers.
#
#   snakemake --cores 8                                   # embedded default (config.yaml), CPU, offline
#   snakemake --cores 8 --use-conda                       # the same, each rule in its conda env
#   snakemake --workflow-profile profiles/slurm --configfile configs/paper.yaml   # the papers, on SLURM
#
# Stages, one workflow/rules/*.smk each (docs/outputs.md: what each output is):
#   simulate  paper 1's parameter-free decoder, one store per setting; the theory check
#   models    model sources -> HF-format directories under resources/models/
#   data      corpora -> token sequences, one store per (dataset, tokenizer)
#   extract   score extraction per (model, dataset, shard), the shards' merge, normalization
#   leakage   paper 2: the leakage summary, position 0, its tables (aggregate_leakage), figures
#   stats     paper 1's non-relativeness index and shares, simulations and LLMs
#   figures   paper 1's figures (Fig. 1, simulations, Fig. 5, appendix)
#   train     the models trained here: tokenizer, training, Gram panels, length generalization,
#             the random-init twin and the trained-vs-init comparison
#   report    the scorecard (every target with its verdict) and the run's findings page
#   slurm     SLURM hooks (profiles/slurm): node-capped requests, pre-submission checks,
#             jobs killed for memory named
# common.smk holds the config resolver and the rules' input functions, shared by every stage.

import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")


# `--configfile X` replaces the embedded default rather than being deep-merged into it, so a named
# config (configs/*.yaml) means exactly what it says.
if not workflow.config_settings.configfiles:

    configfile: "config.yaml"


sys.path.insert(0, os.path.join(workflow.basedir, "src"))
from causalpos.config.yamlfile import check_config_files

# A key given twice in one mapping of a config file stops here, naming the key, the file and both
# lines (YAML, and so Snakemake, would keep the last value without a word).
check_config_files(
    workflow.config_settings.configfiles
    or [os.path.join(workflow.basedir, "config.yaml")]
)

# A config that fails the schema stops here with the key, the value and what is wrong (not the
# whole schema, which is what snakemake.utils.validate prints).
SCHEMA = "workflow/schemas/config.schema.yaml"
try:
    validate(config, SCHEMA)
except WorkflowError as exc:
    from causalpos.config import schema_error_summary

    raise WorkflowError(schema_error_summary(exc, SCHEMA)) from None


# Never more compute threads than CPUs: `--cores 8` on a 2-core machine would run four 2-thread
# jobs at once, each slower than alone. Locally the cores are capped at the CPUs this process may
# use; cluster runs (`--jobs`/nodes) are not limited here (Snakemake ignores local cores there).
usable_cpus = (
    len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
)
if (workflow.global_resources["_cores"].value or 0) > usable_cpus:
    print(
        f"causalpos: --cores {workflow.global_resources['_cores'].value} capped to the "
        f"{usable_cpus} CPUs of this machine (threads beyond them would only compete)",
        file=sys.stderr,
    )
    workflow.global_resources["_cores"] = usable_cpus


# The report's front page (a banner there when the config is a rehearsal: `rehearsal: true`).
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/slurm.smk"
include: "workflow/rules/simulate.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/extract.smk"
include: "workflow/rules/leakage.smk"
include: "workflow/rules/stats.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"


# Cluster runs: the light rules (config `local_rules`: figures, tables, the scorecard) run in the
# submitting Snakemake process rather than as cluster jobs; on one machine every rule is local.
try:
    workflow.localrules(*CFG.local_rules(r.name for r in workflow.rules))
except ValueError as exc:
    raise WorkflowError(str(exc)) from None


rule all:
    default_target: True
    input:
        CFG.all_targets(),
