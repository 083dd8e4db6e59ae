"""Paper 2's decomposition (§3) on the headline reading, in one unit, by an ablation whose own
edges create no position: the components (:data:`COMPONENTS`), each a combination of the runs'
numerator Grams (:data:`COMBINATIONS`), and the softmax's edge artefact. The summary block:
:func:`causalpos.paper2.summary.decomposition.decomposition_block`.

**One unit.** Every component is a ΔSS of an expected map, ‖P_Δ μ‖² (the U-statistic
N̂ / (n(n − 1)) of :mod:`causalpos.paper2.estimator.expected`), over *one* denominator: the causal
run's expected log-attention variance ‖C μ_a‖² (D̂ / (n(n − 1))) on the pairs each layer attends
to as trained. So the components add exactly; subtracting two ΔR² with their own denominators
can flip a component's sign.

**The runs** of a condition (:data:`causalpos.models.variants.DECOMPOSITION_CONDITIONS`): the causal
run c (as trained), the ring run r (``ring``: no mask at all and RoPE offsets taken cyclically, so
the pass creates no position at the sequence's ends: :mod:`causalpos.capture.ring`) and paper 2's
ablation b (``bidirectional``: ``is_causal = False``, a sliding window kept symmetric).

**Three routes** (spec §3), ``total`` (ΔSS of the causal log-attention a = s − log Z) =
``mask_free + indirect_mask + direct_mask`` exactly:

- ``direct_mask`` — the causal mask at this layer (its normaliser), N(c_logattn) − N(c_logit):
  ``normaliser`` (ΔSS of −log Z_i) plus ``direct_cross`` (2⟨P_Δ s, P_Δ(−log Z)⟩).
- ``indirect_mask`` — position the masks wrote into the residual stream below, read by this
  layer's q·k: N(c_logit) − N(r_logit) = ``indirect_own`` (ΔSS of the per-prompt difference map
  d = causal − ring logits, same prompts and pairs) + ``indirect_cross`` (2⟨P_Δ d, P_Δ r⟩).
- ``mask_free`` — ΔSS of the ring run's logits: absolute position that reached q and k with no
  mask and no sequence end (the fixed token 0's landmark). A logit map f(i − j) has ΔSS exactly 0
  under the saturated baseline on any pair set; without a fixed token 0 it reads 0 by symmetry
  and the tables mark it "not applicable" (the summary's ``token0_fixed``).

**Paper 2's two components on two mappings** (:data:`MAPPINGS`): the *ablation* mapping (paper
2's own) causal-mask = direct + indirect, residual-stream = mask-free; the *mechanism* mapping
causal-mask = direct, residual-stream = indirect + mask-free (``logit``: the position q·k carry).
Aliases (same combinations): ``residual_stream`` = ``mask_free``, ``cross`` = ``direct_cross``,
``remainder`` = ``causal_mask − normaliser``, ``share_causal_mask`` = its ablation mapping's.

**Paper 2's own reading** (bidirectional ablation): ``residual_stream_bidirectional``, its logits'
ΔSS, and ``edge_position`` (minus the ring's: the position that pass creates at the sequence's
ends and its windows' edges); ``residual_stream_paper``, its log-attention's ΔSS: a bidirectional
softmax normalises row i over offsets i − T + 1 … i, so log Z_i depends on i even for exactly
relative logits. That edge ``artefact`` is measured by making each head's expected ablation
logits exactly relative (a Toeplitz map), passing them through the ablation's own softmax and
reading ΔSS (:func:`relative_logattn`, :func:`artefact_of`): a plug-in, no CI.

Controls in the same unit (:data:`CONTROL_COMPONENTS`): a position-free run's logit reading
(identity RoPE on the ring), ``residual_minus_control``, and ``window_edges`` (identity RoPE on
paper 2's ablation where the windows mask something: position only their edges can put there).
"""

from __future__ import annotations

import numpy as np

from causalpos.paper2.estimator.pairgrams import numerator_grams, stats_from_maps
from causalpos.paper2.extraction.design import Design

#: The one unit every component is expressed in.
UNIT = "delta SS of the expected map over the causal run's expected log-attention variance"

#: Each component but the artefact as a combination of the numerators (ΔSS is linear in the
#: Gram, so a component's own Gram is the same combination of the numerators' Grams).
COMBINATIONS: dict[str, dict[str, float]] = {
    "total": {"c_logattn": 1.0},
    "direct_mask": {"c_logattn": 1.0, "c_logit": -1.0},
    "direct_cross": {"c_logattn": 1.0, "c_logit": -1.0, "c_logz": -1.0},
    "indirect_mask": {"c_logit": 1.0, "r_logit": -1.0},
    "indirect_own": {"d_logit": 1.0},
    "indirect_cross": {"c_logit": 1.0, "r_logit": -1.0, "d_logit": -1.0},
    "mask_free": {"r_logit": 1.0},
    "residual_stream": {"r_logit": 1.0},
    "causal_mask": {"c_logattn": 1.0, "r_logit": -1.0},
    "normaliser": {"c_logz": 1.0},
    "remainder": {"c_logattn": 1.0, "r_logit": -1.0, "c_logz": -1.0},
    "logit": {"c_logit": 1.0},
    "cross": {"c_logattn": 1.0, "c_logit": -1.0, "c_logz": -1.0},
    "residual_stream_bidirectional": {"b_logit": 1.0},
    "edge_position": {"b_logit": 1.0, "r_logit": -1.0},
    "residual_stream_paper": {"b_logattn": 1.0},
    "causal_mask_paper": {"c_logattn": 1.0, "b_logattn": -1.0},
}

#: Components in one unit (ΔSS over the causal run's expected log-attention variance).
COMPONENTS = (*COMBINATIONS, "artefact")

#: Each share -> (its component, the component it is a share of): of the total, or for the
#: artefact and the edge of the paper's residual readings.
SHARE_OF = {
    "share_causal_mask_ablation": ("causal_mask", "total"),
    "share_causal_mask_mechanism": ("direct_mask", "total"),
    "share_direct_mask": ("direct_mask", "total"),
    "share_indirect_mask": ("indirect_mask", "total"),
    "share_mask_free": ("mask_free", "total"),
    "share_causal_mask": ("causal_mask", "total"),
    "share_causal_mask_paper": ("causal_mask_paper", "total"),
    "share_normaliser": ("normaliser", "total"),
    "share_artefact": ("artefact", "residual_stream_paper"),
    "share_edge": ("edge_position", "residual_stream_bidirectional"),
}
SHARES = tuple(SHARE_OF)


#: Paper 2's two components on each mapping: mapping -> (causal-mask component, residual-stream
#: component, the causal-mask share).
MAPPINGS = {
    "ablation": ("causal_mask", "mask_free", "share_causal_mask_ablation"),
    "mechanism": ("direct_mask", "logit", "share_causal_mask_mechanism"),
}

#: The controls' components in the same unit, each a combination of the numerators and the
#: controls' own ("ctrl": a position-free run's logits; "win": identity RoPE on paper 2's
#: ablation): the residual-stream reading of a position-free run of the same summary, the paired
#: difference of the condition's residual-stream component to it, and the logit reading of
#: identity RoPE on paper 2's ablation where the model's windows mask something (their edges').
CONTROL_COMBINATIONS: dict[str, dict[str, float]] = {
    "control_residual_stream": {"ctrl": 1.0},
    "residual_minus_control": {"r_logit": 1.0, "ctrl": -1.0},
    "window_edges": {"win": 1.0},
}
CONTROL_COMPONENTS = tuple(CONTROL_COMBINATIONS)


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


def relative_logattn(mu: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The log-attention (..., T, T) that exactly relative logits (:func:`toeplitz` of ``mu``)
    give under a softmax over the ``allowed`` keys: what :func:`artefact_of` reads."""
    return log_softmax_rows(toeplitz(mu, allowed), allowed)


def artefact_of(rel: np.ndarray, mask: np.ndarray, design: Design) -> np.ndarray:
    """(...) ‖P_Δ rel‖² on the measured pairs ``mask`` of :func:`relative_logattn`'s maps."""
    lead = rel.shape[:-2]
    st = stats_from_maps(rel.reshape((-1,) + rel.shape[-2:])[:, None], mask)  # n=K, maps (1,)
    g = numerator_grams(st, design)  # (1, K, K): a map's own square is its diagonal
    return np.diagonal(g[0]).reshape(lead).copy()


def combine(parts: dict[str, np.ndarray], coefficients: dict[str, float]) -> np.ndarray:
    """Σ coefficient × part (arrays of one shape: numerators, or their Grams)."""
    return sum(c * np.asarray(parts[k], dtype=np.float64) for k, c in coefficients.items())


def shares(comp: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:data:`SHARES` from components (any common unit: the denominator cancels)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return {k: comp[num] / comp[den] for k, (num, den) in SHARE_OF.items()}
