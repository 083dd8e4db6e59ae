"""The headline estimator's inputs (:mod:`causalpos.paper2.estimator.expected`), in numpy: every
prompt's sufficient statistics of a map (:class:`PromptStats`) and the pair-resolved Grams of the
U-statistics built from them (:func:`prompt_grams`): the design's quadratic forms of every
prompt's c-vector (y_pᵀ P_Δ y_q = c_pᵀ M⁺ c_q, :func:`causalpos.paper2.extraction.metric.c_vector`)
and of its baseline sums, on the design's :func:`support`.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from causalpos.paper2.extraction.design import Design
from causalpos.paper2.extraction.metric import c_vector


@dataclass(frozen=True)
class PromptStats:
    """Per-prompt sufficient statistics of one window; prompt axis first, maps ``(...)``.

    Sums are of each map centred by any per-map constant (the estimator is invariant to it).
    """

    off: np.ndarray  # (n, ..., T) per-offset sums over the window's pairs
    rows: np.ndarray  # (n, ..., T) per-query-row sums (0 outside the window)
    key0: np.ndarray  # (n, ...) sum over the window's key-0 pairs
    sst: np.ndarray  # (n, ...) ‖C y_p‖²
    sst_sum: np.ndarray  # (...) ‖C S‖², S = Σ_p y_p


def stats_from_maps(y, mask: np.ndarray) -> PromptStats:
    """:class:`PromptStats` of maps ``y`` (n, ..., T, T) on the pairs ``mask`` ((T, T) bool)."""
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(mask, dtype=bool)
    n_pairs = int(w.sum())
    sums = _pair_sums(y, w, n_pairs)
    ssum = _pair_sums(y.sum(0), w, n_pairs)
    return PromptStats(
        off=sums["off"],
        rows=sums["rows"],
        key0=sums["key0"],
        sst=sums["Q"] - sums["S"] ** 2 / n_pairs,
        sst_sum=ssum["Q"] - ssum["S"] ** 2 / n_pairs,
    )


def _pair_sums(y: np.ndarray, w: np.ndarray, n_pairs: int) -> dict[str, np.ndarray]:
    """Per-offset sums of maps ``y`` (..., T, T) centred by their mean over the pairs ``w`` and of
    their squares (``off``, ``off2``), per-row sums (``rows``), the key-0 column's sum
    (``key0``) and the totals ``S``, ``Q``: the sums
    :func:`causalpos.paper2.extraction.metric.fit_sums` reads, over every row, by a
    diagonals-as-columns view (the maps padded to (T, 2T), a strided view whose rows are
    their diagonals; flat index i·2T + T + i − d stays inside row i)."""
    T = y.shape[-1]
    lead = y.shape[:-2]
    flat = y.reshape(-1, T, T)
    mean = np.where(w, flat, 0.0).sum((-2, -1)) / n_pairs
    pad = np.zeros((flat.shape[0], T, 2 * T))
    yz = pad[..., T:]
    np.subtract(flat, mean[:, None, None], out=yz)
    yz[:, ~w] = 0.0
    out = {"rows": yz.sum(-1), "key0": yz[..., 0].sum(-1)}
    for k, p in (("off", pad), ("off2", pad * pad)):
        # V[m, i, e] = map[m, i, i − (T − 1 − e)], 0 where that key is < 0 (the padding)
        view = np.lib.stride_tricks.as_strided(
            p.reshape(-1)[1:],
            shape=(p.shape[0], T, T),
            strides=(2 * T * T * p.itemsize, (2 * T + 1) * p.itemsize, p.itemsize),
            writeable=False,
        )
        out[k] = view.sum(-2)[:, ::-1]
    out = {k: v.reshape(lead + v.shape[1:]) for k, v in out.items()}
    out["S"], out["Q"] = out["off"].sum(-1), out["off2"].sum(-1)
    return out


def prompt_grams(st: PromptStats, design: Design) -> dict[str, np.ndarray]:
    """Pair-resolved terms of the U-statistics, prompt axes last.

    Returns ``num`` (..., n, n) y_pᵀ P_Δ y_q; ``low`` (..., n, n) ⟨C P_F y_p, C P_F y_q⟩;
    ``sst`` (..., n); ``sst_sum`` (...).
    """
    c, u, s, sub = _c_vectors(st, design)
    num = _gram(c, sub.m_pinv)
    s = np.moveaxis(s, 0, -1)  # (..., n)
    low = _gram(u, sub.gx_pinv) - s[..., :, None] * s[..., None, :] / float(design.n_pairs)
    return {
        "num": num,
        "low": low + num,
        "sst": np.moveaxis(np.asarray(st.sst, dtype=np.float64), 0, -1),
        "sst_sum": np.asarray(st.sst_sum, dtype=np.float64),
    }


def numerator_grams(st: PromptStats, design: Design) -> np.ndarray:
    """:func:`prompt_grams`' ``num`` alone (..., n, n): y_pᵀ P_Δ y_q (no SST is read)."""
    c, _, _, sub = _c_vectors(st, design)
    return _gram(c, sub.m_pinv)


def _c_vectors(
    st: PromptStats, design: Design
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Design]:
    """(c, u, S, support) of every prompt's map, prompt axis first: the residualized
    absolute-effect vectors (n, ..., q') and the baseline sums (n, ..., p') of
    :func:`~causalpos.paper2.extraction.metric.c_vector` on the design's :func:`support`, the
    pair sums S (n, ...), and that support."""
    if design.absolute != "query":
        raise ValueError(
            f"the expected-map estimator supports query-effect fits ('saturated+query', "
            f"'linear+query'); got absolute effects {design.absolute!r}: key effects need "
            "per-prompt key sums, which the reducer does not store"
        )
    sub, rows_at, offs_at = support(design)
    off = np.asarray(st.off, dtype=np.float64)  # (n, ..., T)
    lead = off.shape[:-1]
    off = off.reshape(-1, off.shape[-1])
    # only the landmark column reads key sums: key 0's, as the one column of "cols"
    pick = lambda a, at: a[:, at] if isinstance(at, slice) else np.take(a, at, axis=1)  # noqa: E731
    sums = {
        "off": off if offs_at is None else pick(off, offs_at),
        "rows": pick(np.asarray(st.rows, dtype=np.float64).reshape(off.shape), rows_at),
        "cols": np.asarray(st.key0, dtype=np.float64).reshape(-1, 1),
        "S": off.sum(-1),
    }
    c, u = c_vector(sums, sub)
    back = lambda a: a.reshape(lead + a.shape[1:])  # noqa: E731
    return back(c), back(u), back(sums["S"]), sub


@functools.lru_cache(maxsize=256)  # designs hash by identity (eq=False)
def support(design: Design) -> tuple[Design, slice | np.ndarray, slice | np.ndarray | None]:
    """The query-effect ``design`` on the query rows and baseline columns that hold measured
    pairs (cached per design): (the design with ``b``, ``m_pinv`` and ``gx_pinv`` restricted to
    them, the rows kept, the offsets kept (saturated baseline; None for the linear one)), each
    a slice where it is a range.

    A row without a pair (outside the query window, row 0) has a zero query sum and a zero row
    of b (G_ZX's row is 0), so its c-vector entry is exactly 0; an offset without a pair has a
    zero baseline sum. The products left out are products with an exact 0 (of M⁺, G_X⁺ and b,
    themselves 0 there up to the rounding of the pseudo-inverse): the Grams are the whole
    design's up to the order of the additions, and an early window's cost a fraction of the
    whole triangle's."""
    rows_at = np.flatnonzero(design.mask.any(1))
    cols = np.arange(design.b.shape[1])
    offs_at = None
    if design.baseline == "saturated":
        offs_at = np.flatnonzero(design.n_offset > 0)
        cols = np.concatenate([offs_at, cols[design.seq_len :]])  # and the landmark's
    sub = dataclasses.replace(
        design,
        b=design.b[np.ix_(rows_at, cols)],
        m_pinv=design.m_pinv[np.ix_(rows_at, rows_at)],
        gx_pinv=design.gx_pinv[np.ix_(cols, cols)],
        _torch={},
    )
    return sub, _as_slice(rows_at), None if offs_at is None else _as_slice(offs_at)


def _as_slice(at: np.ndarray) -> slice | np.ndarray:
    """``at`` (sorted indices) as a slice where they are a range (a window's rows, its offsets
    0..k: a view of the sums, in their own C order), else as they are."""
    if at.size and at[-1] - at[0] + 1 == at.size:
        return slice(int(at[0]), int(at[-1]) + 1)
    return at


def _gram(c: np.ndarray, m: np.ndarray) -> np.ndarray:
    """c_pᵀ m c_q (..., n, n) for the vectors c (n, ..., k), prompt axis first: c m as one
    matrix product over every prompt and map, then one (n, k) × (k, n) product per map."""
    cm = (c.reshape(-1, c.shape[-1]) @ m).reshape(c.shape[:-1] + m.shape[-1:])
    return np.moveaxis(cm, 0, -2) @ np.moveaxis(c, 0, -1)  # strided views: BLAS reads them


def plant_query_effect(st: PromptStats, mask: np.ndarray, b: np.ndarray) -> PromptStats:
    """The statistics of the maps y_p + b (b_i added to every measured pair of query row i, the
    same b for every prompt and map): exact, by linearity of the sums, with
    ‖C(y + b)‖² = ‖Cy‖² + 2⟨y, Cb⟩ + ‖Cb‖² and ⟨y, Cb⟩ = Σ_i rows_i (b_i − b̄) (b̄ the pair-mean
    of b; the sums' centring constant cancels). The positive control: a planted absolute-position
    effect of known size."""
    b = np.asarray(b, dtype=np.float64)
    T = mask.shape[0]
    if b.shape != (T,):
        raise ValueError(f"plant: b must have shape ({T},), got {b.shape}")
    bmap = np.where(mask, b[:, None], 0.0)
    ps = stats_from_maps(bmap[None], mask)
    n_i = mask.sum(1).astype(np.float64)
    bc = b - (n_i * b).sum() / n_i.sum()
    cross = (st.rows * bc).sum(-1)  # (n, ...) ⟨y_p, Cb⟩
    cb2 = float((n_i * bc**2).sum())
    n = st.sst.shape[0]
    return PromptStats(
        off=st.off + ps.off[0],
        rows=st.rows + ps.rows[0],
        key0=st.key0 + ps.key0[0],
        sst=st.sst + 2 * cross + cb2,
        sst_sum=st.sst_sum + 2 * n * cross.sum(0) + n * n * cb2,
    )


def difference_stats(a: PromptStats, b: PromptStats) -> PromptStats:
    """The linear statistics of the maps a − b (same prompts, same pairs): offset, row and key-0
    sums subtract; the SSTs are not linear and are left NaN (a numerator needs none)."""
    return PromptStats(
        off=a.off - b.off,
        rows=a.rows - b.rows,
        key0=a.key0 - b.key0,
        sst=np.full_like(np.asarray(a.sst, dtype=np.float64), np.nan),
        sst_sum=np.full_like(np.asarray(a.sst_sum, dtype=np.float64), np.nan),
    )
