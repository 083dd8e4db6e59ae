"""The positive control that propagates, read back: a dose series of an absolute-position term
planted in the residual stream of one lower layer (variants ``plant_stream<k>``,
:mod:`causalpos.capture.stream`), read on the headline (paper2.md §2, Controls).

**The series.** The runs ``<twin>`` (dose 0) and ``<twin with plant_stream<k>>`` (the k-th dose of
``leakage.plant_stream.doses``) on the same prompts; each planted run's dose and layer ℓ come from
its store's ``plant_stream_*`` attrs. As a control the twin must be position-free on prompts
exchangeable over positions: then the plant's is the only absolute position in the forward pass.

**The reading.** Each run's headline leakage on logits in the *model's* units: its N̂ summed over
the layers from ℓ up (those below read the twin's forward pass bit for bit) and their heads, over
the causal run's D̂ pooled over every layer and head, so a dose reads as a share of the model's
expected logit-map variance. Each step from one dose to the next is the paired difference of the
two numerators (a contrast Gram) over the same denominator.

**The verdict** (:func:`causalpos.verdicts.dose_series`): ``recovered`` where dose 0 reads ≈ 0
within the declared margin (the model's negative-control margin on logits,
``leakage.controls.margin.logit`` or ``leakage.per_model.<model>.margin.logit``, set before the
run) and every step rises (its interval above 0); ``not recovered`` otherwise. Where the twin is
not a negative control the series is read but not judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos.models.variants import parse_variant, without_stream
from causalpos.paper2 import inference as inf
from causalpos.paper2.estimator.grams import GramCache
from causalpos.paper2.labels import STAT

#: The target the series is read on: a term in the stream reaches the logits of every layer
#: above it (and their log-attention, through the softmax, less directly).
DOSE_TARGET = "logit"
#: The score-store attrs a stream-planted run carries (:data:`causalpos.capture.stream.STREAM_ATTRS`).
DOSE_ATTRS = ("plant_stream_layer", "plant_stream_dose", "plant_stream_index")
#: The reference run of the model's units.
MODEL_RUN = "causal"


def find_dose_series(runs: Mapping[str, xr.Dataset]) -> dict[str, list[tuple[str, float, int]]]:
    """twin -> [(run, dose, layer), ...] in increasing dose, starting with (twin, 0.0, layer), for
    every dose series of ``runs`` (variant -> score store) whose twin (dose 0:
    :func:`causalpos.models.variants.without_stream`) is among them. A ValueError where the
    planted runs of one twin disagree on the layer, a store lacks the attrs, or two share a
    dose."""
    out: dict[str, list[tuple[str, float, int]]] = {}
    for v in runs:
        if not parse_variant(v).stream:
            continue
        missing = [k for k in DOSE_ATTRS if k not in runs[v].attrs]
        if missing:
            raise ValueError(
                f"run {v!r} is a plant_stream variant but its store has no {missing} attrs: "
                "extract it again (rule extract_scores) with leakage.plant_stream set"
            )
        twin = without_stream(v)
        if twin not in runs:
            continue
        a = runs[v].attrs
        out.setdefault(twin, []).append(
            (v, float(a["plant_stream_dose"]), int(a["plant_stream_layer"]))
        )
    for twin, planted in out.items():
        layers = {layer for _, _, layer in planted}
        doses = [d for _, d, _ in planted]
        if len(layers) != 1 or len(set(doses)) != len(doses):
            raise ValueError(
                f"the dose series of {twin!r} mixes layers {sorted(layers)} or repeats doses "
                f"{doses}: its runs must come from one leakage.plant_stream setting"
            )
        planted.sort(key=lambda r: r[1])
        out[twin] = [(twin, 0.0, planted[0][2]), *planted]
    return out


def series_readings(
    cache: GramCache, window: str, series: Sequence[tuple[str, float, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """(readings, steps), each (len(series), 3) = estimate, lo, hi: every run's N̂ over the layers
    from the plant up, over the causal run's pooled D̂ (module docstring), and the paired
    difference of each run's numerator to the previous dose's over the same D̂ (row 0 NaN)."""
    ps = cache.ps
    layer = series[0][2]
    above = np.arange(len(ps.layers)) >= layer
    d0, db = cache.denominator(MODEL_RUN, window, DOSE_TARGET, "pooled")
    readings, steps = (np.full((len(series), 3), np.nan) for _ in range(2))
    prev = None
    for k, (run, _, _) in enumerate(series):
        # the run's numerator Gram and linear parts summed over the layers above and heads
        gram = cache.grams(run, window, DOSE_TARGET)["num"][above].sum((0, 1))
        parts = {x: v[:, above].sum(1) for x, v in cache.parts(run, window, DOSE_TARGET).items()}
        n0, nb = cache.numerator(gram, parts=parts)
        readings[k] = ps.ci(inf.ratio(nb, db), inf.ratio(n0, d0))
        if prev is not None:
            diff = gram - prev[0]
            dparts = {x: parts[x] - prev[1][x] for x in parts}
            s0, sb = cache.numerator(diff, contrast=True, parts=dparts)
            steps[k] = ps.ci(inf.ratio(sb, db), inf.ratio(s0, d0))
        prev = (gram, parts)
    return readings, steps


def dose_block(
    cache: GramCache, wins: Sequence[str], position_free_runs: Sequence[str], *, margin: float
) -> xr.Dataset:
    """Every dose series of the summary's runs, read on the headline window ``wins[0]``
    (empty where there is none, or no causal run for the model's units).

    Variables over ``dose_run`` (every run of every series, dose 0 first; coordinates
    ``dose_twin``: its series, ``dose_size``: its dose, ``dose_layer``: the planted layer):
    ``dose_leakage`` (dose_run, stat) the reading, ``dose_step`` (dose_run, stat) the paired step
    from the previous dose (NaN at dose 0); over ``dose_series`` (the twins):
    ``dose_control`` 1 where the twin is a negative control here (position-free on prompts
    exchangeable over positions), else 0 (read, not judged). Attrs: ``dose_margin`` (the
    declared margin of dose 0), ``dose_target``, ``dose_window``."""
    ps = cache.ps
    series = find_dose_series(ps.runs) if MODEL_RUN in ps.runs else {}
    if not series:
        return xr.Dataset()
    read = [
        (run, twin, dose, layer, a, b)
        for twin, s in series.items()
        for (run, dose, layer), a, b in zip(s, *series_readings(cache, wins[0], s), strict=True)
    ]
    runs, twins, sizes, layers, rows, steps = (list(x) for x in zip(*read, strict=True))
    names = list(series)
    control = [float(t in position_free_runs) for t in names]
    return xr.Dataset(
        {
            "dose_leakage": (("dose_run", "stat"), np.asarray(rows)),
            "dose_step": (("dose_run", "stat"), np.asarray(steps)),
            "dose_control": (("dose_series",), np.asarray(control)),
        },
        coords={
            "dose_run": runs,
            "dose_twin": ("dose_run", twins),
            "dose_size": ("dose_run", np.asarray(sizes)),
            "dose_layer": ("dose_run", np.asarray(layers, dtype=np.int64)),
            "dose_series": names,
            "stat": list(STAT),
        },
        attrs={
            "dose_margin": float(margin),
            "dose_target": DOSE_TARGET,
            "dose_window": str(wins[0]),
        },
    )
