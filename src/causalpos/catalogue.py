"""The output catalogue: one :class:`Table` per table (its path, the rule and output writing it,
its builder, report caption and category, what it reads and holds, whether the scorecard reads it).

Everything else that names a table comes from here: the rules' ``output:`` and ``report()``
entries, the paper-2 table names (:data:`PAPER2_TABLES`), the scorecard's inputs
(:data:`SCORECARD_TABLES`) and the list in ``docs/outputs.md`` (:func:`tables_block`). Adding a
table: CONTRIBUTING.md, "Adding a table". Pure: imports only the path patterns."""

from __future__ import annotations

from dataclasses import dataclass

import causalpos.paths as paths

#: ``snakemake --report`` categories of the tables.
PAPER1_SIMULATIONS = "Paper 1 — simulations"
PAPER1_PRETRAINED = "Paper 1 — pretrained models"
TRAINED_HERE = "Models trained here"
PAPER2_CATEGORY = "Paper 2 — tables"
SCORECARD_CATEGORY = "Scorecard"

#: The rule writing every paper-2 table (and their Markdown digest).
PAPER2_RULE = "aggregate_leakage"
#: What the paper-2 tables read: the leakage summary of each (model, dataset) pair.
SUMMARY = (paths.LEAKAGE_STORE,)
_P2 = "causalpos.paper2.tables."


@dataclass(frozen=True)
class Table:
    """One table. ``name``: its key (the scorecard's input name, a paper-2 table's output name;
    not always its file's stem); ``builder``: ``module:function`` making its rows; ``caption``:
    the stem of ``workflow/report/<caption>.rst`` (empty: ``holds`` in ``table.rst``); ``reads``:
    the patterns it is computed from; ``report``: whether ``snakemake --report`` shows it."""

    name: str
    path: str
    rule: str
    output: str
    builder: str
    caption: str
    category: str
    reads: tuple[str, ...]
    holds: str
    scorecard: bool = False
    report: bool = True


def _paper2(name, builder, holds, *, reads=SUMMARY, caption=None, scorecard=False, file=None):
    """A paper-2 table: ``results/stats/paper2_<file or name>.csv``, output ``name`` of
    ``aggregate_leakage``, caption ``paper2_<name>`` unless given (``""``: ``holds``)."""
    return Table(
        name,
        paths.paper2_table(file or name),
        PAPER2_RULE,
        name,
        _P2 + builder,
        f"paper2_{name}" if caption is None else caption,
        PAPER2_CATEGORY,
        reads,
        holds,
        scorecard,
    )


def _per_prompt(name, builder, holds, **kw) -> Table:
    """A paper-2 table whose every row is the per-prompt reading: ``paper2_per_prompt_<name>``."""
    return _paper2(name, builder, holds, file="per_prompt_" + name, **kw)


def _table(name, path, rule, builder, category, reads, holds, **kw) -> Table:
    """A table written as output ``table`` (else ``output=``), captioned ``name`` (else
    ``caption=``)."""
    output, caption = kw.pop("output", "table"), kw.pop("caption", name)
    return Table(name, path, rule, output, builder, caption, category, reads, holds, **kw)


_PAPER1_TABLES = (
    _table(
        "theory",
        paths.THEORY_TABLE,
        "theory_check",
        "causalpos.paper1.theory:theory_table",
        PAPER1_SIMULATIONS,
        (paths.SIM_STORE,),
        "Fig. 1's closed form against the exact-Gram and simulated layer-2 maps, per (alpha, "
        "query, key)",
        caption="",
        scorecard=True,
        report=False,
    ),
    _table(
        "sim_index",
        paths.SIM_INDEX_TABLE,
        "aggregate_sim_stats",
        "causalpos.paper1.tables:simulation_index_table",
        PAPER1_SIMULATIONS,
        (paths.SIM_STORE,),
        "the non-relativeness index per (setting, layer) with its noise floor and CI",
        caption="simulation_index",
        scorecard=True,
    ),
    _table(
        "llm_index",
        paths.LLM_INDEX_TABLE,
        "aggregate_llm_stats",
        "causalpos.paper1.tables:llm_index_table",
        PAPER1_PRETRAINED,
        (paths.SCORE_STORE,),
        "the non-relativeness index, non-relative share and first-keys band per (model, "
        "dataset, variant, layer), with CIs",
        scorecard=True,
    ),
    _table(
        "gram_nearby",
        paths.GRAM_NEARBY_TABLE,
        "gram_table",
        "causalpos.paper1.nearby:nearby_table",
        TRAINED_HERE,
        (paths.GRAM_STORE,),
        "Fig. 3's nearby index of the hidden states' Gram maps per (model, panel), with CIs",
        scorecard=True,
    ),
    _table(
        "train_lengthgen",
        paths.TRAIN_LENGTHGEN_TABLE,
        "length_generalization",
        "causalpos.training.lengthgen:summary_table",
        TRAINED_HERE,
        (paths.LENGTHGEN_STORE,),
        "each trained model's held-out loss inside and beyond its training length",
    ),
    _table(
        "train_index",
        paths.TRAIN_INDEX_TABLE,
        "compare_trained",
        "causalpos.training.compare:comparison_tables",
        TRAINED_HERE,
        (paths.SCORE_STORE, paths.LEAKAGE_STORE, paths.TRAIN_LENGTHGEN_TABLE),
        "the non-relativeness index per layer of each trained model and its init twin",
        output="index",
    ),
    _table(
        "train_comparison",
        paths.TRAIN_COMPARISON_TABLE,
        "compare_trained",
        "causalpos.training.compare:comparison_tables",
        TRAINED_HERE,
        (paths.SCORE_STORE, paths.LEAKAGE_STORE, paths.TRAIN_LENGTHGEN_TABLE),
        "each trained model against its init twin: index, share and leakage differences with "
        "paired CIs, length generalization",
        output="comparison",
        scorecard=True,
    ),
)

_PAPER2_TABLES = (
    _per_prompt(
        "leakage_by_model",
        "per_prompt:per_prompt_tables",
        "leakage per (model, dataset, variant, target), mean over layers and heads, with CI, "
        "raw dR2, null floor and the fraction of heads significant after BH",
    ),
    _paper2(
        "per_prompt_decomposition",
        "per_prompt:decomposition_frame",
        "total / residual-stream / causal-mask leakage and shares per condition, with CIs",
    ),
    _per_prompt(
        "leakage_by_layer",
        "per_prompt:per_prompt_tables",
        "leakage per layer (variant, target) with CIs; reading per-prompt, each layer's mask "
        "(layer_kind)",
    ),
    _paper2(
        "per_prompt_decomposition_by_layer",
        "per_prompt:per_layer_columns",
        "decomposition per layer with CIs; reading per-prompt, layer_kind",
    ),
    _per_prompt(
        "rope_controls",
        "per_prompt:rope_controls_frame",
        "Table 6 analog: causal vs identity vs scrambled RoPE",
    ),
    _per_prompt(
        "bos_effects",
        "per_prompt:bos_frame",
        "Table 9 analog: BOS-replacement effects at early and late queries",
        scorecard=True,
    ),
    _per_prompt(
        "observational_split",
        "headline:wide_stat",
        "logit vs softmax (log Z) parts of one causal run's log-attention leakage",
        scorecard=True,
    ),
    _per_prompt(
        "heads",
        "per_prompt:per_prompt_tables",
        "per head: leakage with CI, p and BH q (prompt-mean map), sink attention; reading "
        "per-prompt, layer_kind",
    ),
    _paper2(
        "sink_heads",
        "per_prompt:per_prompt_tables",
        "number / fraction of sink-reading heads at each tau",
        scorecard=True,
    ),
    _paper2(
        "position0",
        "position0:position0_frames",
        "position-0 residual stream: cross-prompt std per layer and condition, probes; "
        "layer_kind of the block each row follows (embedding for row 0)",
        reads=(paths.POSITION0_STORE, paths.LEAKAGE_STORE),
        scorecard=True,
    ),
    _paper2(
        "position0_probes",
        "position0:position0_frames",
        "content probes: best layer of the position-0 probe, sink-head value probe, accuracy "
        "CIs (Wilson) and the reason when a probe was refused",
        reads=(paths.POSITION0_STORE,),
        scorecard=True,
    ),
    _per_prompt(
        "baseline_comparison",
        "per_prompt:per_prompt_tables",
        "claim 6: leakage under the saturated and the linear-in-offset baseline and their "
        "paired difference, raw and null-corrected, with CIs",
        scorecard=True,
    ),
    _per_prompt(
        "depth_trend",
        "per_prompt:per_prompt_tables",
        "claim 3: slope over layers and last minus first layer of every run's leakage, with CIs",
        scorecard=True,
    ),
    _paper2(
        "headline",
        "headline:headline_frame",
        "the headline (expected-map) leakage per (model, dataset, variant, window, target) with "
        "CI, its companion rho_SST, the no-landmark reading, the per-prompt reading beside it, "
        "the sign-flip test's fractions of significant heads, and each position-free run's "
        "negative control",
        scorecard=True,
    ),
    _paper2(
        "decomposition_headline",
        "headline:decomposition_headline_frame",
        "paper 2 section 3 on the headline reading: total / residual / causal-mask leakage and "
        "shares per condition, window and target, with paired CIs",
        scorecard=True,
        file="decomposition",
    ),
    _paper2(
        "decomposition_components",
        "headline:components_frames",
        "paper 2 section 3 in one unit (delta SS of the expected map over the causal run's "
        "expected log-attention variance), pooled over layers and heads: total, its three "
        "routes (direct_mask = normaliser + direct_cross, indirect_mask = indirect_own + "
        "indirect_cross, mask_free: not applicable where token 0 is not fixed) and their "
        "shares, the residual-stream component read on the ablation's logits (no purely "
        "relative map can produce it), causal mask = total - residual stream, the causal "
        "softmax's normaliser and the non-additive remainder, the observational split (logit, "
        "cross), the paper's reconstructed reading (ablation log-attention) with the edge "
        "artefact of its softmax measured beside it, a position-free run's residual-stream "
        "reading as the negative control; both landmark readings (key-0 column modelled, "
        "counted)",
        scorecard=True,
    ),
    _paper2(
        "decomposition_components_by_layer",
        "headline:components_frames",
        "the same per layer, with each layer's layer_kind",
        caption="paper2_decomposition_components",
    ),
    _paper2(
        "decomposition_components_by_kind",
        "headline:components_frames",
        "the same pooled over the layers of each layer kind, and each kind's paired contrast to "
        "the global layers (claim 3 within one model)",
        caption="paper2_decomposition_components",
        scorecard=True,
    ),
    _paper2(
        "decomposition_mappings",
        "headline:components_frames",
        "paper 2's two components (causal mask, residual stream) and the causal-mask share on "
        "each mapping, a row per mapping: ablation (paper 2's own: causal mask = direct + "
        "indirect route, residual stream = mask-free route) and mechanism (causal mask = direct "
        "route, residual stream = indirect + mask-free = the causal run's logits), pooled",
        caption="paper2_decomposition_components",
    ),
    _paper2(
        "controls",
        "headline:controls_frame",
        "negative controls (every position-free run: headline in the model's units and "
        "per-prompt reading, passed / reads position / underpowered against a declared margin) "
        "and positive controls (a planted query effect of known size, recovered / not "
        "recovered)",
        scorecard=True,
    ),
    _paper2(
        "plant_doses",
        "doses:plant_doses_frame",
        "the positive control that propagates: a position term planted as a dose series in a "
        "lower layer's residual stream of a position-free run (dose 0 = the unplanted run), its "
        "headline reading on logits in the model's units over the layers from the plant up, the "
        "paired step from the previous dose, dose 0 against the declared margin and the series' "
        "verdict (recovered: dose 0 within the margin and every step above 0)",
        scorecard=True,
    ),
    _paper2(
        "bos_headline",
        "headline:bos_headline_frame",
        "Table 9 on the headline reading: every BOS replacement's effect 1 - C(replaced)/C(run) "
        "on the residual-stream component (bidirectional), the causal total and the causal "
        "run's sink heads (log-attention), per window, with paired CIs",
        scorecard=True,
    ),
    _paper2(
        "claim3_factors",
        "factors:factors_frame",
        "claim 3 by intervention within one model (Gemma 3): each factor's effect (the window: "
        "causal minus no_window; the RoPE base: global_base minus causal) on the total, the "
        "logits, the direct and indirect routes and the mask-free route, in the plain run's one "
        "unit, per layer, per layer kind and over every layer, and its slope over the sliding "
        "layers with the change it implies across them, paired CIs",
        scorecard=True,
    ),
    _paper2(
        "twin_contrast",
        "twins:twin_contrast_frame",
        "claim 1's headline logit leakage, trained model minus its twin, paired where prompts match",
        caption="",
        scorecard=True,
    ),
    _paper2(
        "scale_contrast",
        "headline:scale_contrast_frame",
        "the headline causal-mask share of one model minus another's on the same prompts "
        "(claim 4's scale shift), paired through the shared bootstrap, per condition, window "
        "and target",
        scorecard=True,
    ),
    Table(
        "paper2_tables",
        paths.PAPER2_TABLES_MD,
        PAPER2_RULE,
        "markdown",
        _P2 + "markdown:paper2_markdown",
        "paper2_tables",
        PAPER2_CATEGORY,
        (paths.PAPER2_TABLE,),
        "the Markdown digest of the paper-2 tables",
    ),
)

_REPORT_TABLES = (
    _table(
        "scorecard",
        paths.SCORECARD_CSV,
        "scorecard",
        "causalpos.scorecard.card:build_scorecard",
        SCORECARD_CATEGORY,
        tuple(t.path for t in _PAPER1_TABLES if t.scorecard) + (paths.PAPER2_TABLE,),
        "every reproduction target: the claim, the paper's value, the measured value with its "
        "interval, the verdict and what would have falsified it",
        output="csv",
    ),
    _table(
        "scorecard_md",
        paths.SCORECARD_MD,
        "scorecard",
        "causalpos.scorecard.markdown:to_markdown",
        SCORECARD_CATEGORY,
        (paths.SCORECARD_CSV,),
        "the scorecard as Markdown, per section",
        output="md",
        caption="scorecard",
    ),
    _table(
        "findings",
        paths.FINDINGS_MD,
        "scorecard",
        "causalpos.findings.render:render",
        SCORECARD_CATEGORY,
        (paths.FINDINGS_TEMPLATE, *(t.path for t in _PAPER1_TABLES), paths.PAPER2_TABLE),
        "the findings page: docs/findings.template.md filled from this run's tables",
        output="findings",
    ),
)

#: Every table, in the order of the rules' outputs.
TABLES: tuple[Table, ...] = _PAPER1_TABLES + _PAPER2_TABLES + _REPORT_TABLES
BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}

#: The CSV tables of paper 2 by key (each ``results/stats/paper2_<file>.csv``), in output order.
PAPER2_TABLES: tuple[str, ...] = tuple(
    t.name for t in TABLES if t.rule == PAPER2_RULE and t.path.endswith(".csv")
)
#: The tables the scorecard reads, by their key in ``build_scorecard``'s ``paths`` (and in
#: ``Resolved.scorecard_inputs``): the path a row built from one names as its source.
SCORECARD_TABLES: dict[str, str] = {t.name: t.path for t in TABLES if t.scorecard}
#: The paper-2 tables among them.
SCORECARD_PAPER2_TABLES: tuple[str, ...] = tuple(n for n in PAPER2_TABLES if BY_NAME[n].scorecard)


def rule_tables(rule: str) -> tuple[Table, ...]:
    """The tables ``rule`` writes, in its output order."""
    return tuple(t for t in TABLES if t.rule == rule)


def paper2_table_paths() -> list[str]:
    """Every file ``aggregate_leakage`` writes: each CSV, then the Markdown digest."""
    return [t.path for t in rule_tables(PAPER2_RULE)]


#: The markers of the tables' list in docs/outputs.md (``causalpos catalogue --update``).
BLOCK_BEGIN = "<!-- tables: generated by `causalpos catalogue` -->"
BLOCK_END = "<!-- /tables -->"


def tables_block() -> str:
    """The tables' list of docs/outputs.md, between :data:`BLOCK_BEGIN` and :data:`BLOCK_END`:
    a row per table (file, rule, what it reads, whether the scorecard reads it, what it holds)."""
    head = "| table | rule | reads | scorecard | what it holds |"
    lines = [BLOCK_BEGIN, "", head, "|---|---|---|---|---|"]
    short = lambda p: p.removeprefix(paths.RESULTS_ROOT + "/")  # noqa: E731 (below results/)
    for t in TABLES:
        reads = ", ".join(f"`{short(r)}`" for r in t.reads)
        card = "yes" if t.scorecard else ""
        lines.append(f"| `{short(t.path)}` | `{t.rule}` | {reads} | {card} | {t.holds} |")
    return "\n".join([*lines, "", BLOCK_END]) + "\n"
