# causalpos — where positional information comes from in decoder-only transformers.
#
#   snakemake --cores 8                                   # embedded default (config.yaml), CPU, offline
#   snakemake --cores 8 --use-conda                       # the same, each rule in its conda env
#   snakemake --profile profiles/slurm --configfile configs/paper.yaml   # the papers, on a GPU cluster
#
# Stages (one .smk each): simulate; models -> data -> extract -> stats -> figures; train. See README.md for what each output is.

from snakemake.utils import min_version, validate

min_version("9.0")


# `--configfile X` replaces the embedded default rather than being deep-merged into it, so a named
# config (configs/*.yaml) means exactly what it says.
if not workflow.config_settings.configfiles:

    configfile: "config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/simulate.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/extract.smk"
include: "workflow/rules/leakage.smk"
include: "workflow/rules/stats.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        CFG.all_targets(),
