# Shared by every stage: the config resolver, env paths, wildcard constraints and the input /
# params functions of the rules. Config resolution itself (settings, experiments, target lists,
# checks) lives in src/causalpos/config/ and is unit-tested there; the functions below only
# hand a rule's wildcards to it. No science here; the library (src/causalpos) holds it.

import json
import os
import sys
from pathlib import Path

# The library is imported from the checkout (not only an installed copy), so a Snakemake process
# running under --use-conda or without `pip install -e .` fingerprints the code that jobs will run.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from causalpos.io.fingerprint import code_fingerprint as _code_fingerprint  # noqa: E402
from causalpos.io.fingerprint import use_cache as _fingerprint_cache  # noqa: E402
from causalpos.io.runconfig import CONFIG_ENV, CONFIGFILES_ENV  # noqa: E402
from causalpos.io.runlog import forward_interrupt_to_jobs  # noqa: E402
from causalpos.io.runlog import keep_symlinked_output_dirs  # noqa: E402
from causalpos.config import VARIANT_PATTERN, Resolved  # noqa: E402
from causalpos.config import family_paths, score_dirs  # noqa: E402
from causalpos.config.provenance import setup_provenance  # noqa: E402
from causalpos.config.report import labels as report_labels  # noqa: E402
from causalpos.config.report import shown as report_shown  # noqa: E402
from causalpos.io.captions import item_caption as _item_caption  # noqa: E402
from causalpos.paper1.settings import BootstrapSettings  # noqa: E402
from causalpos.paper1.settings import Fig5Settings, TheorySettings  # noqa: E402
from causalpos.paper2.settings import StrataSettings  # noqa: E402
from causalpos.settings import Common, ReportSettings, Scheduling  # noqa: E402
from causalpos.training.settings import ComparisonFigureSettings  # noqa: E402
from causalpos.training.settings import LengthGenSettings  # noqa: E402
from causalpos.training.settings import LossByPositionSettings  # noqa: E402
from causalpos.training.settings import TokenizerSettings, TrainCorpus  # noqa: E402

# (`report` at the start of a line opens Snakemake's report directive: imported under another name)
from snakemake.io import report as report_files  # noqa: E402
from causalpos.config.disk import cached_document_sizes  # noqa: E402
from causalpos.config.strict import cuda_refusal, cuda_unavailable  # noqa: E402
from causalpos.io.fingerprint import cached_sha256  # noqa: E402
import causalpos.paths as PATHS  # noqa: E402  (the path patterns, each written once)
import causalpos.catalogue as CATALOGUE  # noqa: E402  (every table, declared once)

# Ctrl-C / SIGINT to Snakemake stops the running jobs at once (SIGTERM to each; causalpos.io.runlog)
# instead of Snakemake waiting for them to finish.
forward_interrupt_to_jobs()

# An output directory that is a symbolic link (results/leakage -> /bigdisk/leakage) survives
# Snakemake's end-of-run clean-up of empty directories, which would fail on it (NotADirectoryError).
keep_symlinked_output_dirs()

# Jobs name the pipeline's --configfile in the rebuild commands of their errors
# (causalpos.io.integrity.rebuild_command); empty for the default config.yaml.
os.environ[CONFIGFILES_ENV] = os.pathsep.join(
    map(str, workflow.config_settings.configfiles or [])
)
# ... and its --config KEY=VALUE overrides, as given and as Snakemake parsed them: recorded in
# every store and table it writes (causalpos verify compares them with that config) and named in
# the rebuild commands.
CONFIG_ARGS = workflow.config_settings.config_args or []
CONFIG_ARGS = (
    [CONFIG_ARGS] if isinstance(CONFIG_ARGS, str) else list(map(str, CONFIG_ARGS))
)
os.environ[CONFIG_ENV] = json.dumps(
    {"args": CONFIG_ARGS, "values": dict(workflow.config_settings.config or {})},
    default=str,
)

# What local corpora can supply is read once per corpus version and kept between starts.
CFG = Resolved(
    config,
    document_sizes=cached_document_sizes(
        Path(".snakemake") / "causalpos" / "corpus_sizes.json"
    ),
    # The sha256 of the user's model and corpus files (params of the jobs reading them: content
    # decides, not mtime), hashed once per (path, size, mtime, ctime, inode), kept between starts.
    content_sha256=cached_sha256(
        Path(".snakemake") / "causalpos" / "content_sha256.json"
    ),
)

# The top-level keys several rules read (seed, dtype) and where jobs run (device, GPUs held).
COMMON = CFG.values(Common)
SCHEDULING = CFG.values(Scheduling)

# Config-time checks (targets, variant names, what local corpora can supply, sequence lengths vs
# model contexts): errors stop the run before any job starts; once, in the main process.
if workflow.is_main_process:
    for _warning in CFG.check():
        print(f"causalpos: warning: {_warning}", file=sys.stderr)


def device_checked_here():
    """Whether this process's torch is the one the model jobs will use with `device: cuda`:
    not where they run in conda or container environments (--sdm), which hold their own.
    """
    return (
        SCHEDULING.device == "cuda"
        and not workflow.deployment_settings.deployment_method
    )


def check_local_device():
    """Before the first job (onstart, slurm.smk) of a run on this machine, not a cluster's:
    `device: cuda` where torch here sees no GPU stops it, naming the jobs that would use it
    (causalpos.config.strict.cuda_unavailable); nothing to check where no such job runs.
    """
    if not workflow.local_exec or workflow.touch or not device_checked_here():
        return
    jobs = {
        j.rule.name
        for j in workflow.dag.needrun_jobs()
        if int(j.resources.get("gpu", 0) or 0) > 0
    }
    problem = cuda_unavailable(SCHEDULING.device) if jobs else None
    if problem:
        raise WorkflowError(f"causalpos: {cuda_refusal(problem, jobs)}")


# A dry run on this machine names what the run would refuse. Snakemake keeps --jobs as the
# node count only where jobs are submitted (--executor: cluster, cloud), so a dry run of
# one is not checked: its nodes have their own GPUs.
if (
    workflow.is_main_process
    and workflow.output_settings.dryrun
    and workflow.resource_settings.nodes is None
    and device_checked_here()
):
    _problem = cuda_unavailable(SCHEDULING.device)
    if _problem:
        print(
            f"causalpos: warning: {cuda_refusal(_problem)} (a run on this machine stops "
            "before its first job)",
            file=sys.stderr,
        )

# Provenance (causalpos.config.provenance): the record every store of this config is expected to
# carry, in a table the jobs read (a job writing a store records its entry, one reading a store
# compares), and, before any job, every existing store checked against it: a store at another
# store's path, or one another checkout or config made with other settings, stops the run.
setup_provenance(
    CFG,
    Path(".snakemake") / "causalpos",
    configfiles=list(map(str, workflow.config_settings.configfiles or [])),
    main=workflow.is_main_process,
    argv=sys.argv[1:],
    config_args=CONFIG_ARGS,
)


# The scripts' parsed import lists, kept between Snakemake starts (each cluster job starts two).
_fingerprint_cache(Path(".snakemake") / "causalpos" / "imports.json")


def code_fingerprint(script):
    """Hash of ``workflow/scripts/<script>.py`` and of every library module it imports."""
    return _code_fingerprint(
        Path(workflow.basedir) / "workflow" / "scripts" / f"{script}.py"
    )


# envs/analysis.yaml has no torch: a rule whose code imports torch (anywhere in its script's
# import closure) uses envs/models.yaml (tests/test_envs.py checks it).
ENV_ANALYSIS = "../../envs/analysis.yaml"
ENV_MODELS = "../../envs/models.yaml"


# Scheduling on a few cores: the jobs that start the long chains first, then the long jobs
# themselves (training, extraction: a long job started last is the run's tail), then what
# follows them; the short jobs fill the cores in between: first the scorecard's chain (the
# simulations and every table it reads, then the scorecard), and last the figures, which no job
# reads: the run ends on figures beside the scorecard, two at a time, not on the scorecard alone
# after the last simulation. Priorities order the ready jobs only: what a job computes does not
# depend on them.
PRIORITY_FIRST = 30  # prepare_model, sample_sequences, train_tokenizer
PRIORITY_LONG = 20  # train_model, init_twin, extract_scores(_shard)
PRIORITY_NEXT = 10  # merge_scores, leakage
PRIORITY_TABLES = 5  # simulate, the scorecard's tables and what they read, scorecard


wildcard_constraints:
    setting=r"[A-Za-z0-9_.-]+",
    figure=r"[A-Za-z0-9_]+",
    model=r"[^/]+",
    dataset=r"[^/]+",
    tokenizer=r"[^/]+",
    variant=VARIANT_PATTERN,
    shard=r"\d{4}",


# `snakemake --report`: one item per figure (its PNG; a PDF stays an output, not an item), each
# labelled with what it is, its model and its dataset (causalpos.config.report), each figure of a
# family job with a caption of its own naming its model (causalpos.io.captions).
CAPTIONS = Path(".snakemake") / "causalpos" / "captions"


def figure_reports(paths, caption, category, labels, subcategory=None):
    """One figure's files as outputs: the one the report shows flagged for it, the others plain."""
    show = set(report_shown(paths))
    return [
        (
            report_files(
                p,
                caption=caption,
                category=category,
                subcategory=subcategory,
                labels=labels,
            )
            if p in show
            else p
        )
        for p in paths
    ]


def family_reports(family, key, kind, caption, category, subcategory, figure):
    """A family job's outputs for `snakemake --report`: each item's files under `key`, in
    `subcategory`, labelled and captioned with the item's names (its caption: the template
    `workflow/report/<caption>.rst` rendered for it)."""
    template = Path(workflow.basedir) / "workflow" / "report" / f"{caption}.rst"
    out = []
    for name, item in family.items():
        names = CFG.report_names(kind, name, figure)
        path = _item_caption(
            template, names, CAPTIONS, name, write=workflow.is_main_process
        )
        out += figure_reports(
            item[key], path, category, report_labels(names), subcategory
        )
    return out


def table_report(path, caption, category):
    """A table for `snakemake --report`, labelled with its file name (it holds every model and
    dataset of the run)."""
    return report_files(
        path,
        caption=caption,
        category=category,
        labels=CFG.report_labels(Path(path).name),
    )


def table_caption(table):
    """A catalogue table's caption: `workflow/report/<caption>.rst`, or the template
    `workflow/report/table.rst` rendered with what it holds (a table without one)."""
    if table.caption:
        return f"../report/{table.caption}.rst"
    template = Path(workflow.basedir) / "workflow" / "report" / "table.rst"
    names = {"holds": table.holds, "rule": table.rule}
    return _item_caption(
        template, names, CAPTIONS, table.name, write=workflow.is_main_process
    )


def catalogue_outputs(rule):
    """The tables `rule` writes, as the output catalogue declares them (causalpos.catalogue):
    output name -> the table's path, a report item unless the catalogue keeps it out."""
    return {
        t.output: (
            table_report(t.path, table_caption(t), t.category) if t.report else t.path
        )
        for t in CATALOGUE.rule_tables(rule)
    }


# ---------------------------------------------------------------------------------------------
# Simulations (simulate.smk, stats.smk, figures.smk).
def sim_setting_params(wildcards):
    return CFG.sim_setting_params(wildcards.setting)


def sim_figure_params(wildcards):
    return CFG.sim_figure_params(wildcards.figure)


def sim_figure_stores(wildcards):
    return CFG.sim_figure_stores(wildcards.figure)


def theory_stores(wildcards):
    return CFG.theory_stores()


def sim_stores(wildcards):
    return CFG.sim_stores()


# ---------------------------------------------------------------------------------------------
# Models, datasets, extraction (models.smk, data.smk, extract.smk, stats.smk, figures.smk).
def model_spec_params(wildcards):
    return CFG.model_spec_params(wildcards.model)


def prepare_model_inputs(wildcards):
    return CFG.prepare_model_inputs(wildcards.model)


def model_source_sha256(wildcards):
    return CFG.model_source_sha256(wildcards.model)


def corpus_sha256(wildcards):
    return CFG.corpus_sha256(wildcards.dataset)


def prepare_dtype_params(wildcards):
    return CFG.prepare_dtype(wildcards.model)


def extract_settings_params(wildcards):
    return CFG.extract_settings(wildcards.model)


def prepare_tokenizer_dir_params(wildcards):
    return CFG.prepare_tokenizer_dir(wildcards.model)


def prepare_mem_mb(wildcards):
    return CFG.prepare_resources(wildcards.model)["mem_mb"]


def prepare_disk_mb(wildcards):
    return CFG.prepare_resources(wildcards.model)["disk_mb"]


def dataset_spec_params(wildcards):
    return CFG.dataset_spec_params(wildcards.dataset)


def sample_inputs(wildcards):
    return CFG.sample_inputs(wildcards.dataset, wildcards.tokenizer)


def data_store(wildcards):
    return CFG.data_store(wildcards.model, wildcards.dataset)


def shard_bounds_params(wildcards):
    return CFG.shard_bounds(wildcards.dataset, wildcards.shard)


def one_shard_bounds_params(wildcards):
    """The sequences of a dataset of one shard: all of them (rule extract_scores)."""
    return CFG.shard_bounds(wildcards.dataset, 0)


def score_shards(wildcards):
    return CFG.score_shards(wildcards.model, wildcards.dataset)


def merge_variants_params(wildcards):
    return CFG.merge_variants(wildcards.model, wildcards.dataset)


def score_dir(wildcards):
    return CFG.score_dir(wildcards.model, wildcards.dataset)


def extraction_params(wildcards):
    return CFG.extraction_params(wildcards.model, wildcards.dataset)


# ---------------------------------------------------------------------------------------------
# Memory requests of the store rules (extract.smk, leakage.smk).
def merge_mem_mb(wildcards):
    """From the largest variant store's size (causalpos.models.footprint.merge_request): the
    job merges one variant at a time."""
    m, d = wildcards.model, wildcards.dataset
    return max(CFG.merge_resources(m, d, v)["mem_mb"] for v in CFG.merge_variants(m, d))


def merge_runtime(wildcards):
    """Minutes: 30 per variant store the job writes (one variant's merge asked 30 alone)."""
    return 30 * len(CFG.merge_variants(wildcards.model, wildcards.dataset))


def normalize_mem_mb(wildcards):
    """From the mean maps' size (causalpos.models.footprint.normalize_request)."""
    return CFG.normalize_resources(wildcards.model, wildcards.dataset)["mem_mb"]


def leakage_mem_mb(wildcards):
    """From the summed maps it reads (causalpos.models.footprint.leakage_request)."""
    return CFG.leakage_resources(wildcards.model, wildcards.dataset)["mem_mb"]


def paper1_score_dirs(wildcards):
    """The merged directories holding paper 1's score stores (params: the stores)."""
    return score_dirs(CFG.paper1_score_stores())


def paper1_normalized_stores(wildcards):
    return CFG.paper1_normalized_stores()


# ---------------------------------------------------------------------------------------------
# Models trained here (train.smk).
def train_variant_params(wildcards):
    return CFG.train_variant_params(wildcards.variant)


def trained_models(wildcards):
    return CFG.trained_models()


def train_tokenizer_dir(wildcards):
    return CFG.train_tokenizer_dir()


def train_heldout_params(wildcards):
    return CFG.train_heldout_corpus()


def gram_inputs(wildcards):
    return CFG.gram_inputs(wildcards.model)


def gram_corpus_params(wildcards):
    return CFG.gram_draw(wildcards.model)["corpus"]


def gram_seq_len(wildcards):
    return CFG.gram_draw(wildcards.model)["seq_len"]


def gram_n_sequences(wildcards):
    return CFG.gram_draw(wildcards.model)["n_sequences"]


def _score_stores_as_dirs(inputs):
    """``inputs`` with its score-store lists (trained, init) replaced by their merged
    directories (extract_scores' or merge_scores' outputs); the stores are params."""
    return {
        k: score_dirs(v) if k in ("trained", "init") else v for k, v in inputs.items()
    }


def compare_inputs(wildcards):
    return _score_stores_as_dirs(CFG.compare_inputs())


def compare_plot_inputs(wildcards):
    return _score_stores_as_dirs(CFG.compare_plot_inputs())


def compare_score_stores(wildcards):
    """{trained: [...], init: [...]}: the causal score stores of the comparison."""
    inputs = CFG.compare_inputs()
    return {k: inputs[k] for k in ("trained", "init")}


# ---------------------------------------------------------------------------------------------
# Paper 2 (leakage.smk).
def leakage_variants_params(wildcards):
    return CFG.leakage_variants(wildcards.model, wildcards.dataset)


def leakage_summary_params(wildcards):
    # the model's margins (leakage.per_model over leakage.controls): a change reruns its pairs only
    return CFG.leakage_summary_params(wildcards.model)


def leakage_model_attrs(wildcards):
    return CFG.model_attrs(wildcards.model)


def position0_params(wildcards):
    return CFG.position0_params()


def position0_inputs(wildcards):
    """Every pair's merged score directory and data store (one position0 job: all pairs)."""
    family = CFG.position0_family()
    dirs = [CFG.score_dir(p["model"], p["dataset"]) for p in family.values()]
    return list(dict.fromkeys(dirs + family_paths(family, "data")))


def leakage_summary_stores(wildcards):
    return CFG.leakage_summary_stores()


def position0_stores(wildcards):
    return CFG.position0_stores()


def experiment_summary_stores(wildcards):
    return CFG.experiment_summary_stores(wildcards.experiment)


def experiment_position0_stores(wildcards):
    return CFG.experiment_position0_stores(wildcards.experiment)


def experiment_labels(wildcards):
    return CFG.experiment_labels(wildcards.experiment)


# ---------------------------------------------------------------------------------------------
# The scorecard (report.smk): the tables the config produces, and the targets they are judged
# against (package data: an edited margin or paper value reruns the scorecard). Relative to the
# working directory: an absolute path would change with the clone's location, and Snakemake
# reruns a job whose set of input paths changed (a moved or copied clone reran the scorecard).
SCORECARD_TARGETS = os.path.relpath(
    Path(workflow.basedir) / "src" / "causalpos" / "targets.yaml"
)


# The findings page's template (docs/findings.template.md), rendered by the scorecard rule on every
# table the config writes (an edited template reruns it).
FINDINGS_TEMPLATE = os.path.relpath(Path(workflow.basedir) / PATHS.FINDINGS_TEMPLATE)


def scorecard_inputs(wildcards):
    return {
        **CFG.scorecard_inputs(),
        "targets": SCORECARD_TARGETS,
        **CFG.findings_inputs(),
        "findings_template": FINDINGS_TEMPLATE,
        # the leakage jobs' benchmarks: their CPU time prices the power notes
        **(CFG.leakage_summary_costs() if CFG.leakage_targets() else {}),
    }
