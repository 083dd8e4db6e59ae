"""Paper 2 §4's BOS replacement in the summary: which runs pair up (an intervention and the same
run without it), what each effect is measured on, and the ``per_prompt_bos_effect`` block of a
:class:`~causalpos.paper2.prompts.PromptSet`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos.models.variants import parse_variant, without_bos_replacement
from causalpos.paper2.estimator.expected import pooled_subset
from causalpos.paper2.estimator.grams import GramCache
from causalpos.paper2.labels import (  # noqa: F401 (RESIDUAL_STREAM re-exported)
    BOS_READING_TARGET,
    BOS_READINGS,
    RESIDUAL_STREAM,
    STAT,
    bos_replacement,
)
from causalpos.paper2.prompts import PromptSet

#: Table 9 on the headline: a causal run's sink heads are those with prompt-mean attention to
#: key 0 at or above this; the replacements' effects are read on this target.
SINK_TAU = 0.5


def _default_bos(variants: Iterable[str]) -> dict[str, tuple[str, str, str]]:
    """Every run with a position-0 replacement -> (intervention, baseline, target).

    The baseline is the same run without the replacement
    (:func:`causalpos.models.variants.without_bos_replacement`). A ring intervention (e.g.
    ``bos_replace_mean+ring`` against ``ring``) is measured on logits (§3's residual-stream
    component, Table 9's C_res on the ablation that creates no position), a bidirectional one on
    log-attention (paper 2's own reading of C_res), a causal one on logits (the observational
    residual-stream component). The intervention's name is the run's name without
    ``bos_replace_`` (``mean+bidirectional``, ``all_gaussian``).
    """
    out = {}
    for v in variants:
        var = parse_variant(v)
        if var.bos_replace is None:
            continue
        target = "logit" if var.causal or var.ring else "logattn"
        out[v.replace("bos_replace_", "", 1)] = (v, without_bos_replacement(v), target)
    return out


def wanted_bos(
    ps: PromptSet, bos: Mapping[str, tuple[str, str, str]] | None = None
) -> tuple[dict[str, tuple[str, str, str]], dict[str, tuple[str, str, str]], dict[str, list[str]]]:
    """(every intervention asked for, those whose two runs are in ``ps``, intervention -> its
    missing runs); ``bos`` None: :func:`_default_bos` of the runs."""
    present = set(ps.runs)
    wanted = dict(_default_bos(ps.runs) if bos is None else bos)
    pairs = {k: t for k, t in wanted.items() if t[0] in present and t[1] in present}
    not_run = {
        k: [v for v in t[:2] if v not in present] for k, t in wanted.items() if k not in pairs
    }
    return wanted, pairs, not_run


def bos_effects(
    ps: PromptSet,
    pairs: Mapping[str, tuple[str, str, str]],
    bos_windows: Sequence[str] = ("early16", "early32", "early64", "late"),
) -> xr.Dataset:
    """BOS replacement (§4) per intervention and query window the stores hold: effect =
    1 − C_res(intervention)/C_res(baseline) (``per_prompt_bos_effect``) and both C_res
    (``per_prompt_bos_c_res``, ``per_prompt_bos_c_res_baseline``). Empty without an intervention."""
    if not pairs:
        return xr.Dataset()
    wins = [w for w in bos_windows if w in ps.windows]
    eff, c_int, c_base = (np.full((len(pairs), len(wins), 3), np.nan) for _ in range(3))
    for bi, (iv, bv, target) in enumerate(pairs.values()):
        for wi, win in enumerate(wins):
            reads = [ps.per_prompt_leakage(r, target, win).mean((1, 2)) for r in (iv, bv)]
            rows = _effect(ps, *((x.mean(), ps.boot(x)) for x in reads))
            eff[bi, wi], c_int[bi, wi], c_base[bi, wi] = rows
    dims = ("intervention", "bos_window", "stat")
    return xr.Dataset(
        {
            "per_prompt_bos_effect": (dims, eff),
            "per_prompt_bos_c_res": (dims, c_int),
            "per_prompt_bos_c_res_baseline": (dims, c_base),
        },
        coords={"stat": list(STAT), "intervention": list(pairs), "bos_window": wins},
    )


def _effect(ps: PromptSet, iv: tuple, bv: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(effect 1 − C(iv)/C(bv), C(iv), C(bv)), each (estimate, lo, hi), from the intervention's
    and the baseline's (estimate, replicates) of C."""
    (ie, ib), (be, bb) = iv, bv
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = ps.ci(1.0 - ib / bb, 1.0 - ie / be)
    return eff, ps.ci(ib, ie), ps.ci(bb, be)


def pooled_reading(cache: GramCache, run: str, w: str, t: str, key: str = "pooled"):
    """(estimate, replicates) of a run's headline, pooled (or ``key="layer"``)."""
    r = cache.estimate(run, w, t)
    return r[key], r[f"{key}_boot"]


def bos_plan(
    ps: PromptSet, bos_pairs: Mapping[str, tuple[str, str, str]]
) -> tuple[dict[tuple[str, str], tuple[str, str]], dict[str, np.ndarray]]:
    """(replacement, reading) -> (run, baseline run) for every BOS pair of ``ps``; and, for every
    causal run of such a pair, its baseline's sink heads ((layer, head) bool: prompt-mean
    attention to key 0 ≥ :data:`SINK_TAU`; none when the baseline stores no ``sink_attention``)."""
    runs: dict[tuple[str, str], tuple[str, str]] = {}
    sinks: dict[str, np.ndarray] = {}
    for iv, bv, _target in bos_pairs.values():
        if iv not in ps.runs or bv not in ps.runs:
            continue
        rep = bos_replacement(iv)
        vi, vb = parse_variant(iv), parse_variant(bv)
        if vi.ring and vb.ring:
            runs[rep, "residual_stream"] = (iv, bv)
        elif not vi.causal and not vb.causal:
            runs[rep, "residual_stream_paper"] = (iv, bv)
        elif vi.causal and vb.causal:
            runs[rep, "causal_total"] = (iv, bv)
            runs[rep, "sink_heads"] = (iv, bv)
            if "sink_attention" in ps.runs[bv]:
                att = ps.runs[bv]["sink_attention"].mean("sequence").transpose("layer", "head")
                sel = np.asarray(att.values) >= SINK_TAU
                sinks[iv] = sinks[bv] = sel
    return runs, sinks


def bos_headline_block(
    cache: GramCache,
    runs: Mapping[tuple[str, str], tuple[str, str]],
    wins: Sequence[str],
    sink_sel: Mapping[str, np.ndarray],
    target: str | None = None,
) -> xr.Dataset:
    """Table 9 on the headline (:data:`BOS_READINGS`, each on its :data:`BOS_READING_TARGET`
    unless ``target`` is given), replicates paired through the counts."""
    ps = cache.ps
    reps = sorted({rep for rep, _ in runs})
    shape = (len(reps), len(BOS_READINGS), len(wins), 3)
    eff, c_int, c_base = (np.full(shape, np.nan) for _ in range(3))
    n_sink = np.zeros(len(reps))
    for (rep, reading), (iv, bv) in runs.items():
        a, k = reps.index(rep), BOS_READINGS.index(reading)
        t = target or BOS_READING_TARGET[reading]
        for wi, w in enumerate(wins):
            if reading == "sink_heads":
                if iv not in sink_sel or bv not in sink_sel:
                    continue
                reads = [
                    pooled_subset(cache.grams(r, w, t), sink_sel[r], ps.multipliers, level=ps.level)
                    for r in (iv, bv)
                ]
                n_sink[a] = int(sink_sel[bv].sum())
            else:
                reads = [pooled_reading(cache, r, w, t) for r in (iv, bv)]
            eff[a, k, wi], c_int[a, k, wi], c_base[a, k, wi] = _effect(ps, *reads)
    dims = ("bos_replacement", "bos_reading", "window", "stat")
    return xr.Dataset(
        {
            "bos_effect": (dims, eff),
            "bos_c": (dims, c_int),
            "bos_c_baseline": (dims, c_base),
            "bos_sink_heads": (("bos_replacement",), n_sink),
        },
        coords={
            "bos_replacement": reps,
            "bos_reading": list(BOS_READINGS),
            "window": list(wins),
            "stat": list(STAT),
        },
        attrs={"bos_sink_tau": SINK_TAU, "bos_target": target or repr(BOS_READING_TARGET)},
    )
