"""Paper 2's decomposition (§3) on the headline reading, in one unit, by an ablation whose own
edges create no position: the components (:data:`COMPONENTS`), how each is combined from the runs'
numerator Grams (:data:`COMBINATIONS`), and the softmax's edge artefact. The summary block that
reads them with intervals per condition, landmark reading, window, layer and layer kind is
:func:`causalpos.paper2.summary.decomposition.decomposition_block`.

**One unit.** Every component is a ΔSS of an expected map, ‖P_Δ μ‖² (estimated without the content
term by the U-statistic N̂ / (n(n − 1)) of :mod:`causalpos.paper2.estimator.expected`), divided by *one*
denominator: the causal run's expected log-attention variance ‖C μ_a‖² (D̂ / (n(n − 1))), on the
pairs each layer attends to as trained (its layer kind). So the components add exactly;
subtracting two ΔR² with their own denominators (each run's variance) can flip a component's sign.

**The runs** of a condition (:data:`causalpos.models.variants.DECOMPOSITION_CONDITIONS`): the causal
run c (the model as trained), the ring run r (variant ``ring``: no mask at all — neither the causal
mask nor a sliding window — and RoPE offsets taken cyclically, so the pass creates no position at
the sequence's ends: :mod:`causalpos.capture.ring`) and paper 2's own ablation b (``bidirectional``:
transformers' ``is_causal = False``, a sliding window kept symmetric).

**Three routes** (spec §3), every one a combination of the numerators (:data:`COMBINATIONS`):

- ``total`` — ΔSS of the causal run's log-attention a = s − log Z:
  ``total = mask_free + indirect_mask + direct_mask`` exactly.
- ``direct_mask`` — the causal mask at this layer (its normaliser): N(c_logattn) − N(c_logit),
  split explicitly into ``normaliser`` (ΔSS of the causal run's −log Z_i, its log-attention minus
  its logits) and ``direct_cross`` (c_logattn − c_logit − c_logz: what −log Z_i adds to the
  logits' position, 2⟨P_Δ s, P_Δ(−log Z)⟩).
- ``indirect_mask`` — position the masks wrote into the residual stream in the layers below,
  read by this layer's q·k: N(c_logit) − N(r_logit), split into ``indirect_own`` (the ΔSS of
  the per-prompt difference map d = causal logits − ring logits, numerator ``d_logit``: the two
  runs' per-prompt statistics subtracted, same prompts, same pairs) and ``indirect_cross``
  (c_logit − r_logit − d_logit = 2⟨P_Δ d, P_Δ r⟩).
- ``mask_free`` — ΔSS of the ring run's pre-softmax **logits**: absolute position that reached q
  and k through the residual stream with no mask anywhere and no sequence end (the fixed token
  0's landmark). A logit map that depends only on the offset, f(i − j), has ΔSS exactly 0 under
  the saturated baseline on any pair set; a position-free run (identity RoPE on the ring) reads 0
  exactly, whatever the model's windows. Without a fixed token 0 it reads 0 by symmetry: the
  tables mark it "not applicable" there (the summary's ``token0_fixed``).

**Paper 2's two components on two mappings** (:data:`MAPPINGS`): the *ablation* mapping (paper
2's own) causal-mask = direct + indirect (``causal_mask``), residual-stream = mask-free; the
*mechanism* mapping causal-mask = direct (``direct_mask``), residual-stream = indirect + mask-free
(``logit``, the causal run's logits: the position q·k carry, whatever made it). Shares of the
total: ``share_causal_mask_ablation`` (= ``share_causal_mask``), ``share_causal_mask_mechanism``,
``share_direct_mask``, ``share_indirect_mask``, ``share_mask_free``.

**Aliases** kept for the tables that read them (each the same numerator combination):
``residual_stream`` = ``mask_free``; ``causal_mask`` = ``direct_mask + indirect_mask`` (total −
ring); ``logit`` = ``indirect_mask + mask_free`` (the mechanism mapping's residual stream);
``cross`` = ``direct_cross``; ``remainder`` = ``causal_mask − normaliser`` = ``direct_cross +
indirect_mask``; ``share_causal_mask`` = ``share_causal_mask_ablation``.

**Paper 2's own reading** (bidirectional ablation) and its artefacts:

- ``residual_stream_bidirectional`` — ΔSS of paper 2's ablation's **logits**: the residual-stream
  reading of a pass with ends (and, in a sliding-window model, windows with edges);
  ``edge_position = residual_stream_bidirectional − residual_stream``: the position that pass
  creates by itself at the sequence's ends and its windows' edges (paired: same prompts).
- ``residual_stream_paper`` — ΔSS of paper 2's ablation's **log-attention**: paper 2's own
  (reconstructed) reading. A bidirectional softmax normalises row i over offsets i − T + 1 … i, so
  log Z_i depends on i even for exactly relative logits: this reading carries that edge artefact
  (``artefact``) besides ``edge_position``. ``causal_mask_paper = total − residual_stream_paper``.
- ``artefact`` — the softmax's edge artefact measured: each head's expected ablation logits made
  exactly relative (the mean over each offset's allowed pairs, a Toeplitz map), passed through
  the ablation's own softmax (its allowed keys), and read as ΔSS (:func:`relative_logattn`, :func:`artefact_of`). It
  is a plug-in on the estimated expected map (no CI).
- Controls in the same unit (:data:`CONTROL_COMPONENTS`): ``control_residual_stream``, the logit
  reading of a position-free run (identity RoPE on the ring: exactly position-free), and
  ``residual_minus_control``; ``window_edges``, the logit reading of identity RoPE on paper 2's
  ablation in a model whose windows mask something at this length — position that only the
  windows' edges can have put there.

Other shares: ``share_causal_mask_paper`` (= causal_mask_paper / total), ``share_normaliser =
normaliser / total``, ``share_artefact = artefact / residual_stream_paper``, ``share_edge =
edge_position / residual_stream_bidirectional``.
"""

from __future__ import annotations

import numpy as np

from causalpos.paper2.estimator.pairgrams import numerator_grams, stats_from_maps
from causalpos.paper2.extraction.design import Design

#: The one unit every component is expressed in.
UNIT = "delta SS of the expected map over the causal run's expected log-attention variance"


#: Components in one unit (ΔSS over the causal run's expected log-attention variance).
COMPONENTS = (
    "total",
    "direct_mask",
    "direct_cross",
    "indirect_mask",
    "indirect_own",
    "indirect_cross",
    "mask_free",
    "residual_stream",
    "causal_mask",
    "normaliser",
    "remainder",
    "logit",
    "cross",
    "residual_stream_bidirectional",
    "edge_position",
    "residual_stream_paper",
    "causal_mask_paper",
    "artefact",
)


#: Shares of the total (or, for the artefact, of the paper's residual reading).
SHARES = (
    "share_causal_mask_ablation",
    "share_causal_mask_mechanism",
    "share_direct_mask",
    "share_indirect_mask",
    "share_mask_free",
    "share_causal_mask",
    "share_causal_mask_paper",
    "share_normaliser",
    "share_artefact",
    "share_edge",
)


#: Paper 2's two components on each mapping: mapping -> (causal-mask component, residual-stream
#: component, the causal-mask share).
MAPPINGS = {
    "ablation": ("causal_mask", "mask_free", "share_causal_mask_ablation"),
    "mechanism": ("direct_mask", "logit", "share_causal_mask_mechanism"),
}


#: Components beside :data:`COMPONENTS`: the residual-stream reading of a position-free run of the
#: same summary, in the same unit, the paired difference of the condition's residual-stream
#: component to it, and the logit reading of identity RoPE on paper 2's ablation where the
#: model's windows mask something (their edges' position).
CONTROL_COMPONENTS = ("control_residual_stream", "residual_minus_control", "window_edges")


#: Each control component as a combination of the numerators and the controls' own ("ctrl": a
#: position-free run's logits; "win": identity RoPE on paper 2's ablation).
CONTROL_COMBINATIONS: dict[str, dict[str, float]] = {
    "control_residual_stream": {"ctrl": 1.0},
    "residual_minus_control": {"r_logit": 1.0, "ctrl": -1.0},
    "window_edges": {"win": 1.0},
}


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


#: Each component as a combination of the numerators (ΔSS is linear in the Gram, so a
#: component's own Gram is the same combination of the numerators' Grams).
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


def combine(parts: dict[str, np.ndarray], coefficients: dict[str, float]) -> np.ndarray:
    """Σ coefficient × part (arrays of one shape: numerators, or their Grams)."""
    return sum(c * np.asarray(parts[k], dtype=np.float64) for k, c in coefficients.items())


def shares(comp: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:data:`SHARES` from components (any common unit: the denominator cancels)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "share_causal_mask_ablation": comp["causal_mask"] / comp["total"],
            "share_causal_mask_mechanism": comp["direct_mask"] / comp["total"],
            "share_direct_mask": comp["direct_mask"] / comp["total"],
            "share_indirect_mask": comp["indirect_mask"] / comp["total"],
            "share_mask_free": comp["mask_free"] / comp["total"],
            "share_causal_mask": comp["causal_mask"] / comp["total"],
            "share_causal_mask_paper": comp["causal_mask_paper"] / comp["total"],
            "share_normaliser": comp["normaliser"] / comp["total"],
            "share_artefact": comp["artefact"] / comp["residual_stream_paper"],
            "share_edge": comp["edge_position"] / comp["residual_stream_bidirectional"],
        }
