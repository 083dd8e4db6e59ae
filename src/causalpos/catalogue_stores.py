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

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr

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


_VWT = "variant window target"
_COMP = "condition landmark window"
_BOS = "bos_replacement bos_reading window stat"

#: Every variable of the leakage summary store.
LEAKAGE_SUMMARY: tuple[Variable, ...] = (
    # the per-prompt reading (causalpos.paper2.summary.per_prompt, .permutation, .bos)
    _v(
        "per_prompt_leakage_model",
        "variant target stat",
        PER_PROMPT,
        DR2,
        "mean over layers and heads",
    ),
    _v("per_prompt_leakage_layer", "variant target layer stat", PER_PROMPT, DR2, "per layer"),
    _v("per_prompt_leakage_head", "variant target layer head stat", PER_PROMPT, DR2, "per head"),
    _v(
        "per_prompt_leakage_raw",
        "variant target layer head",
        PER_PROMPT,
        "ΔR² (raw)",
        "before the null",
    ),
    _v("per_prompt_null_floor", "variant target layer head", PER_PROMPT, "ΔR²", "the null's mean"),
    _v(
        "per_prompt_leakage_mean_map",
        "variant target layer head",
        PER_PROMPT,
        DR2,
        "the prompt-mean map's",
    ),
    _v(
        "per_prompt_perm_null_mean",
        "variant target layer head",
        PER_PROMPT,
        "ΔR²",
        "within-offset null",
    ),
    _v(
        "per_prompt_p_value",
        "variant target layer head",
        PER_PROMPT,
        P,
        "within-offset permutation test",
    ),
    _v("per_prompt_q_value", "variant target layer head", PER_PROMPT, Q, "BH over the heads"),
    _v(
        "per_prompt_fraction_significant",
        "variant target",
        PER_PROMPT,
        FRACTION,
        "q below the level",
    ),
    _v(
        "per_prompt_leakage_depth_trend",
        "variant target trend stat",
        PER_PROMPT,
        DR2,
        "slope, last - first",
    ),
    _v(
        "per_prompt_baseline_leakage",
        "variant target baseline measure stat",
        PER_PROMPT,
        DR2,
        "claim 6",
    ),
    _v(
        "per_prompt_decomposition",
        "per_prompt_condition component stat",
        PER_PROMPT,
        DR2,
        "total, residual stream, causal mask",
    ),
    _v(
        "per_prompt_decomposition_layer",
        "per_prompt_condition component layer stat",
        PER_PROMPT,
        DR2,
        "per layer",
    ),
    _v(
        "per_prompt_decomposition_difference",
        "per_prompt_condition per_prompt_condition_ref component stat",
        PER_PROMPT,
        DR2,
        "paired differences between conditions",
    ),
    _v(
        "per_prompt_observational_split",
        "causal_variant obs_term stat",
        PER_PROMPT,
        DR2,
        "logit vs log Z",
    ),
    _v(
        "per_prompt_bos_effect",
        "intervention bos_window stat",
        PER_PROMPT,
        EFFECT,
        "Table 9 analog",
    ),
    _v(
        "per_prompt_bos_c_res",
        "intervention bos_window stat",
        PER_PROMPT,
        DR2,
        "C of the replaced run",
    ),
    _v(
        "per_prompt_bos_c_res_baseline",
        "intervention bos_window stat",
        PER_PROMPT,
        DR2,
        "C of its run",
    ),
    # attention to key 0 (the sink heads)
    _v("sink_attention", "variant layer head", KEY0, WEIGHT, "mean over prompts and queries"),
    _v("sink_head", "tau variant layer head", KEY0, FLAG, "attention to key 0 at least tau"),
    _v("sink_head_count", "tau variant stat", KEY0, COUNT, "sink heads at each tau"),
    # the headline, expected-map reading (causalpos.paper2.summary.headline, .decomposition)
    _v("leakage_model", f"{_VWT} stat", EXPECTED_MAP, EXP, "pooled over layers and heads"),
    _v(
        "leakage_model_boot",
        "variant replicate",
        EXPECTED_MAP,
        EXP,
        "the headline logit leakage's replicates (first window; float32)",
    ),
    _v("leakage_model_sst", f"{_VWT} stat", EXPECTED_MAP, "rho_SST", "the headline's companion"),
    _v("leakage_model_nolandmark", "variant target stat", EXPECTED_MAP, EXP, "key 0 not modelled"),
    _v("leakage_layer", f"{_VWT} layer stat", EXPECTED_MAP, EXP, "per layer"),
    _v("leakage_head", f"{_VWT} layer head stat", EXPECTED_MAP, EXP, "per head"),
    _v("p_value", f"{_VWT} layer head", EXPECTED_MAP, P, "sign-flip test over prompts"),
    _v("q_value", f"{_VWT} layer head", EXPECTED_MAP, Q, "BH over the heads"),
    _v("fraction_significant", f"{_VWT} stat", EXPECTED_MAP, FRACTION, "q below the level"),
    _v("fraction_p", f"{_VWT} stat", EXPECTED_MAP, FRACTION, "p below the level"),
    _v("baseline_leakage", "variant target fit stat", EXPECTED_MAP, EXP, "claim 6's baselines"),
    _v("leakage_ablation", "window target ablation stat", EXPECTED_MAP, EXP, "Eq. 5's additivity"),
    _v(
        "leakage_ablation_layer",
        "window target layer ablation stat",
        EXPECTED_MAP,
        EXP,
        "the same per layer",
    ),
    _v(
        "decomposition",
        "condition window target component stat",
        EXPECTED_MAP,
        EXP,
        "total, residual, causal mask and their shares",
    ),
    _v(
        "decomposition_difference",
        "condition condition_ref window target component stat",
        EXPECTED_MAP,
        EXP,
        "paired differences between conditions",
    ),
    _v(
        "share_boot",
        "condition window target replicate",
        EXPECTED_MAP,
        SHARE,
        "the causal-mask share's replicates",
    ),
    _v("components", f"{_COMP} component_full stat", EXPECTED_MAP, ONE_UNIT, "section 3"),
    _v(
        "components_layer",
        f"{_COMP} layer component_full stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "per layer",
    ),
    _v(
        "components_kind",
        f"{_COMP} layer_kind_name component_full stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "pooled over each layer kind",
    ),
    _v(
        "components_kind_contrast",
        f"{_COMP} layer_kind_name component_full stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "each kind minus the global layers",
    ),
    _v(
        "factor_layer",
        "factor factor_reading window layer stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "claim 3's factors per layer",
    ),
    _v(
        "factor_kind",
        "factor factor_reading window factor_level stat",
        EXPECTED_MAP,
        ONE_UNIT,
        "per layer kind",
    ),
    _v(
        "factor_slope",
        "factor factor_reading window stat",
        EXPECTED_MAP,
        ONE_UNIT + " per layer",
        "slope over the sliding layers",
    ),
    _v("bos_effect", _BOS, EXPECTED_MAP, EFFECT, "Table 9 on the headline"),
    _v("bos_c", _BOS, EXPECTED_MAP, ONE_UNIT, "C of the replaced run"),
    _v("bos_c_baseline", _BOS, EXPECTED_MAP, ONE_UNIT, "C of its run"),
    _v("bos_sink_heads", "bos_replacement", KEY0, COUNT, "the causal run's sink heads"),
    # the controls (causalpos.paper2.summary.headline, .planted, .doses)
    _v("position_free", "variant", RUNS, FLAG, "the run has no positional input"),
    _v(
        "control_units",
        "variant landmark window target stat",
        EXPECTED_MAP,
        MODEL_UNITS,
        "each position-free run's headline",
    ),
    _v(
        "control_tost",
        "variant landmark window target stat",
        EXPECTED_MAP,
        MODEL_UNITS,
        "its 1 - 2 alpha interval",
    ),
    _v("control_margin", "target", RUNS, MODEL_UNITS, "the declared margin"),
    _v(
        "leakage_planted", "variant target planted", EXPECTED_MAP, MODEL_UNITS, "planted, read back"
    ),
    _v("dose_leakage", "dose_run stat", EXPECTED_MAP, MODEL_UNITS, "each dose of a planted series"),
    _v("dose_step", "dose_run stat", EXPECTED_MAP, MODEL_UNITS, "the step from the dose below"),
    _v("dose_control", "dose_series", RUNS, FLAG, "dose 0 is a negative control"),
)

#: The summary store's own format, in its attr :data:`SUMMARY_FORMAT_ATTR` (a summary without it
#: is format 1). 1: the headline's variables, coordinates and attrs named ``exp_*`` and the
#: per-prompt reading's plain; 2: the headline's plain, the per-prompt reading's ``per_prompt_*``
#: (the renames: docs/outputs.md). A summary of another format is refused with the command that
#: rebuilds it (:func:`causalpos.io.store.require_format`).
SUMMARY_FORMAT_ATTR = "leakage_summary_format"
SUMMARY_FORMAT = 2

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


def open_summary(path: str | os.PathLike) -> xr.Dataset:
    """The leakage summary store ``path``, opened and checked as every store is
    (:func:`causalpos.io.store.open_dataset`), refused unless it is of this causalpos' summary format
    (:data:`SUMMARY_FORMAT`: an older summary names its variables
    otherwise) with the command that rebuilds it. Here, not in the summary package, so that the
    light stages that read a summary never import the estimator (torch)."""
    from causalpos.io.store import open_dataset, require_format

    ds = open_dataset(path)
    return require_format(ds, path, SUMMARY_FORMAT_ATTR, SUMMARY_FORMAT, "leakage summary")
