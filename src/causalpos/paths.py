"""Every path the pipeline writes under ``results/`` and ``resources/``, each pattern once.

A pattern names its parts with the workflow's wildcards (``{model}``, ``{dataset}``, ...), so a
rule's ``output:`` is the pattern itself (``.smk`` files import this module as ``PATHS``) and a
resolver fills it in. A figure is ``FIGURE`` with one of the ``*_FIGURE`` stems and a format.
``tests/test_paths.py`` fails on a results or resources path spelled anywhere else in ``src/`` or
``workflow/``, and on a rule output that is none of :data:`PATTERNS`. Pure: imports nothing."""

from __future__ import annotations

#: The pipeline's outputs, and the fetched or built inputs (model weights, tokenizers).
RESULTS_ROOT = "results"

# ---------------------------------------------------------------------------------------------
# Stores (zarr directories) and the directories of models and tokenizers.
MODEL_DIR = "resources/models/{model}"
TRAINED_MODEL_DIR = "resources/models/trained-{variant}"
INIT_TWIN_DIR = "resources/models/trained-{variant}-init"
TOKENIZER_DIR = "resources/tokenizers/{tokenizer}"
#: The directory of every model's directory.
MODELS_ROOT = MODEL_DIR.removesuffix("/{model}")

SIM_STORE = "results/sim/{setting}.zarr"
DATA_STORE = "results/data/{dataset}/{tokenizer}.zarr"
#: One extraction job's output: every variant of (model, dataset) on one shard of sequences
#: (``{shard}``: four digits, :func:`score_shard`), as ``{variant}.zarr`` inside it.
SCORE_SHARD = "results/shards/{model}/{dataset}/shard-{shard}"
SCORE_DIR = "results/scores/{model}/{dataset}"
SCORE_STORE = "results/scores/{model}/{dataset}/{variant}.zarr"
NORMALIZED_STORE = "results/normalized/{model}/{dataset}/{variant}.zarr"
LEAKAGE_STORE = "results/leakage/{model}/{dataset}.zarr"
POSITION0_STORE = "results/position0/{model}/{dataset}.zarr"
GRAM_STORE = "results/gram/{model}.zarr"
LENGTHGEN_STORE = "results/lengthgen/lengthgen.zarr"

# ---------------------------------------------------------------------------------------------
# Tables.
THEORY_TABLE = "results/sim/theory.csv"
SIM_INDEX_TABLE = "results/stats/simulation_index.csv"
LLM_INDEX_TABLE = "results/stats/llm_index.csv"
GRAM_NEARBY_TABLE = "results/stats/gram_nearby.csv"
TRAIN_LENGTHGEN_TABLE = "results/stats/train_lengthgen.csv"
TRAIN_INDEX_TABLE = "results/stats/train_index.csv"
TRAIN_COMPARISON_TABLE = "results/stats/train_comparison.csv"
#: One table of paper 2 (``{name}``: its file stem after ``paper2_``; the catalogue names each
#: table's, :data:`causalpos.catalogue.PAPER2_TABLES`).
PAPER2_TABLE = "results/stats/paper2_{name}.csv"
PAPER2_TABLES_MD = "results/stats/paper2_tables.md"
SCORECARD_CSV = "results/report/scorecard.csv"
SCORECARD_MD = "results/report/scorecard.md"
#: The findings page of a run, rendered from the template (:data:`FINDINGS_TEMPLATE`).
FINDINGS_MD = "results/report/findings.md"
#: The findings page's template (in the repository, not under results/).
FINDINGS_TEMPLATE = "docs/findings.template.md"

#: Snakemake's ``benchmark:`` table of one job (wall and CPU seconds, peak memory, I/O), by
#: :func:`benchmark`: ``{job}`` is the job's log path below ``logs/`` without ``.log``, so a job's
#: table and its log pair by name. Timings, not results: ``causalpos diff-results`` skips them.
BENCHMARKS_ROOT = "results/benchmarks"
BENCHMARK = BENCHMARKS_ROOT + "/{job}.tsv"

# ---------------------------------------------------------------------------------------------
# Figures: ``FIGURE`` with one of the stems below and a configured format (``figures.formats``).
FIGURE = "results/figures/{stem}.{fmt}"
FIG1_FIGURE = "fig1_theory"
SIM_FIGURE = "sim_{figure}"
LLM_FIG5_FIGURE = "llm_fig5"
LLM_APPENDIX_FIGURE = "llm_appE_{model}_{dataset}_{variant}"
PAPER2_LAYERS_FIGURE = "paper2_layers_{experiment}"
PAPER2_CLAIM1_FIGURE = "paper2_claim1_{experiment}"
PAPER2_SHARES_FIGURE = "paper2_shares_{experiment}"
PAPER2_ROUTES_FIGURE = "paper2_routes_{experiment}"
PAPER2_POSITION0_FIGURE = "paper2_position0_{experiment}"
PAPER2_HEADS_FIGURE = "paper2_heads_{model}_{dataset}"
TRAIN_LOSS_CURVES_FIGURE = "train_loss_curves"
TRAIN_FIG3_FIGURE = "train_fig3_{model}"
TRAIN_FIG8_FIGURE = "train_fig8_{model}"
TRAIN_LOSS_BY_POSITION_FIGURE = "train_loss_by_position"
TRAIN_INDEX_FIGURE = "train_index"
TRAIN_COMPARISON_FIGURE = "train_comparison"
TRAIN_MAPS_FIGURE = "train_maps"

#: Every figure stem above (the ``*_FIGURE`` names), in their order.
FIGURE_STEMS = tuple(v for k, v in dict(globals()).items() if k.endswith("_FIGURE"))


def score_shard(model: str, dataset: str, k: int) -> str:
    """The directory of shard ``k`` (0-based) of (model, dataset): ``shard-0000``, ``shard-0001``..."""
    return SCORE_SHARD.format(model=model, dataset=dataset, shard=f"{k:04d}")


#: A leakage summary job's own measure of its cost, beside its benchmark table (CPU-s and peak
#: memory of its process at its end: ``causalpos.io.jobcost.write_job_cost``): the scorecard's
#: power notes price a larger summary from it.
LEAKAGE_COST = BENCHMARKS_ROOT + "/leakage/{model}/{dataset}.cost.json"


def benchmark(job: str) -> str:
    """The benchmark table of ``job`` (its log's path below ``logs/`` without ``.log``, wildcards
    kept): ``benchmark("simulate/{setting}")`` is ``results/benchmarks/simulate/{setting}.tsv``."""
    return BENCHMARK.format(job=job)


def paper2_table(name: str) -> str:
    """The CSV of the paper-2 table whose file stem is ``paper2_<name>``."""
    return PAPER2_TABLE.format(name=name)


def figure(stem: str, fmt: str) -> str:
    """Figure ``stem`` in format ``fmt``; wildcards in the stem (``{experiment}``) are kept."""
    return FIGURE.format(stem=stem, fmt=fmt)


def figures(stem: str, formats: list[str] | tuple[str, ...]) -> list[str]:
    """Figure ``stem`` in every format of ``formats``, in that order."""
    return [figure(stem, fmt) for fmt in formats]


#: Every pattern a rule may write (figures: with ``{fmt}`` for the format).
PATTERNS = (
    MODEL_DIR,
    TRAINED_MODEL_DIR,
    INIT_TWIN_DIR,
    TOKENIZER_DIR,
    SIM_STORE,
    DATA_STORE,
    SCORE_SHARD,
    SCORE_DIR,
    SCORE_STORE,
    NORMALIZED_STORE,
    LEAKAGE_STORE,
    LEAKAGE_COST,
    POSITION0_STORE,
    GRAM_STORE,
    LENGTHGEN_STORE,
    THEORY_TABLE,
    SIM_INDEX_TABLE,
    LLM_INDEX_TABLE,
    GRAM_NEARBY_TABLE,
    TRAIN_LENGTHGEN_TABLE,
    TRAIN_INDEX_TABLE,
    TRAIN_COMPARISON_TABLE,
    PAPER2_TABLE,
    PAPER2_TABLES_MD,
    SCORECARD_CSV,
    SCORECARD_MD,
    FINDINGS_MD,
    *(figure(stem, "{fmt}") for stem in FIGURE_STEMS),
)
