"""Cross-check of paper 2's headline leakage against an independent expected-map computation.

    python benchmarks/headline_crosscheck.py RESULTS [--model smollm2-135m]
        [--dataset kjv-chunks128-bos] [--model-dir resources/models/smollm2-135m]

The headline (``causalpos.paper2.summary.headline``) is the ΔR² of the expected (prompt-mean) map by
U-statistics over prompt pairs, from per-prompt sums reduced in extraction. This script computes the
same estimand another way, sharing none of that code: it splits the prompts into two disjoint halves
A, B (alternate prompts, so every book is in both), runs the model on each half for the causal and
the bidirectional pass, keeps only each half's *mean* maps, and forms the cross-fitted ratio

    ρ_split = Σ ⟨P_Δ m_A, P_Δ m_B⟩ / Σ ⟨C m_A, C m_B⟩       (sums over layers and heads)

with P_Δ = P_F − P_B from explicit dense design matrices (offsets, key-0 column; + query rows) and
orthonormal bases by eigendecomposition in float64. E⟨P m_A, P m_B⟩ = ‖P μ‖² (independent halves),
so ρ_split has no content term, like the headline; it uses half of the prompt pairs, so it is
noisier. Printed: the headline (from ``RESULTS/stats/paper2_decomposition.csv``) and the
split-half values of total (causal), residual (bidirectional), causal-mask component and share, on
log-attention and logits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from causalpos.capture.settings import CaptureRun

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def bases(mask: np.ndarray):
    """Orthonormal bases of the baseline (offsets + key-0 column) and the full design (+ query
    rows) on the pairs of ``mask``, and the pair indices."""
    T = mask.shape[0]
    i, j = np.nonzero(mask)
    xb = np.hstack([np.eye(T)[i - j], (j == 0)[:, None] * 1.0])
    xf = np.hstack([xb, np.eye(T)[i]])

    def ortho(a):
        w, v = np.linalg.eigh(a.T @ a)
        keep = w > 1e-10 * w[-1]
        return a @ v[:, keep] / np.sqrt(w[keep])

    return ortho(xb), ortho(xf), (i, j)


def split_ratio(ma: np.ndarray, mb: np.ndarray, mask: np.ndarray) -> float:
    """Σ⟨P_Δ m_A, P_Δ m_B⟩ / Σ⟨C m_A, C m_B⟩ over maps (..., T, T)."""
    qb, qf, (i, j) = bases(mask)
    a = ma[..., i, j].reshape(-1, i.size).T  # (pairs, maps)
    b = mb[..., i, j].reshape(-1, i.size).T
    ca, cb = a - a.mean(0), b - b.mean(0)
    num = ((qf.T @ a) * (qf.T @ b)).sum() - ((qb.T @ a) * (qb.T @ b)).sum()
    return float(num / (ca * cb).sum())


def half_maps(model, tokens, variant: str) -> dict[str, np.ndarray]:
    """Mean logit and log-attention maps (layer, head, T, T) of ``tokens`` under ``variant``."""
    from causalpos.capture.hook import capture_scores
    from causalpos.paper2.estimator.storeview import map_sums
    from causalpos.paper2.extraction.reducers import LeakageReducer

    red = LeakageReducer(fits=("saturated+query",), windows=("all",), mean_maps=True)
    ds = capture_scores(
        model, tokens, CaptureRun(variant, 8, seed=0, progress=False), reducers=[red]
    )
    n = float(ds["leak_map_count"])
    return {t: map_sums(ds, t) / n for t in ("logit", "logattn")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dataset", default="kjv-chunks128-bos")
    p.add_argument("--model-dir", type=Path, default=None)
    a = p.parse_args(argv)
    import pandas as pd

    from causalpos.io.store import open_dataset
    from causalpos.models.load import load_model

    root = a.results.resolve().parent
    model_dir = a.model_dir or root / "resources" / "models" / a.model
    model, _ = load_model(str(model_dir), device="cpu", dtype="float32")
    data = open_dataset(a.results / "data" / a.dataset / f"{a.model}.zarr")
    tokens = np.asarray(data["tokens"].values)
    halves = (tokens[0::2], tokens[1::2])
    maps = {v: [half_maps(model, h, v) for h in halves] for v in ("causal", "bidirectional")}
    T = tokens.shape[1]
    mask = np.tril(np.ones((T, T), bool))
    mask[0] = False
    dec = pd.read_csv(a.results / "stats" / "paper2_decomposition.csv")
    dec = dec[(dec.model == a.model) & (dec.dataset == a.dataset) & (dec.condition == "rope")]
    print(
        f"{a.model} on {a.dataset}: {tokens.shape[0]} prompts, T = {T}; halves of "
        f"{len(halves[0])} and {len(halves[1])}"
    )
    print("| target | reading | total | residual | causal mask | causal-mask share |")
    print("|---|---|---|---|---|---|")
    for t in ("logattn", "logit"):
        tot = split_ratio(maps["causal"][0][t], maps["causal"][1][t], mask)
        res = split_ratio(maps["bidirectional"][0][t], maps["bidirectional"][1][t], mask)
        r = dec[(dec.target == t) & (dec.window == "all")]
        if len(r):
            r = r.iloc[0]
            cell = lambda k, r=r: f"{r[k]:.3f} [{r[k + '_lo']:.3f}, {r[k + '_hi']:.3f}]"  # noqa: E731
            print(
                f"| {t} | headline (U-statistic) | {cell('total')} | {cell('residual')} | "
                f"{cell('causal_mask')} | {cell('share_causal_mask')} |"
            )
        print(
            f"| {t} | split half (dense) | {tot:.3f} | {res:.3f} | {tot - res:.3f} | "
            f"{(tot - res) / tot:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
