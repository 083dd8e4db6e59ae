"""Paper 2's decomposition (§3) on the headline reading, in one unit, without the softmax's edge
artefact: the components (:data:`COMPONENTS`), how each is combined from the runs' numerator
Grams (:data:`COMBINATIONS`), and the summary block that reads them with their intervals for
every condition, landmark reading, window and layer (:func:`decomposition_block`).

**One unit.** Every component is a ΔSS of an expected map, ‖P_Δ μ‖² (estimated without the content
term by the U-statistic N̂ / (n(n − 1)) of :mod:`causalpos.paper2.estimator.expected`), divided by *one*
denominator: the causal run's expected log-attention variance ‖C μ_a‖² (D̂ / (n(n − 1))). So the
components add exactly; subtracting two ΔR² with their own denominators (each run's variance) can
flip a component's sign.

**Components** (:data:`COMPONENTS`), for a condition = (causal run c, ablation run b, the same
weights without the causal mask):

- ``total`` — ΔSS of the causal run's log-attention a = s − log Z.
- ``residual_stream`` — ΔSS of the ablation run's pre-softmax **logits**: absolute position that
  reached q and k through the residual stream with no causal mask anywhere. A logit map that
  depends only on the offset, f(i − j), has ΔSS exactly 0 under the saturated baseline on any pair
  set, whatever mask the pass used, so no purely relative map can produce this reading.
- ``causal_mask`` — ``total − residual_stream``: Eq. 5's causal-mask component on that residual.
- ``normaliser`` — ΔSS of the causal run's −log Z_i (its log-attention minus its logits): what
  the softmax denominator over i + 1 keys adds by itself, measured in the causal run.
- ``remainder`` — ``causal_mask − normaliser``: the non-additive part, the cross term
  −2⟨P_Δ s, P_Δ log Z⟩ plus the position the causal mask put into the causal run's logits beyond
  the ablation's (``total = residual_stream + normaliser + remainder`` exactly).
- ``logit`` — ΔSS of the causal run's logits (the observational split's first term;
  ``logit + normaliser + cross = total``), and ``cross`` its cross term.
- ``residual_stream_paper`` — ΔSS of the ablation run's **log-attention**: paper 2's own
  (reconstructed) reading. A bidirectional softmax normalises row i over offsets i − T + 1 … i, so
  log Z_i depends on i even for exactly relative logits: this reading carries that edge artefact.
  ``causal_mask_paper = total − residual_stream_paper``.
- ``artefact`` — the edge artefact measured: each head's expected ablation logits made exactly
  relative (the mean over each offset's allowed pairs, a Toeplitz map), passed through the
  ablation's own softmax (its allowed keys), and read as ΔSS (:func:`relative_artefact`). It is a
  plug-in on the estimated expected map (no CI).

Shares: ``share_causal_mask = causal_mask / total`` (Eq. 5), ``share_causal_mask_paper``,
``share_normaliser = normaliser / total``, ``share_artefact = artefact / residual_stream_paper``.

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos.paper2.estimator.grams import FIT, GramCache
from causalpos.paper2.estimator.pairgrams import numerator_grams, stats_from_maps
from causalpos.paper2.estimator.replicates import LINEAR_PARTS, sum_parts
from causalpos.paper2.extraction.design import Design
from causalpos.paper2.extraction.metric import TARGETS
from causalpos.paper2.labels import LANDMARKS, STAT
from causalpos.paper2.prompts import PromptSet

#: The one unit every component is expressed in.
UNIT = "delta SS of the expected map over the causal run's expected log-attention variance"


#: Components in one unit (ΔSS over the causal run's expected log-attention variance).
COMPONENTS = (
    "total",
    "residual_stream",
    "causal_mask",
    "normaliser",
    "remainder",
    "logit",
    "cross",
    "residual_stream_paper",
    "causal_mask_paper",
    "artefact",
)


#: Shares of the total (or, for the artefact, of the paper's residual reading).
SHARES = ("share_causal_mask", "share_causal_mask_paper", "share_normaliser", "share_artefact")


#: The numerators (run role, map) every component is built from.
NUMERATORS = ("c_logattn", "c_logit", "c_logz", "b_logit", "b_logattn")


#: Components beside :data:`COMPONENTS`: the residual-stream reading of a position-free run of the
#: same summary, in the same unit, and the paired difference of the condition's residual-stream
#: component to it.
CONTROL_COMPONENTS = ("control_residual_stream", "residual_minus_control")


def toeplitz(mu: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The relative part of maps ``mu`` (..., T, T): each offset's mean over the ``allowed``
    pairs ((T, T) bool), placed on every allowed pair of that offset; NaN elsewhere."""
    mu = np.asarray(mu, dtype=np.float64)
    T = mu.shape[-1]
    d = np.subtract.outer(np.arange(T), np.arange(T)) + (T - 1)  # offset index 0..2T-2
    out = np.full(mu.shape, np.nan)
    idx = d[allowed]
    cnt = np.bincount(idx, minlength=2 * T - 1).astype(np.float64)
    flat = mu[..., allowed]  # (..., n_allowed)
    lead = flat.shape[:-1]
    sums = np.zeros(lead + (2 * T - 1,))
    rows = sums.reshape(-1, 2 * T - 1)
    for r, x in enumerate(flat.reshape(-1, flat.shape[-1])):  # np.add.at's sums, in its order
        rows[r] = np.bincount(idx, weights=x, minlength=2 * T - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        level = sums / cnt
    out[..., allowed] = level[..., idx]
    return out


def log_softmax_rows(s: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of ``s`` (..., T, T) over the ``allowed`` keys; NaN elsewhere."""
    t = np.where(allowed, np.asarray(s, dtype=np.float64), -np.inf)
    top = t.max(-1, keepdims=True)
    z = t - np.where(np.isfinite(top), top, 0.0)  # shifted by the row's maximum
    with np.errstate(divide="ignore"):  # a row without an allowed key: all NaN below
        out = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return np.where(allowed, out, np.nan)


def relative_artefact(
    mu: np.ndarray, allowed: np.ndarray, mask: np.ndarray, design: Design
) -> np.ndarray:
    """ΔSS that exactly relative logits would show on log-attention under a pass's own softmax.

    Args:
        mu: ``(..., T, T)`` expected pre-softmax logits of the pass (e.g. each head's mean map).
        allowed: ``(T, T)`` bool, the keys the pass's softmax normalises over (all of them in a
            bidirectional pass, a band in a sliding-window one, the lower triangle when causal).
        mask: ``(T, T)`` bool, the measured pairs (the design's).
        design: the fit's :class:`~causalpos.paper2.extraction.design.Design` on ``mask``.

    Returns:
        ``(...)`` ‖P_Δ log_softmax(toeplitz(mu))‖² on the measured pairs, the unit of N̂ per pair.
    """
    return artefact_of(relative_logattn(mu, allowed), mask, design)


def relative_logattn(mu: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The log-attention (..., T, T) that exactly relative logits (:func:`toeplitz` of ``mu``)
    give under a softmax over the ``allowed`` keys: what :func:`relative_artefact` reads."""
    return log_softmax_rows(toeplitz(mu, allowed), allowed)


def artefact_of(rel: np.ndarray, mask: np.ndarray, design: Design) -> np.ndarray:
    """(...) ‖P_Δ rel‖² on the measured pairs ``mask`` of :func:`relative_logattn`'s maps."""
    lead = rel.shape[:-2]
    st = stats_from_maps(rel.reshape((-1,) + rel.shape[-2:])[:, None], mask)  # n=K, maps (1,)
    g = numerator_grams(st, design)  # (1, K, K): a map's own square is its diagonal
    return np.diagonal(g[0]).reshape(lead).copy()


#: Each component as a combination of the numerators (ΔSS is linear in the Gram, so a
#: component's own Gram is the same combination of the numerators' Grams).
COMBINATIONS: dict[str, dict[str, float]] = {
    "total": {"c_logattn": 1.0},
    "residual_stream": {"b_logit": 1.0},
    "causal_mask": {"c_logattn": 1.0, "b_logit": -1.0},
    "normaliser": {"c_logz": 1.0},
    "remainder": {"c_logattn": 1.0, "b_logit": -1.0, "c_logz": -1.0},
    "logit": {"c_logit": 1.0},
    "cross": {"c_logattn": 1.0, "c_logit": -1.0, "c_logz": -1.0},
    "residual_stream_paper": {"b_logattn": 1.0},
    "causal_mask_paper": {"c_logattn": 1.0, "b_logattn": -1.0},
}


def combine(parts: dict[str, np.ndarray], coefficients: dict[str, float]) -> np.ndarray:
    """Σ coefficient × part (arrays of one shape: numerators, or their Grams)."""
    return sum(c * np.asarray(parts[k], dtype=np.float64) for k, c in coefficients.items())


def shares(comp: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:data:`SHARES` from components (any common unit: the denominator cancels)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "share_causal_mask": comp["causal_mask"] / comp["total"],
            "share_causal_mask_paper": comp["causal_mask_paper"] / comp["total"],
            "share_normaliser": comp["normaliser"] / comp["total"],
            "share_artefact": comp["artefact"] / comp["residual_stream_paper"],
        }


def components(
    nums: dict[str, np.ndarray], den: np.ndarray, artefact: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Every component of :data:`COMPONENTS` and :data:`SHARES` from the numerators.

    Args:
        nums: :data:`NUMERATORS` -> N (any shape, the same for all: e.g. replicates × layer):
            per-pair U-statistics N̂ / (n(n − 1)) of each map (or their replicates).
        den: the causal run's per-pair D̂ (same shape): the one denominator.
        artefact: :func:`relative_artefact` summed as the numerators are (same unit); NaN if None.

    Returns:
        name -> array of the inputs' shape.
    """
    d = np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {name: combine(nums, co) / d for name, co in COMBINATIONS.items()}
        art = np.full(d.shape, np.nan) if artefact is None else np.asarray(artefact) / d
    out["artefact"] = np.broadcast_to(art, out["total"].shape).copy()
    return out | shares(out)


def decomposition_block(
    cache: GramCache,
    wins: Sequence[str],
    conds: Mapping[str, tuple[str, str]],
    position_free_runs: Sequence[str] = (),
) -> xr.Dataset:
    """Paper 2 §3 in one unit (module docstring), for every condition (causal run, ablation run),
    both landmark readings and every window, pooled and per layer.

    ``exp_components`` (exp_condition, exp_landmark, exp_window, component_full, stat) and
    ``exp_components_layer`` (..., layer, component_full, stat): :data:`COMPONENTS` and
    :data:`SHARES`, plus ``control_residual_stream`` (a position-free run's logit ΔSS in the
    same unit: the residual-stream reading's negative control) and ``residual_minus_control``.
    Each component's interval is calibrated on its own Gram (the same combination of the
    numerators' Grams), its denominator's replicates shared. ``exp_decomposition``
    (exp_condition, exp_window, target, component, stat): the headline decomposition (landmark
    modelled, artefact-free) under the names total, residual, causal_mask, share_residual,
    share_causal_mask; ``target`` is log-attention (its one unit) and the logit coordinate is
    NaN; ``exp_decomposition_difference`` paired differences between conditions and
    ``exp_share_boot`` the share's replicates."""
    ps = cache.ps
    names = list(COMPONENTS) + list(SHARES) + list(CONTROL_COMPONENTS)
    nc, nlm, nw, nl = len(conds), len(LANDMARKS), len(wins), len(ps.layers)
    out = {
        "pooled": np.full((nc, nlm, nw, len(names), 3), np.nan),
        "layer": np.full((nc, nlm, nw, nl, len(names), 3), np.nan),
    }
    n_rep = len(ps.multipliers if ps.multipliers is not None else ps.counts)
    share_boot = np.full((nc, nw, len(TARGETS), n_rep), np.nan, dtype=np.float32)
    free = [v for v in ps.variants if v in position_free_runs]
    boots: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    for ci, (c, b) in enumerate(conds.values()):
        # b's relative log-attention per layer, once for every landmark and window
        rel = {ly: relative_logattn(*cache.mean_map(b, "logit", ly)) for ly in ps.layers}
        for li, lm in enumerate(LANDMARKS):
            modelled = lm == "modelled"
            for wi, w in enumerate(wins):
                grams = {
                    "c_logattn": cache.grams(c, w, "logattn", landmark=modelled)["num"],
                    "c_logit": cache.grams(c, w, "logit", landmark=modelled)["num"],
                    "c_logz": cache.logz_gram(c, w, landmark=modelled),
                    "b_logit": cache.grams(b, w, "logit", landmark=modelled)["num"],
                    "b_logattn": cache.grams(b, w, "logattn", landmark=modelled)["num"],
                }
                if free:
                    grams["ctrl"] = cache.grams(free[0], w, "logit", landmark=modelled)["num"]
                # the Grams' linear parts under the multipliers (B, layer), by the same names
                roles = {"c": c, "b": b}
                parts = {
                    k: cache.parts(roles[k[0]], w, k[2:], landmark=modelled) for k in NUMERATORS
                }
                if free:
                    parts["ctrl"] = cache.parts(free[0], w, "logit", landmark=modelled)
                art = _artefact(cache, rel, c, w, modelled)  # (layer, head), per prompt pair
                for level, axes in (("pooled", (0, 1)), ("layer", (1,))):
                    est, rep = _level_components(
                        cache,
                        {k: g.sum(axes) for k, g in grams.items()},
                        art.sum(axes),
                        {k: sum_parts(p, 0) if level == "pooled" else p for k, p in parts.items()},
                    )
                    d0, db = cache.denominator(c, w, "logattn", level, landmark=modelled)
                    est = {k: v / d0 if k in _NUMERATOR_UNITS else v for k, v in est.items()}
                    rep = {k: v / db if k in _NUMERATOR_UNITS else v for k, v in rep.items()}
                    dest = out[level][ci, li, wi]
                    for k, name in enumerate(names):
                        if name in est:
                            dest[..., k, :] = ps.ci(rep[name], est[name])
                    if level == "pooled" and modelled:
                        boots[ci, wi] = {"est": est, "boot": rep}
                        share_boot[ci, wi, TARGETS.index("logattn")] = rep["share_causal_mask"]
    data = xr.Dataset(
        {
            "exp_components": (
                ("exp_condition", "exp_landmark", "exp_window", "component_full", "stat"),
                out["pooled"],
            ),
            "exp_components_layer": (
                ("exp_condition", "exp_landmark", "exp_window", "layer", "component_full", "stat"),
                out["layer"],
            ),
            "exp_share_boot": (("exp_condition", "exp_window", "target", "replicate"), share_boot),
        },
        coords={
            "exp_condition": list(conds),
            "exp_landmark": list(LANDMARKS),
            "exp_window": list(wins),
            "layer": ps.layers,
            "component_full": names,
            "target": list(TARGETS),
            "stat": list(STAT),
        },
        attrs={"exp_components_unit": UNIT},
    )
    return data.merge(_eq5_block(ps, list(conds), wins, boots))


#: Components read in the one unit (divided by the causal run's D̂); the shares are not.
_NUMERATOR_UNITS = set(COMPONENTS) | set(CONTROL_COMPONENTS)


def _level_components(
    cache: GramCache,
    grams: Mapping[str, np.ndarray],
    artefact: np.ndarray,
    parts: Mapping[str, Mapping[str, np.ndarray] | None] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(estimates, replicates) per prompt pair of every component at one level: each from its
    own combination of the numerators' Grams (:data:`COMBINATIONS`), calibrated; shares as
    ratios of the components' replicates (the denominator cancels). ``parts``: the Grams' linear
    parts under the multipliers at this level (a component's are the same combination)."""
    combos = dict(COMBINATIONS)
    if "ctrl" in grams:
        combos["control_residual_stream"] = {"ctrl": 1.0}
        combos["residual_minus_control"] = {"b_logit": 1.0, "ctrl": -1.0}
    est, rep = {}, {}
    for name, co in combos.items():
        contrast = any(c < 0 for c in co.values())
        p = None
        if parts is not None and all(parts.get(k) is not None for k in co):
            p = {x: combine({k: parts[k][x] for k in co}, co) for x in LINEAR_PARTS}
        est[name], rep[name] = cache.numerator(combine(grams, co), contrast=contrast, parts=p)
    est["artefact"] = np.asarray(artefact, dtype=np.float64)
    rep["artefact"] = np.full(rep["total"].shape, np.nan)
    return est | shares(est), rep | shares(rep)


def _artefact(cache: GramCache, rel: Mapping, c: str, w: str, modelled: bool) -> np.ndarray:
    """(layer, head) the edge artefact of run b's softmax on its relative expected logits
    (``rel``: layer -> :func:`relative_logattn` of b's expected logits), read on the pairs
    and design of the causal run's log-attention (per prompt pair)."""
    out = []
    masks = cache.masks(c, w, "logattn")
    for layer, mask in masks.items():
        design = cache.design(mask, FIT, modelled)
        out.append(artefact_of(rel[layer], mask, design))
    return np.stack(out)


def _eq5_block(
    ps: PromptSet, conds: Sequence[str], wins: Sequence[str], boots: Mapping
) -> xr.Dataset:
    """``exp_decomposition`` and its paired differences between conditions from the one-unit
    components (landmark modelled, log-attention)."""
    names = {
        "total": "total",
        "residual": "residual_stream",
        "causal_mask": "causal_mask",
        "share_residual": None,
        "share_causal_mask": "share_causal_mask",
    }
    nc, nw, nt = len(conds), len(wins), len(TARGETS)
    ti = TARGETS.index("logattn")
    dec = np.full((nc, nw, nt, len(names), 3), np.nan)
    diff = np.full((nc, nc, nw, nt, len(names), 3), np.nan)

    def get(x, k):
        return 1.0 - x["share_causal_mask"] if names[k] is None else x[names[k]]

    for (ci, wi), e in boots.items():
        for k, comp in enumerate(names):
            dec[ci, wi, ti, k] = ps.ci(get(e["boot"], comp), get(e["est"], comp))
        for cj in range(nc):
            if (cj, wi) not in boots:
                continue
            r = boots[cj, wi]
            for k, comp in enumerate(names):
                diff[ci, cj, wi, ti, k] = ps.ci(
                    get(e["boot"], comp) - get(r["boot"], comp),
                    get(e["est"], comp) - get(r["est"], comp),
                )
    return xr.Dataset(
        {
            "exp_decomposition": (
                ("exp_condition", "exp_window", "target", "component", "stat"),
                dec,
            ),
            "exp_decomposition_difference": (
                ("exp_condition", "exp_condition_ref", "exp_window", "target", "component", "stat"),
                diff,
            ),
        },
        coords={
            "exp_condition": list(conds),
            "exp_condition_ref": list(conds),
            "exp_window": list(wins),
            "target": list(TARGETS),
            "component": list(names),
            "stat": list(STAT),
        },
    )
