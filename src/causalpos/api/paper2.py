"""Paper 2's leakage of a model already in memory (``causalpos.paper2.leakage``): the per-prompt
statistics rule ``extract_scores`` stores, summarized by rule ``leakage``'s code and read by the
table builders of rule ``aggregate_leakage``, as one tidy frame (:func:`leakage_frame`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from causalpos.api.scores import DEFAULT_VARIANTS

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

    from causalpos.capture.settings import ExtractSettings
    from causalpos.paper2.settings import LeakageReducerSettings, LeakageSettings

#: The columns of :func:`leakage_frame`, in order.
COLUMNS = (
    "part",
    "run",
    "window",
    "target",
    "landmark",
    "scope",
    "layer",
    "layer_kind",
    "quantity",
    "estimate",
    "lo",
    "hi",
    "verdict",
)


def paper2_leakage(
    model,
    tokens,
    variants: str | Sequence[str] | Mapping[str, Mapping] = DEFAULT_VARIANTS,
    *,
    settings: LeakageSettings | None = None,
    reducer: LeakageReducerSettings | None = None,
    extract: ExtractSettings | None = None,
    strata: str | None = None,
    attrs: Mapping | None = None,
) -> pd.DataFrame:
    """Paper 2's headline leakage of ``model`` on ``tokens`` and its decomposition, pooled, per
    layer and per layer kind, with intervals and the controls' verdicts: :func:`leakage_frame`
    of :func:`paper2_summary` (the arguments are its)."""
    return leakage_frame(
        paper2_summary(
            model,
            tokens,
            variants,
            settings=settings,
            reducer=reducer,
            extract=extract,
            strata=strata,
            attrs=attrs,
        )
    )


def paper2_summary(
    model,
    tokens,
    variants: str | Sequence[str] | Mapping[str, Mapping] = DEFAULT_VARIANTS,
    *,
    settings: LeakageSettings | None = None,
    reducer: LeakageReducerSettings | None = None,
    extract: ExtractSettings | None = None,
    strata: str | None = None,
    attrs: Mapping | None = None,
) -> xr.Dataset:
    """The leakage summary of ``model`` on ``tokens``: what rule ``leakage`` writes to
    ``results/leakage/{model}/{dataset}.zarr`` for the same runs, prompts and settings.

    Args:
        model, tokens, variants: as :func:`causalpos.api.scores.capture`; ``causal`` must be
            among the variants (the baseline of every reading). ``ring`` (the default's second
            run) decomposes the causal run; ``bidirectional`` is paper 2's own ablation;
            ``identity_rope+ring`` is a negative control (no position at all).
        settings: the summary's readings, resampling, tests and controls
            (:class:`~causalpos.paper2.settings.LeakageSettings`).
        reducer: what extraction measures per prompt (fits, query windows, the headline's
            sums: :class:`~causalpos.paper2.settings.LeakageReducerSettings`).
        extract: the batch size and seed (:class:`~causalpos.capture.settings.ExtractSettings`).
        strata: ``"source"``: the bootstrap resamples prompts within their ``source`` (the
            tokens' labels: a data store's KJV book, :func:`~causalpos.sampling.tokenize_texts`'
            text), ``"none"``: plainly; default ``"source"`` where the tokens carry sources,
            the pipeline's default.
        attrs: what the model is, recorded on the summary: ``positional`` (``nope`` for a model
            without positional encoding: its runs are then position-free), ``init_of`` ...

    Position-free runs are negative controls only on chunks at random offsets (tokens of mode
    ``chunks``): otherwise the summary's ``controls_note`` says why none was read.
    """
    from causalpos.api.scores import run_variants, token_dataset, variant_specs
    from causalpos.paper2.settings import LeakageReducerSettings, LeakageSettings
    from causalpos.stages.leakage import summarize_leakage

    s = settings or LeakageSettings()
    r = reducer or LeakageReducerSettings()
    data = token_dataset(tokens)
    specs = variant_specs(variants, ["leakage", "sink"])
    if "causal" not in specs:
        raise ValueError(
            f"variants must include 'causal' (the baseline of the decomposition and the BOS "
            f"effects, and the run whose sink heads are probed); got {list(specs)}"
        )
    check_reducer(s, r, int(data.sizes["position"]))
    for variant, spec in specs.items():
        spec["leakage"] = r.reducer_kwargs(variant, s)
    strata = strata or ("source" if "source" in data else "none")
    runs = run_variants(model, data, specs, extract)
    return summarize_leakage(runs, s, data=data, strata=strata, attrs=attrs)


def check_reducer(s: LeakageSettings, r: LeakageReducerSettings, seq_len: int) -> None:
    """Refuse, before the model runs, settings the summary cannot read: its fit, window and BOS
    windows among what the reducer measures, the headline's windows among the reducer's, and
    every window at least two query rows of ``seq_len``."""
    from causalpos.paper2.settings import too_short_windows

    if s.fit not in r.fits:
        raise ValueError(
            f"LeakageSettings.fit {s.fit!r} is not among LeakageReducerSettings.fits "
            f"{list(r.fits)}: add it to the reducer's fits or read one of them"
        )
    for what, wins in (
        ("LeakageSettings.window", [s.window]),
        ("LeakageSettings.bos_windows", list(s.bos_windows)),
        ("LeakageReducerSettings.expected_stats", list(r.expected_stats)),
    ):
        missing = [w for w in wins if w not in r.windows]
        if missing:
            raise ValueError(
                f"{what}: {missing} not among LeakageReducerSettings.windows {list(r.windows)}: "
                "add them to the reducer's windows or read others"
            )
    for w, rows in too_short_windows(r.windows, seq_len):
        raise ValueError(
            f"LeakageReducerSettings.windows: {w!r} keeps {rows} query row(s) of "
            f"prompts of {seq_len} tokens, too few for a fit: drop it (and from the "
            "settings' windows) or give longer prompts"
        )


def leakage_frame(summary: xr.Dataset) -> pd.DataFrame:
    """A leakage summary (:func:`paper2_summary`, or a pipeline's ``results/leakage/`` store) as
    one tidy frame, a row per number with its interval: the cells of the pipeline's tables
    ``paper2_headline``, ``paper2_decomposition``, ``paper2_decomposition_components``
    (pooled, ``_by_layer``, ``_by_kind``), ``paper2_controls`` and ``paper2_plant_doses``
    (:mod:`causalpos.paper2.tables.headline`), and the headline per layer.

    Columns (:data:`COLUMNS`): ``part`` (``leakage``: each run's headline; ``decomposition``:
    §3's total / residual / causal-mask split and shares; ``components``: the same in one unit,
    with the normaliser, remainder, observational split and the paper's reconstructed reading;
    ``controls``: the negative and positive controls; ``doses``: the dose series planted in
    the stream), ``run`` (a variant, or a decomposition's condition: ``rope``,
    ``identity_rope``, ...), ``window``, ``target`` (``logit``, ``logattn``), ``landmark``
    (the key-0 column ``modelled`` or ``counted``), ``scope`` (``model``: pooled over layers and
    heads; ``layer``; ``layer_kind``: pooled over a kind's layers, or ``<kind> minus global``),
    ``layer`` (0-based, where scope is ``layer``; a dose series' planted layer), ``layer_kind``,
    ``quantity`` (the table's column), ``estimate``, ``lo``, ``hi`` (the interval at the
    summary's level) and ``verdict`` (a control's: passed, reads position, underpowered,
    recovered, not recovered, not run; decided from the numbers by the scorecard's rules,
    :func:`causalpos.scorecard.controls.with_verdicts`).

    ``frame.attrs``: what was not run and why (``conditions_not_run``, ``bos_not_run``,
    ``controls_note``), ``n_sequences``, ``level``, ``strata``.
    """
    import pandas as pd

    from causalpos.models.layer_kinds import kinds_by_layer
    from causalpos.paper2.tables.doses import plant_doses_frame
    from causalpos.paper2.tables.headline import (
        components_frames,
        controls_frame,
        decomposition_headline_frame,
        headline_frame,
        stat_columns,
    )
    from causalpos.scorecard.controls import with_verdicts

    parts = []
    head = with_verdicts("headline", headline_frame(summary))
    if not head.empty:
        verdicts = {"control_model_units": "control_verdict"}
        parts.append(_long(head, "leakage", "variant", "model", verdicts))
        layers = stat_columns(summary["leakage_layer"], "leakage")
        layers["layer_kind"] = layers["layer"].map(kinds_by_layer(summary)).fillna("").astype(str)
        parts.append(_long(layers, "leakage", "variant", "layer", {}))
        fixed_bos = int(summary.attrs.get("fixed_bos", 0) or 0) == 1
        ctl = with_verdicts("controls", controls_frame(summary), fixed_bos=fixed_bos)
        parts.append(_long(ctl, "controls", "variant", "model", CONTROLS))
        doses = with_verdicts("plant_doses", plant_doses_frame(summary))
        parts.append(_long(doses, "doses", "variant", "model", DOSES, layer=True))
    if "decomposition" in summary:
        dec = decomposition_headline_frame(summary)
        parts.append(_long(dec, "decomposition", "condition", "model", {}))
    if "components" in summary:
        frames = components_frames(summary)
        for name, scope in (
            ("decomposition_components", "model"),
            ("decomposition_components_by_layer", "layer"),
            ("decomposition_components_by_kind", "layer_kind"),
        ):
            if name in frames:
                parts.append(_long(frames[name], "components", "condition", scope, {}))
    parts = [p for p in parts if not p.empty]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(COLUMNS))
    out["layer"] = out["layer"].astype("Int64")
    out.attrs = {
        k: summary.attrs.get(k, "")
        for k in ("conditions_not_run", "bos_not_run", "controls_note", "n_sequences", "level")
    }
    out.attrs["strata"] = summary.attrs.get("strata", "")
    return out


#: The verdict each control's number carries (quantity -> its verdict column, decided by
#: :func:`causalpos.scorecard.controls.with_verdicts` from the table's numbers).
CONTROLS = {
    "negative": "negative_control",
    "negative_modelled_model_units": "negative_modelled_control",
    "negative_counted_model_units": "negative_counted_control",
    "per_prompt": "per_prompt_control",
    "planted_estimate": "positive_control",
    "planted_model": "planted_model_control",
}
#: The dose series' verdicts: dose 0's against the margin, the series' on its steps.
DOSES = {"leakage": "dose0_control", "step": "positive_control"}


def _long(
    df: pd.DataFrame,
    part: str,
    run: str,
    scope: str,
    verdicts: Mapping[str, str],
    *,
    layer: bool = False,
) -> pd.DataFrame:
    """``df``'s numbers with an interval as rows of :data:`COLUMNS`: every column ``q`` with
    ``q_lo`` and ``q_hi`` beside it (estimate ``q``, or ``q_estimate`` where ``q`` is none);
    ``verdicts``: quantity -> the column holding its verdict; ``layer``: a ``layer`` column
    applies to every scope (the dose series' planted layer)."""
    import numpy as np
    import pandas as pd

    if df.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    cols = set(df.columns)
    frames = []
    for c in df.columns:
        quantity = c.removesuffix("_lo")
        est = quantity if quantity in cols else f"{quantity}_estimate"
        if c == quantity or f"{quantity}_hi" not in cols or est not in cols:
            continue
        verdict = verdicts.get(quantity)
        frames.append(
            pd.DataFrame(
                {
                    "part": part,
                    "run": df[run].astype(str).to_numpy(),
                    "window": _column(df, "window", ""),
                    "target": _column(df, "target", ""),
                    "landmark": _column(
                        df, "landmark", "counted" if "_counted_" in quantity else "modelled"
                    ),
                    "scope": scope,
                    "layer": _column(df, "layer", np.nan) if scope == "layer" or layer else np.nan,
                    "layer_kind": _column(df, "layer_kind", ""),
                    "quantity": quantity,
                    "estimate": df[est].to_numpy(dtype=float),
                    "lo": df[f"{quantity}_lo"].to_numpy(dtype=float),
                    "hi": df[f"{quantity}_hi"].to_numpy(dtype=float),
                    "verdict": _column(df, verdict, "") if verdict else "",
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)]


def _column(df: pd.DataFrame, name: str, default):
    """``df[name]`` as an array (text columns' missing cells as ""), ``default`` where absent."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    if name not in df.columns:
        return default
    col = df[name]
    if is_numeric_dtype(col) and not is_bool_dtype(col):
        return col.to_numpy()
    return col.astype(object).where(col.notna(), "").astype(str).to_numpy(dtype=object)
