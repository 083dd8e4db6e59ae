"""Small synthetic inputs of every figure function, built in milliseconds: paper 2 summaries with
the variables the figures read (not the estimator's output: the numbers are chosen, so a test
knows what each panel must show), simulation and normalized score stores, position-0
trajectories and the tables and stores of the models trained here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.figures.paper2_layers import CURVES

STAT = ["estimate", "lo", "hi"]
RUNS = ["causal", "bidirectional", "identity_rope+ring"]
TARGETS = ["logit", "logattn"]
LANDMARKS = ["modelled", "counted"]
#: §3's three routes (the causal mask split into its direct and indirect parts; the mask-free
#: route is the residual stream) and their shares, after the layer figure's curves.
ROUTES = ["direct_mask", "indirect_mask", "mask_free"]
ROUTE_SHARES = ["share_direct_mask", "share_indirect_mask", "share_mask_free"]
COMPONENTS = [
    *CURVES,
    "share_causal_mask",
    "share_causal_mask_paper",
    *ROUTES,
    *ROUTE_SHARES,
    "share_causal_mask_ablation",
]

#: Display names of the synthetic models and dataset, as the config hands them to the figures.
NAMES = {
    "smollm2-135m": "SmolLM2-135M-Instruct (Q4_1)",
    "smollm2-135m-random": "SmolLM2-135M-Instruct, random init",
    "gemma3-270m": "Gemma-3 270M (Q4_K_M)",
    "kjv-chunks640-bos": "KJV Bible, 640-token chunks (BOS)",
    "kjv-first256": "KJV Bible, first 256 tokens (BOS)",
}


def _with_ci(est: np.ndarray, half: float | np.ndarray) -> np.ndarray:
    """``(..., 3)``: estimate, lo, hi."""
    est = np.asarray(est, dtype=np.float64)
    return np.stack([est, est - half, est + half], axis=-1)


def summary(
    n_layers: int = 6,
    *,
    kinds: list[str] | None = None,
    paper_residual: float = 3.0,
    counted_offset: float = 0.0,
    heads: int = 4,
    seed: int = 0,
) -> xr.Dataset:
    """A leakage summary as the figures read it. Per layer (log-attention unit): total 0.02 ×
    (1 + layer), the residual stream a third of it, the causal mask the rest, the normaliser a
    tenth, the position-free control 0.001 and window edges 0.002 (half-widths 0.004); paper
    2's residual-stream reading ``paper_residual`` and the edge artefact 0.9 of it (Gemma's:
    ~3 over a total near 0.1). §3's routes: direct 0.4 of the total, indirect the causal mask's
    rest, mask-free the residual stream; their shares those fractions. The counted key-0 column reads the modelled one plus
    ``counted_offset``. Claim 1: the causal run 0.01 × (1 + layer), the bidirectional run half
    of it, the position-free run's control 0.0005 [−0.001, 0.002]."""
    rng = np.random.default_rng(seed)
    layers = np.arange(n_layers)
    total = 0.02 * (1 + layers)
    comp = {
        "total": total,
        "residual_stream": total / 3,
        "causal_mask": total * 2 / 3,
        "normaliser": total / 10,
        "residual_stream_paper": np.full(n_layers, paper_residual),
        "artefact": np.full(n_layers, 0.9 * paper_residual),
        "control_residual_stream": np.full(n_layers, 0.001),
        "window_edges": np.full(n_layers, 0.002),
    }
    per_layer = np.stack([_with_ci(comp[k], 0.004) for k in CURVES], axis=1)  # layer, comp, 3
    per_layer[:, list(CURVES).index("artefact"), 1:] = np.nan  # no CI, as the summary's
    shares = np.stack([_with_ci(0.66, 0.05), _with_ci(0.7, 0.05)])[None].repeat(n_layers, 0)
    routes = np.stack([_with_ci(total * f, 0.004) for f in (0.4, 2 / 3 - 0.4, 1 / 3)], axis=1)
    route_shares = np.stack(
        [_with_ci(np.full(n_layers, f), 0.05) for f in (0.4, 2 / 3 - 0.4, 1 / 3, 2 / 3)], axis=1
    )
    per_layer = np.concatenate([per_layer, shares, routes, route_shares], axis=1)
    by_landmark = np.stack([per_layer, per_layer + counted_offset])  # landmark, layer, comp, 3
    pooled = by_landmark.mean(axis=1)
    claim = 0.01 * (1 + layers)
    runs = np.stack([_with_ci(claim, 0.003), _with_ci(claim / 2, 0.003), _with_ci(claim * 0, 1)])
    control = np.full((len(RUNS), len(LANDMARKS), 3), np.nan)
    control[2] = [0.0005, -0.001, 0.002]
    head_est = rng.normal(0.0, 0.01, (len(RUNS), len(TARGETS), n_layers, heads))
    head_est[0] += 0.05
    ds = xr.Dataset(
        {
            "components_layer": (
                ("condition", "landmark", "window", "layer", "component_full", "stat"),
                by_landmark[None, :, None],
            ),
            "components": (
                ("condition", "landmark", "window", "component_full", "stat"),
                pooled[None, :, None],
            ),
            "leakage_layer": (
                ("variant", "window", "target", "layer", "stat"),
                runs[:, None, None].repeat(2, 2),
            ),
            "leakage_model": (
                ("variant", "window", "target", "stat"),
                runs.mean(axis=1)[:, None, None].repeat(2, 2),
            ),
            "control_units": (
                ("variant", "landmark", "window", "target", "stat"),
                control[:, :, None, None].repeat(2, 3),
            ),
            "position_free": (("variant",), [False, False, True]),
            "leakage_head": (
                ("variant", "window", "target", "layer", "head", "stat"),
                _with_ci(head_est, 0.01)[:, None],
            ),
            "q_value": (
                ("variant", "window", "target", "layer", "head"),
                np.where(head_est > 0.03, 0.01, 0.5)[:, None],
            ),
        },
        coords={
            "condition": ["rope"],
            "landmark": LANDMARKS,
            "window": ["all"],
            "layer": layers,
            "component_full": COMPONENTS,
            "stat": STAT,
            "variant": RUNS,
            "target": TARGETS,
            "head": np.arange(heads),
        },
        attrs={"level": 0.95, "alpha": 0.05, "token0_fixed": 1, "token0_ids": [1]},
    )
    if kinds is not None:
        ds = ds.assign_coords(layer_kind=("layer", list(kinds)))
    return ds


def trajectories(n_layers: int = 4, *, zero_causal: bool = True, seed: int = 0) -> xr.Dataset:
    """A position-0 store with conditions causal (exactly 0 where ``zero_causal``: a fixed BOS)
    and bidirectional (positive spreads)."""
    rng = np.random.default_rng(seed)
    depth = np.arange(n_layers + 1)
    ratio = np.stack([np.zeros(n_layers + 1), 0.1 + 0.05 * rng.random(n_layers + 1)])
    if not zero_causal:
        ratio[0] = 0.01 * (1 + depth)
    return xr.Dataset(
        {"ratio": (("condition", "layer"), ratio), "std": (("condition", "layer"), ratio)},
        coords={"condition": ["causal", "bidirectional"], "layer": depth},
    )


def normalized_store(n_layers: int = 4, T: int = 256, *, scale: float = 1.0, seed: int = 0):
    """A normalized score store (``score_normalized_mean``, ``score_mean_head_avg``) of
    ``n_layers`` causal maps of T positions: a ramp over keys plus noise."""
    rng = np.random.default_rng(seed)
    m = scale * rng.normal(size=(n_layers, T, T)) + np.linspace(0, 1, T)[None, None, :]
    m = np.where(np.tril(np.ones((T, T), bool)), m, np.nan)
    return xr.Dataset(
        {
            "score_normalized_mean": (("layer", "query", "key"), m),
            "score_mean_head_avg": (("layer", "query", "key"), m + 2.0),
        },
        coords={"layer": np.arange(n_layers)},
        attrs={"n_sequences": 64},
    )


VARIANTS = ["rope", "nope", "ntk", "swa"]


def loss_curves() -> dict[str, dict[str, np.ndarray]]:
    steps = np.arange(0, 501, 10.0)
    held = np.where(steps % 50 == 0, 7 * np.exp(-steps / 200) + 3.2, np.nan)
    return {
        v: {"step": steps, "train_loss": 7 * np.exp(-steps / 200) + 3, "heldout_loss": held}
        for v in VARIANTS
    }


def gram_store(T: int = 16, n_layers: int = 4, *, seed: int = 0) -> xr.Dataset:
    """Fig. 3's nine panels and Fig. 8's per-layer scores of one model."""
    rng = np.random.default_rng(seed)
    g = np.where(np.tril(np.ones((T, T), bool)), rng.normal(size=(9, T, T)), np.nan)
    titles = [f"panel {c} of the first layer" for c in "abcdefghi"]
    return xr.Dataset(
        {
            "gram": (("panel", "query", "key"), g),
            "title": (("panel",), titles),
            "score": (("layer", "query", "key"), g[:n_layers]),
        },
        coords={"panel": list("abcdefghi"), "layer": np.arange(n_layers)},
        attrs={"n_samples": 12},
    )


def lengthgen(T: int = 256, context: int = 128) -> xr.Dataset:
    pos = np.arange(T)
    mean = np.vstack([3 + 0.1 * np.log1p(pos) + o for o in (0.0, 0.2)])
    ds = xr.Dataset(
        {
            "nll_mean": (("variant", "position"), mean),
            "nll_lo": (("variant", "position"), mean - 0.1),
            "nll_hi": (("variant", "position"), mean + 0.1),
            "train_context": ("variant", [context, context]),
            "excess_mean": ("variant", [0.3, 0.5]),
            "excess_lo": ("variant", [0.2, 0.4]),
            "excess_hi": ("variant", [0.4, 0.6]),
        },
        coords={"variant": ["rope", "nope"], "position": pos},
        attrs={"confidence": 0.95, "n_sequences": 16},
    )
    return ds


def index_table(n_layers: int = 4) -> pd.DataFrame:
    """The index table: trained 0.3 × layer, twins 100 × smaller; the ratio only from layer 3 on
    (the twin's interval includes 0 below it)."""
    rows = []
    for v in VARIANTS:
        for w in ("trained", "init"):
            for layer in range(1, n_layers + 1):
                x = 0.3 * layer if w == "trained" else 0.003 * layer
                ratio = np.nan if (w == "init" or layer < 3) else 100.0
                rows.append(
                    dict(
                        variant=v,
                        weights=w,
                        layer=layer,
                        index=x,
                        ci_lo=0.8 * x,
                        ci_hi=1.2 * x,
                        noise_floor=0.002,
                        over_init=ratio,
                    )
                )
    return pd.DataFrame(rows)


def comparison_table(*, decomposition: bool = False) -> pd.DataFrame:
    """The comparison table: the index 85 × its twin's, the loss excess, and paper 2's
    decomposition only where ``per_prompt_decomposition`` (the default run has none)."""
    n = len(VARIANTS)
    est = np.array([0.7, 0.5, 0.6, 0.4])
    cols = {
        "variant": VARIANTS,
        "index_mean": est,
        "index_mean_lo": est - 0.1,
        "index_mean_hi": est + 0.1,
        "init_index_mean": est / 85,
        "init_index_mean_lo": est / 100,
        "init_index_mean_hi": est / 70,
        "amplification": np.full(n, 85.0),
        "excess_beyond_context": [0.3, 0.5, 0.1, 0.2],
        "excess_beyond_context_lo": [0.2, 0.4, 0.0, 0.1],
        "excess_beyond_context_hi": [0.4, 0.6, 0.2, 0.3],
        "leak_total": np.full(n, np.nan),
        "leak_residual_stream": np.full(n, np.nan),
        "leak_causal_mask": np.full(n, np.nan),
        "confidence": np.full(n, 0.95),
    }
    if decomposition:
        cols.update(
            leak_total=np.full(n, 0.03),
            leak_total_lo=np.full(n, 0.02),
            leak_total_hi=np.full(n, 0.04),
            leak_residual_stream=np.full(n, 0.01),
            leak_causal_mask=np.full(n, 0.02),
        )
    return pd.DataFrame(cols)


def group_store(T: int = 16, *, scale: float = 1.0, seed: int = 0) -> xr.Dataset:
    """A score store with ``score_group_mean`` (group, layer, query, key)."""
    rng = np.random.default_rng(seed)
    m = scale * rng.normal(size=(4, 4, T, T))
    m = np.where(np.tril(np.ones((T, T), bool)), m, np.nan)
    return xr.Dataset(
        {"score_group_mean": (("group", "layer", "query", "key"), m)},
        coords={"layer": np.arange(4)},
    )
