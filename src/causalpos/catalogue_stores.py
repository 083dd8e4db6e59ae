"""The output catalogue's store variables: one declaration per variable of the leakage summary
store ``results/leakage/{model}/{dataset}.zarr`` (:class:`Variable`: name, dims, reading,
units, what it holds; listed in docs/outputs.md by ``causalpos catalogue --update``), which
``tests/test_catalogue_stores.py`` holds against what
:func:`causalpos.paper2.summary.assemble.leakage_summary` writes. A summary holds the
variables its runs make (a BOS block only with a BOS replacement run, the dose series only with
a planted stream, ...), each with the dims declared here. The tables declared in
:mod:`causalpos.catalogue` read them. Pure: imports nothing of the library.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The readings of paper 2's leakage (causalpos.paper2.summary.headline): the headline, the
#: per-prompt one; and what is neither: a run's attention to key 0, a property of the runs.
EXPECTED_MAP = "expected-map"
PER_PROMPT = "per-prompt"
KEY0 = "attention to key 0"
RUNS = "the runs"

#: Units.
DR2 = "ΔR² (null-corrected)"
EXP = "ΔR² of the expected map"
ONE_UNIT = "ΔSS over the causal run's expected log-attention variance"
MODEL_UNITS = "the position-free run's N over the causal run's D (the model's units)"
SHARE = "share (fraction of the total)"
EFFECT = "1 - C(replaced) / C(run)"
P = "p-value"
Q = "BH q-value"
FRACTION = "fraction of heads"
COUNT = "heads (count)"
FLAG = "1 / 0"
WEIGHT = "attention weight"


@dataclass(frozen=True)
class Variable:
    """A summary variable: ``dims`` in order (``stat``: estimate, lo, hi), the ``reading`` it
    belongs to, its ``units`` and what it ``holds``."""

    name: str
    dims: tuple[str, ...]
    reading: str
    units: str
    holds: str


def _v(name: str, dims: str, reading: str, units: str, holds: str) -> Variable:
    return Variable(name, tuple(dims.split()), reading, units, holds)


_VWT = "variant exp_window target"
_COMP = "exp_condition exp_landmark exp_window"
_BOS = "bos_replacement bos_reading exp_window stat"

#: Every variable of the leakage summary store.
LEAKAGE_SUMMARY: tuple[Variable, ...] = (
    # the per-prompt reading (causalpos.paper2.summary.per_prompt, .permutation, .bos)
    _v("leakage_model", "variant target stat", PER_PROMPT, DR2, "mean over layers and heads"),
    _v("leakage_layer", "variant target layer stat", PER_PROMPT, DR2, "per layer"),
    _v("leakage_head", "variant target layer head stat", PER_PROMPT, DR2, "per head"),
    _v("leakage_raw", "variant target layer head", PER_PROMPT, "ΔR² (raw)", "before the null"),
    _v("null_floor", "variant target layer head", PER_PROMPT, "ΔR²", "the null's mean"),
    _v("leakage_mean_map", "variant target layer head", PER_PROMPT, DR2, "the prompt-mean map's"),
    _v("perm_null_mean", "variant target layer head", PER_PROMPT, "ΔR²", "within-offset null"),
    _v("p_value", "variant target layer head", PER_PROMPT, P, "within-offset permutation test"),
    _v("q_value", "variant target layer head", PER_PROMPT, Q, "BH over the heads"),
    _v("fraction_significant", "variant target", PER_PROMPT, FRACTION, "q below the level"),
    _v("leakage_depth_trend", "variant target trend stat", PER_PROMPT, DR2, "slope, last - first"),
    _v("baseline_leakage", "variant target baseline measure stat", PER_PROMPT, DR2, "claim 6"),
    _v("decomposition", "condition component stat", PER_PROMPT, DR2, "total, residual, mask"),
    _v("decomposition_layer", "condition component layer stat", PER_PROMPT, DR2, "per layer"),
    _v(
        "decomposition_difference",
        "condition condition_ref component stat",
        PER_PROMPT,
        DR2,
        "paired differences between conditions",
    ),
    _v("observational_split", "causal_variant obs_term stat", PER_PROMPT, DR2, "logit vs log Z"),
    _v("bos_effect", "intervention bos_window stat", PER_PROMPT, EFFECT, "Table 9 analog"),
    _v("bos_c_res", "intervention bos_window stat", PER_PROMPT, DR2, "C of the replaced run"),
    _v("bos_c_res_baseline", "intervention bos_window stat", PER_PROMPT, DR2, "C of its run"),
    # attention to key 0 (the sink heads)
    _v("sink_attention", "variant layer head", KEY0, WEIGHT, "mean over prompts and queries"),
    _v("sink_head", "tau variant layer head", KEY0, FLAG, "attention to key 0 at least tau"),
    _v("sink_head_count", "tau variant stat", KEY0, COUNT, "sink heads at each tau"),
    # the headline, expected-map reading (causalpos.paper2.summary.headline, .decomposition)
    _v("exp_model", f"{_VWT} stat", EXPECTED_MAP, EXP, "pooled over layers and heads"),
    _v(
        "exp_model_boot",
        "variant replicate",
        EXPECTED_MAP,
        EXP,
        "the headline logit leakage's replicates (first window; float32)",
    ),
    _v("exp_model_sst", f"{_VWT} stat", EXPECTED_MAP, "rho_SST", "the headline's companion"),
    _v("exp_model_nolandmark", "variant target stat", EXPECTED_MAP, EXP, "key 0 not modelled"),
    _v("exp_layer", f"{_VWT} layer stat", EXPECTED_MAP, EXP, "per layer"),
    _v("exp_head", f"{_VWT} layer head stat", EXPECTED_MAP, EXP, "per head"),
    _v("exp_p", f"{_VWT} layer head", EXPECTED_MAP, P, "sign-flip test over prompts"),
    _v("exp_q", f"{_VWT} layer head", EXPECTED_MAP, Q, "BH over the heads"),
    _v("exp_fraction_significant", f"{_VWT} stat", EXPECTED_MAP, FRACTION, "q below the level"),
    _v("exp_fraction_p", f"{_VWT} stat", EXPECTED_MAP, FRACTION, "p below the level"),
    _v("exp_baseline", "variant target exp_fit stat", EXPECTED_MAP, EXP, "claim 6's baselines"),
    _v("exp_ablation", "exp_window target ablation stat", EXPECTED_MAP, EXP, "Eq. 5's additivity"),
    _v(
        "exp_ablation_layer",
        "exp_window target layer ablation stat",
        EXPECTED_MAP,
        EXP,
        "the same per layer",
    ),
    _v(
        "exp_decomposition",
        "exp_condition exp_window target component stat",
        EXPECTED_MAP,
        EXP,
        "total, residual, causal mask and their shares",
    ),
    _v(
        "exp_decomposition_difference",
        "exp_condition exp_condition_ref exp_window target component stat",
        EXPECTED_MAP,
        EXP,
        "paired differences between conditions",
    ),
    _v(
        "exp_share_boot",
        "exp_condition exp_window target replicate",
        EXPECTED_MAP,
        SHARE,
        "the causal-mask share's replicates",
    ),
    _v("exp_components", f"{_COMP} component_full stat", EXPECTED_MAP, ONE_UNIT, "section 3"),
    _v(
        "exp_components_layer",
        f"{_COMP} layer component_full stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "per layer",
    ),
    _v(
        "exp_components_kind",
        f"{_COMP} layer_kind_name component_full stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "pooled over each layer kind",
    ),
    _v(
        "exp_components_kind_contrast",
        f"{_COMP} layer_kind_name component_full stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "each kind minus the global layers",
    ),
    _v(
        "exp_factor_layer",
        "exp_factor factor_reading exp_window layer stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "claim 3's factors per layer",
    ),
    _v(
        "exp_factor_kind",
        "exp_factor factor_reading exp_window factor_level stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "per layer kind",
    ),
    _v(
        "exp_factor_slope",
        "exp_factor factor_reading exp_window stat",
        EXPECTED_MAP,
        ONE_UNIT + " per layer",
        "slope over the sliding layers",
    ),
    _v("exp_bos_effect", _BOS, EXPECTED_MAP, EFFECT, "Table 9 on the headline"),
    _v("exp_bos_c", _BOS, EXPECTED_MAP, ONE_UNIT, "C of the replaced run"),
    _v("exp_bos_c_baseline", _BOS, EXPECTED_MAP, ONE_UNIT, "C of its run"),
    _v("exp_bos_sink_heads", "bos_replacement", KEY0, COUNT, "the causal run's sink heads"),
    # the controls (causalpos.paper2.summary.headline, .planted, .doses)
    _v("exp_position_free", "variant", RUNS, FLAG, "the run has no positional input"),
    _v(
        "exp_control_units",
        "variant exp_landmark exp_window target stat",
        EXPECTED_MAP,
        MODEL_UNITS,
        "each position-free run's headline",
    ),
    _v(
        "exp_control_tost",
        "variant exp_landmark exp_window target stat",
        EXPECTED_MAP,
        MODEL_UNITS,
        "its 1 - 2 alpha interval",
    ),
    _v("exp_control_margin", "target", RUNS, MODEL_UNITS, "the declared margin"),
    _v("exp_planted", "variant target planted", EXPECTED_MAP, MODEL_UNITS, "planted, read back"),
    _v("exp_dose", "dose_run stat", EXPECTED_MAP, MODEL_UNITS, "each dose of a planted series"),
    _v("exp_dose_step", "dose_run stat", EXPECTED_MAP, MODEL_UNITS, "the step from the dose below"),
    _v("exp_dose_control", "dose_series", RUNS, FLAG, "dose 0 is a negative control"),
)

#: The markers of the summary store's variables in docs/outputs.md (``causalpos catalogue``).
BLOCK_BEGIN = "<!-- summary-variables: generated by `causalpos catalogue` -->"
BLOCK_END = "<!-- /summary-variables -->"


def variables_block() -> str:
    """The leakage summary store's variables for docs/outputs.md, between :data:`BLOCK_BEGIN`
    and :data:`BLOCK_END`: a row per variable (name, dims, reading, units, what it holds)."""
    lines = [
        BLOCK_BEGIN,
        "",
        "| variable | dims | reading | units | holds |",
        "|---|---|---|---|---|",
    ]
    for v in LEAKAGE_SUMMARY:
        lines.append(f"| `{v.name}` | {', '.join(v.dims)} | {v.reading} | {v.units} | {v.holds} |")
    return "\n".join([*lines, "", BLOCK_END]) + "\n"
