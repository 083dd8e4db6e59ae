"""Paper 2's decomposition (§3) on the headline reading, in one unit, without the softmax's edge
artefact.

**One unit.** Every component is a ΔSS of an expected map, ‖P_Δ μ‖² (estimated without the content
term by the U-statistic N̂ / (n(n − 1)) of :mod:`causalpos.paper2.expected`), divided by *one*
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

import numpy as np

from causalpos.paper2 import expected as X
from causalpos.paper2.design import Design

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


def difference_stats(a: X.PromptStats, b: X.PromptStats) -> X.PromptStats:
    """The linear statistics of the maps a − b (same prompts, same pairs): offset, row and key-0
    sums subtract; the SSTs are not linear and are left NaN (a numerator needs none)."""
    nan = np.full_like(np.asarray(a.sst, dtype=np.float64), np.nan)
    return X.PromptStats(
        off=a.off - b.off,
        rows=a.rows - b.rows,
        key0=a.key0 - b.key0,
        sst=nan,
        sst_sum=np.full_like(np.asarray(a.sst_sum, dtype=np.float64), np.nan),
    )


def numerator_gram(st: X.PromptStats, design: Design) -> np.ndarray:
    """G_pq = y_pᵀ P_Δ y_q (..., n, n) of the maps behind ``st``: the pair-resolved terms of N̂."""
    return X.numerator_grams(st, design)


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
        design: the fit's :class:`~causalpos.paper2.design.Design` on ``mask``.

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
    st = X.stats_from_maps(rel.reshape((-1,) + rel.shape[-2:])[:, None], mask)  # n=K, maps (1,)
    g = numerator_gram(st, design)  # (1, K, K): a map's own square is its diagonal
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
