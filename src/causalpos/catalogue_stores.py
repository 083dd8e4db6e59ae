"""The output catalogue's store variables: one :class:`Variable` (name, dims, reading, units, what
it holds) per variable of the leakage summary store ``results/leakage/{model}/{dataset}.zarr``,
listed in docs/outputs.md by ``causalpos catalogue --update`` and held by
``tests/test_catalogue_stores.py`` against what :func:`causalpos.paper2.summary.assemble.leakage_summary`
writes (a summary holds those its runs make). Pure: imports nothing of the library."""

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


def _rows(reading: str, *rows: tuple[str, str, str, str]) -> tuple[Variable, ...]:
    """The variables of one ``reading``, each row ``(name, dims, units, holds)``."""
    return tuple(Variable(n, tuple(d.split()), reading, u, h) for n, d, u, h in rows)


_VWT = "variant window target"
_VTLH = "variant target layer head"
_COMP = "condition landmark window"
_BOS = "bos_replacement bos_reading window stat"

#: Every variable of the leakage summary store.
LEAKAGE_SUMMARY: tuple[Variable, ...] = (
    # the per-prompt reading (causalpos.paper2.summary.per_prompt, .permutation, .bos)
    *_rows(
        PER_PROMPT,
        ("per_prompt_leakage_model", "variant target stat", DR2, "mean over layers and heads"),
        ("per_prompt_leakage_layer", "variant target layer stat", DR2, "per layer"),
        ("per_prompt_leakage_head", f"{_VTLH} stat", DR2, "per head"),
        ("per_prompt_leakage_raw", _VTLH, "ΔR² (raw)", "before the null"),
        ("per_prompt_null_floor", _VTLH, "ΔR²", "the null's mean"),
        ("per_prompt_leakage_mean_map", _VTLH, DR2, "the prompt-mean map's"),
        ("per_prompt_perm_null_mean", _VTLH, "ΔR²", "within-offset null"),
        ("per_prompt_p_value", _VTLH, P, "within-offset permutation test"),
        ("per_prompt_q_value", _VTLH, Q, "BH over the heads"),
        ("per_prompt_fraction_significant", "variant target", FRACTION, "q below the level"),
        ("per_prompt_leakage_depth_trend", "variant target trend stat", DR2, "slope, last - first"),
        ("per_prompt_baseline_leakage", "variant target baseline measure stat", DR2, "claim 6"),
        (
            "per_prompt_decomposition",
            "per_prompt_condition component stat",
            DR2,
            "total, residual stream, causal mask",
        ),
        (
            "per_prompt_decomposition_layer",
            "per_prompt_condition component layer stat",
            DR2,
            "per layer",
        ),
        (
            "per_prompt_decomposition_difference",
            "per_prompt_condition per_prompt_condition_ref component stat",
            DR2,
            "paired differences between conditions",
        ),
        ("per_prompt_observational_split", "causal_variant obs_term stat", DR2, "logit vs log Z"),
        ("per_prompt_bos_effect", "intervention bos_window stat", EFFECT, "Table 9 analog"),
        ("per_prompt_bos_c_res", "intervention bos_window stat", DR2, "C of the replaced run"),
        ("per_prompt_bos_c_res_baseline", "intervention bos_window stat", DR2, "C of its run"),
    ),
    # attention to key 0 (the sink heads)
    *_rows(
        KEY0,
        ("sink_attention", "variant layer head", WEIGHT, "mean over prompts and queries"),
        ("sink_head", "tau variant layer head", FLAG, "attention to key 0 at least tau"),
        ("sink_head_count", "tau variant stat", COUNT, "sink heads at each tau"),
    ),
    # the headline, expected-map reading (causalpos.paper2.summary.headline, .decomposition)
    *_rows(
        EXPECTED_MAP,
        ("leakage_model", f"{_VWT} stat", EXP, "pooled over layers and heads"),
        (
            "leakage_model_boot",
            "variant replicate",
            EXP,
            "the headline logit leakage's replicates (first window; float32)",
        ),
        ("leakage_model_sst", f"{_VWT} stat", "rho_SST", "the headline's companion"),
        ("leakage_model_nolandmark", "variant target stat", EXP, "key 0 not modelled"),
        ("leakage_layer", f"{_VWT} layer stat", EXP, "per layer"),
        ("leakage_head", f"{_VWT} layer head stat", EXP, "per head"),
        ("p_value", f"{_VWT} layer head", P, "sign-flip test over prompts"),
        ("q_value", f"{_VWT} layer head", Q, "BH over the heads"),
        ("fraction_significant", f"{_VWT} stat", FRACTION, "q below the level"),
        ("fraction_p", f"{_VWT} stat", FRACTION, "p below the level"),
        ("baseline_leakage", "variant target fit stat", EXP, "claim 6's baselines"),
        ("leakage_ablation", "window target ablation stat", EXP, "Eq. 5's additivity"),
        ("leakage_ablation_layer", "window target layer ablation stat", EXP, "the same per layer"),
        (
            "decomposition",
            "condition window target component stat",
            EXP,
            "total, residual, causal mask and their shares",
        ),
        (
            "decomposition_difference",
            "condition condition_ref window target component stat",
            EXP,
            "paired differences between conditions",
        ),
        (
            "share_boot",
            "condition window target replicate",
            SHARE,
            "the causal-mask share's replicates",
        ),
        ("components", f"{_COMP} component_full stat", ONE_UNIT, "section 3"),
        ("components_layer", f"{_COMP} layer component_full stat", ONE_UNIT, "per layer"),
        (
            "components_kind",
            f"{_COMP} layer_kind_name component_full stat",
            ONE_UNIT,
            "pooled over each layer kind",
        ),
        (
            "components_kind_contrast",
            f"{_COMP} layer_kind_name component_full stat",
            ONE_UNIT,
            "each kind minus the global layers",
        ),
        (
            "factor_layer",
            "factor factor_reading window layer stat",
            ONE_UNIT,
            "claim 3's factors per layer",
        ),
        (
            "factor_kind",
            "factor factor_reading window factor_level stat",
            ONE_UNIT,
            "per layer kind",
        ),
        (
            "factor_slope",
            "factor factor_reading window stat",
            ONE_UNIT + " per layer",
            "slope over the sliding layers",
        ),
        ("bos_effect", _BOS, EFFECT, "Table 9 on the headline"),
        ("bos_c", _BOS, ONE_UNIT, "C of the replaced run"),
        ("bos_c_baseline", _BOS, ONE_UNIT, "C of its run"),
    ),
    *_rows(KEY0, ("bos_sink_heads", "bos_replacement", COUNT, "the causal run's sink heads")),
    # the controls (causalpos.paper2.summary.headline, .planted, .doses)
    *_rows(RUNS, ("position_free", "variant", FLAG, "the run has no positional input")),
    *_rows(
        EXPECTED_MAP,
        (
            "control_units",
            "variant landmark window target stat",
            MODEL_UNITS,
            "each position-free run's headline",
        ),
        (
            "control_tost",
            "variant landmark window target stat",
            MODEL_UNITS,
            "its 1 - 2 alpha interval",
        ),
    ),
    *_rows(RUNS, ("control_margin", "target", MODEL_UNITS, "the declared margin")),
    *_rows(
        EXPECTED_MAP,
        ("leakage_planted", "variant target planted", MODEL_UNITS, "planted, read back"),
        ("dose_leakage", "dose_run stat", MODEL_UNITS, "each dose of a planted series"),
        ("dose_step", "dose_run stat", MODEL_UNITS, "the step from the dose below"),
    ),
    *_rows(RUNS, ("dose_control", "dose_series", FLAG, "dose 0 is a negative control")),
)


#: The summary store's format, in its attr :data:`SUMMARY_FORMAT_ATTR` (none: format 1, whose
#: headline names were ``exp_*`` and per-prompt ones plain; 2: the headline's plain, the
#: per-prompt reading's ``per_prompt_*``; the renames: docs/outputs.md).
SUMMARY_FORMAT_ATTR = "leakage_summary_format"
SUMMARY_FORMAT = 2

#: The markers of the summary store's variables in docs/outputs.md (``causalpos catalogue``).
BLOCK_BEGIN = "<!-- summary-variables: generated by `causalpos catalogue` -->"
BLOCK_END = "<!-- /summary-variables -->"


def variables_block() -> str:
    """The leakage summary store's variables for docs/outputs.md, between :data:`BLOCK_BEGIN`
    and :data:`BLOCK_END`: a row per variable (name, dims, reading, units, what it holds)."""
    rows = [
        f"| `{v.name}` | {', '.join(v.dims)} | {v.reading} | {v.units} | {v.holds} |"
        for v in LEAKAGE_SUMMARY
    ]
    head = ["| variable | dims | reading | units | holds |", "|---|---|---|---|---|"]
    return "\n".join([BLOCK_BEGIN, "", *head, *rows, "", BLOCK_END]) + "\n"


def open_summary(path: str | os.PathLike) -> xr.Dataset:
    """The leakage summary store ``path`` (:func:`causalpos.io.store.open_dataset`), refused with
    the command that rebuilds it unless of :data:`SUMMARY_FORMAT`. Here, not in the summary
    package, so that the light stages reading a summary never import the estimator (torch)."""
    from causalpos.io.store import open_dataset, require_format

    ds = open_dataset(path)
    return require_format(ds, path, SUMMARY_FORMAT_ATTR, SUMMARY_FORMAT, "leakage summary")
