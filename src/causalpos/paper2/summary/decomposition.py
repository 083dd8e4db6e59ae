"""The decomposition block of a (model, dataset)'s summary: paper 2 §3 in one unit
(:mod:`causalpos.paper2.decomposition`) with intervals, for every condition, landmark reading and
window — pooled, per layer, and per layer kind with each kind's contrast to the global layers
(claim 3 within one model: the same weights and prompts, paired replicates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from causalpos.models.layer_kinds import GLOBAL, kind_groups
from causalpos.models.variants import compose
from causalpos.paper2.decomposition import (
    COMBINATIONS,
    COMPONENTS,
    CONTROL_COMBINATIONS,
    CONTROL_COMPONENTS,
    SHARES,
    UNIT,
    artefact_of,
    combine,
    relative_logattn,
    shares,
)
from causalpos.paper2.estimator.grams import FIT, GramCache
from causalpos.paper2.estimator.replicates import LINEAR_PARTS, sum_parts
from causalpos.paper2.estimator.storeview import layer_kind_of
from causalpos.paper2.extraction.metric import TARGETS
from causalpos.paper2.labels import LANDMARKS, ring_twin
from causalpos.paper2.prompts import PromptSet
from causalpos.paper2.summary.per_prompt import PER_PROMPT_COMPONENTS, block_coords

#: Every name of ``components*``: the components, the shares, the controls.
NAMES = tuple(COMPONENTS) + tuple(SHARES) + tuple(CONTROL_COMPONENTS)

#: Components read in the one unit (divided by the causal run's D̂); the shares are not.
_NUMERATOR_UNITS = set(COMPONENTS) | set(CONTROL_COMPONENTS)


def condition_runs(
    ps: PromptSet, conds: Mapping[str, tuple[str, str]]
) -> dict[str, tuple[str, str | None, str | None]]:
    """Condition -> (causal run, ring run, paper 2's bidirectional run) for every condition whose
    causal run and at least one ablation the summary holds (a missing ablation is None: its
    components read NaN)."""
    out = {}
    for cond, (c, b) in conds.items():
        r = ring_twin(c)
        r, b = (r if r in ps.runs else None), (b if b in ps.runs else None)
        if c in ps.runs and (r or b):
            out[cond] = (c, r, b)
    return out


def control_runs(ps: PromptSet, position_free_runs: Sequence[str]) -> dict[str, str]:
    """The control runs: ``ctrl`` a position-free run (identity RoPE on the ring first), ``win``
    identity RoPE on paper 2's ablation where it is not position-free (its windows have edges)."""
    free = [v for v in ps.variants if v in position_free_runs]
    first = compose("identity_rope", "ring")
    free.sort(key=lambda v: v != first)
    out = {"ctrl": free[0]} if free else {}
    win = compose("identity_rope", "bidirectional")
    if win in ps.runs and win not in position_free_runs:
        out["win"] = win
    return out


def decomposition_block(
    cache: GramCache,
    wins: Sequence[str],
    conds: Mapping[str, tuple[str, str]],
    position_free_runs: Sequence[str] = (),
) -> xr.Dataset:
    """Paper 2 §3 in one unit for every condition (:func:`condition_runs`), both landmark
    readings and every window.

    ``components`` (condition, landmark, window, component_full, stat),
    ``components_layer`` (..., layer, component_full, stat) and ``components_kind``
    (..., layer_kind, component_full, stat; each kind's layers pooled): :data:`NAMES`. Each
    component's interval is calibrated on its own Gram (the same combination of the numerators'
    Grams), its denominator's replicates shared. ``components_kind_contrast`` (same dims):
    each kind's reading minus the global layers' (paired replicates; NaN for ``global`` and where
    the model has no global layer). ``decomposition`` (condition, window, target,
    component, stat): the headline decomposition (landmark modelled) under the names total,
    residual, causal_mask, share_residual, share_causal_mask (log-attention, its one unit; the
    logit coordinate NaN); ``decomposition_difference`` paired differences between
    conditions; ``share_boot`` the share's replicates."""
    ps = cache.ps
    runs = condition_runs(ps, conds)
    controls = control_runs(ps, position_free_runs)
    # layer -> its kind, from the causal runs' stores (every layer global without the coordinate)
    found = [layer_kind_of(ps.runs[c]) for c, _, _ in runs.values()]
    kinds = next((k for k in found if k is not None), {ly: GLOBAL for ly in ps.layers})
    groups = kind_groups([kinds[ly] for ly in ps.layers])
    nc, nlm, nw, nl, nk = len(runs), len(LANDMARKS), len(wins), len(ps.layers), len(groups)
    shape = (nc, nlm, nw)
    level_axes = {"pooled": (), "layer": (nl,), "kind": (nk,), "contrast": (nk,)}
    out = {k: np.full(shape + ax + (len(NAMES), 3), np.nan) for k, ax in level_axes.items()}
    n_rep = len(ps.multipliers)
    share_boot = np.full((nc, nw, len(TARGETS), n_rep), np.nan, dtype=np.float32)
    boots: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    for ci, roles in enumerate(runs.values()):
        # b's relative log-attention per layer, once for every landmark and window
        b = roles[2]
        rel = {}
        if b:
            rel = {ly: relative_logattn(*cache.mean_map(b, "logit", ly)) for ly in ps.layers}
        for li, lm in enumerate(LANDMARKS):
            for wi, w in enumerate(wins):
                read = _Reading(cache, roles, controls, w, lm == "modelled", rel)
                read.levels(out, (ci, li, wi), groups)
                if lm == "modelled":
                    boots[ci, wi] = read.pooled
                    share_boot[ci, wi, TARGETS.index("logattn")] = read.pooled["boot"][
                        "share_causal_mask"
                    ]
    coords = block_coords(
        ps,
        "condition landmark window layer layer_kind_name component_full target stat",
        condition=list(runs),
        window=list(wins),
        layer_kind_name=list(groups),
        component_full=list(NAMES),
    )
    lead = ("condition", "landmark", "window")
    tail = ("component_full", "stat")
    data = xr.Dataset(
        {
            "components": (lead + tail, out["pooled"]),
            "components_layer": (lead + ("layer",) + tail, out["layer"]),
            "components_kind": (lead + ("layer_kind_name",) + tail, out["kind"]),
            "components_kind_contrast": (lead + ("layer_kind_name",) + tail, out["contrast"]),
            "share_boot": (("condition", "window", "target", "replicate"), share_boot),
        },
        coords=coords,
        attrs={
            "components_unit": UNIT,
            "condition_runs": repr({c: list(r) for c, r in runs.items()}),
            "control_runs": repr(controls),
        },
    )
    return data.merge(_eq5_block(ps, list(runs), wins, boots))


class _Reading:
    """The numerator Grams and linear parts of one condition, landmark reading and window, and
    their components at each level (pooled, per layer, per layer kind)."""

    def __init__(self, cache, roles, controls, window, modelled, rel) -> None:
        c, r, b = roles
        self.cache, self.c, self.w, self.modelled = cache, c, window, modelled
        sources = {"c_logattn": (c, "logattn"), "c_logit": (c, "logit")}
        if r:
            sources["r_logit"] = (r, "logit")
        if b:
            sources |= {"b_logit": (b, "logit"), "b_logattn": (b, "logattn")}
        sources |= {name: (run, "logit") for name, run in controls.items()}
        self.grams = {
            k: cache.grams(run, window, t, landmark=modelled)["num"]
            for k, (run, t) in sources.items()
        }
        # difference maps of the same prompts on the same pairs: the causal run's −log Z and,
        # with a ring run, the causal logits minus the ring's (the indirect route's own part)
        diffs = {"c_logz": ((c, "logattn"), (c, "logit"))}
        if r:
            diffs["d_logit"] = ((c, "logit"), (r, "logit"))
        # the Grams' linear parts under the multipliers (B, layer), by the same names
        self.parts = {
            k: cache.parts(run, window, t, landmark=modelled) for k, (run, t) in sources.items()
        }
        for k, (a, b) in diffs.items():
            self.grams[k] = cache.difference_gram(a, b, window, landmark=modelled)
            self.parts[k] = cache.difference_parts(a, b, window, modelled)
        # (layer, head) the edge artefact of b's softmax on its relative expected logits (``rel``:
        # layer -> relative_logattn), read on the pairs and design of c's log-attention
        self.art = None
        if rel:
            masks = cache.masks(c, window, "logattn")
            self.art = np.stack(
                [artefact_of(rel[ly], m, cache.design(m, FIT, modelled)) for ly, m in masks.items()]
            )
        self.pooled: dict[str, dict[str, np.ndarray]] = {}

    def _level(self, layers: np.ndarray | None, level: str):
        """(estimates, replicates) of every name, summed over ``layers`` (indices; None: every
        layer, one value per layer when ``level`` is "layer")."""
        cache = self.cache
        d0, db = cache.denominator(self.c, self.w, "logattn", "layer", landmark=self.modelled)
        if level == "layer":
            grams = {k: g.sum(1) for k, g in self.grams.items()}
            parts = self.parts
            art = None if self.art is None else self.art.sum(1)
        else:
            sel = slice(None) if layers is None else layers
            grams = {k: g[sel].sum((0, 1)) for k, g in self.grams.items()}
            parts = {
                k: sum_parts({x: v[:, sel] for x, v in p.items()}, 0) for k, p in self.parts.items()
            }
            art = None if self.art is None else self.art[sel].sum()
            d0, db = d0[sel].sum(), db[:, sel].sum(-1)
        est, rep = _level_components(cache, grams, art, parts)
        est = {k: v / d0 if k in _NUMERATOR_UNITS else v for k, v in est.items()}
        rep = {k: v / db if k in _NUMERATOR_UNITS else v for k, v in rep.items()}
        return est, rep

    def levels(self, out: dict, at: tuple, groups: Mapping[str, list[int]]) -> None:
        """Fill ``out``'s pooled, layer, kind and contrast entries at index ``at``."""
        ps = self.cache.ps
        est, rep = self._level(None, "pooled")
        self.pooled = {"est": est, "boot": rep}
        _fill(out["pooled"][at], est, rep, ps)
        _fill(out["layer"][at], *self._level(None, "layer"), ps)
        by_kind = {kind: self._level(np.asarray(idx), "kind") for kind, idx in groups.items()}
        for ki, (kind, (est, rep)) in enumerate(by_kind.items()):
            _fill(out["kind"][at][ki], est, rep, ps)
            if GLOBAL in by_kind and kind != GLOBAL:
                g_est, g_rep = by_kind[GLOBAL]
                diff_e = {k: est[k] - g_est[k] for k in est}
                diff_r = {k: rep[k] - g_rep[k] for k in rep}
                _fill(out["contrast"][at][ki], diff_e, diff_r, ps)


def _fill(dest: np.ndarray, est: Mapping, rep: Mapping, ps: PromptSet) -> None:
    """``dest (..., name, 3)`` from each name's estimate and replicates."""
    for k, name in enumerate(NAMES):
        if name in est:
            dest[..., k, :] = ps.ci(rep[name], est[name])


def _level_components(
    cache: GramCache,
    grams: Mapping[str, np.ndarray],
    artefact: np.ndarray | None,
    parts: Mapping[str, Mapping[str, np.ndarray]],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(estimates, replicates) per prompt pair of every component at one level whose numerators
    are at hand (the others NaN): each from its own combination of the numerators' Grams
    (:data:`COMBINATIONS`), calibrated; shares as ratios of the components' replicates (the
    denominator cancels). ``parts``: the Grams' linear parts under the multipliers at this level
    (a component's are the same combination)."""
    est, rep = {}, {}
    shape = None
    for name, co in (COMBINATIONS | CONTROL_COMBINATIONS).items():
        if not all(k in grams for k in co):
            continue
        contrast = any(c < 0 for c in co.values())
        p = {x: combine({k: parts[k][x] for k in co}, co) for x in LINEAR_PARTS}
        est[name], rep[name] = cache.numerator(combine(grams, co), contrast=contrast, parts=p)
        shape = shape or (est[name].shape, rep[name].shape)
    for name in COMBINATIONS:
        if name not in est:
            est[name], rep[name] = np.full(shape[0], np.nan), np.full(shape[1], np.nan)
    art = np.full(shape[0], np.nan) if artefact is None else np.asarray(artefact, np.float64)
    est["artefact"] = art
    rep["artefact"] = np.full(shape[1], np.nan)
    return est | shares(est), rep | shares(rep)


def _eq5_block(
    ps: PromptSet, conds: Sequence[str], wins: Sequence[str], boots: Mapping
) -> xr.Dataset:
    """``decomposition`` and its paired differences between conditions from the one-unit
    components (landmark modelled, log-attention)."""
    names = PER_PROMPT_COMPONENTS  # Eq. 5's names, as the per-prompt reading's
    nc, nw, nt = len(conds), len(wins), len(TARGETS)
    ti = TARGETS.index("logattn")
    dec = np.full((nc, nw, nt, len(names), 3), np.nan)
    diff = np.full((nc, nc, nw, nt, len(names), 3), np.nan)

    def get(x, k):
        return 1.0 - x["share_causal_mask"] if k == "share_residual_stream" else x[k]

    for (ci, wi), e in boots.items():  # every (condition, window) is read
        for k, comp in enumerate(names):
            dec[ci, wi, ti, k] = ps.ci(get(e["boot"], comp), get(e["est"], comp))
            for cj in range(nc):
                r = boots[cj, wi]
                diff[ci, cj, wi, ti, k] = ps.ci(
                    get(e["boot"], comp) - get(r["boot"], comp),
                    get(e["est"], comp) - get(r["est"], comp),
                )
    return xr.Dataset(
        {
            "decomposition": (("condition", "window", "target", "component", "stat"), dec),
            "decomposition_difference": (
                ("condition", "condition_ref", "window", "target", "component", "stat"),
                diff,
            ),
        },
        coords=block_coords(
            ps,
            "condition condition_ref window target component stat",
            condition=list(conds),
            condition_ref=list(conds),
            window=list(wins),
            component=list(names),
        ),
    )
