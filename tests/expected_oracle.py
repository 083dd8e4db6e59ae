"""An oracle of the headline estimator for the tests: the leakage of one window and target of a
leakage store as a Dataset of named variables, under the percentile bootstrap (what the library
computed before the summary's calibrated intervals; the tests compare it with closed forms and
with the summary's own readings), and that bootstrap on a Gram (:func:`estimate_bootstrap`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from causalpos.paper2 import inference as inf
from causalpos.paper2.estimator.expected import u_statistics
from causalpos.paper2.estimator.replicates import quadratic_form
from causalpos.paper2.estimator.storeview import store_grams


def sign_flip_pvalues(num_gram: np.ndarray, n_flips: int = 2000, seed: int = 0) -> np.ndarray:
    """Per-map p-values of H0: P_Δ μ = 0 by random sign flips of the prompts' c-vectors (the
    percentile bootstrap's own test; the calibrated intervals use
    :func:`causalpos.paper2.inference.sign_flip_pvalue` on their multipliers). Statistic N̂ = Σ_{p≠q} c_pᵀM⁺c_q; p = (1 + #{flips with N(ε) ≥ N̂}) /
    (1 + n_flips)."""
    n = num_gram.shape[-1]
    eps = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_flips, n))
    obs = quadratic_form(num_gram, np.ones((1, n)))[0]
    flips = quadratic_form(num_gram, eps)
    return (1.0 + (flips >= obs - 1e-12 * np.abs(obs)).sum(0)) / (1.0 + n_flips)


def estimate_bootstrap(
    grams: dict[str, np.ndarray],
    counts: np.ndarray,
    *,
    level: float = 0.95,
    n_flips: int = 2000,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """:func:`causalpos.paper2.estimator.expected.estimate`'s readings under the percentile bootstrap: prompt multiplicities
    ``counts`` (B, n) (e.g. :func:`causalpos.stats.bootstrap_counts`), each level's ratio from
    the summed N and D of its maps, percentile intervals of the replicates, and per-head p-values
    from ``n_flips`` sign flips of their own (seeded by ``seed`` + 1; 0 flips: p = 1). The keys
    of :func:`causalpos.paper2.estimator.expected.estimate` but ``num_parts_layer``."""
    n = grams["sst"].shape[-1]
    if n < 3:
        raise ValueError(f"the expected-map estimator needs at least 3 prompts, got {n}")
    weights = np.concatenate([np.ones((1, n)), np.asarray(counts, dtype=np.float64)])
    u = u_statistics(grams, weights)
    num, den = u["num"], u["den"]  # (1 + B, layer, head)
    out = {}
    for name, (a, b) in {
        "head": (num, den),
        "layer": (num.sum(-1), den.sum(-1)),
        "pooled": (num.sum((-2, -1)), den.sum((-2, -1))),
    }.items():
        r = inf.ratio(a, b)
        out[f"{name}_boot"] = r[1:]
        pairs = u["pairs"].reshape((-1,) + (1,) * (a.ndim - 1))
        out[f"{name}_num_boot"], out[f"{name}_den_boot"] = a[1:] / pairs[1:], b[1:] / pairs[1:]
        out[f"{name}_num"], out[f"{name}_den"], out[name] = (
            a[0] / (n * (n - 1)),
            b[0] / (n * (n - 1)),
            r[0],
        )
        out[f"{name}_lo"], out[f"{name}_hi"] = inf.bounds(r[1:], level)
        a_sst, b_sst = {"head": (num, u["sst"]), "layer": (num.sum(-1), u["sst"].sum(-1))}.get(
            name, (num.sum((-2, -1)), u["sst"].sum((-2, -1)))
        )
        r_sst = inf.ratio(a_sst / pairs, b_sst)
        out[f"{name}_sst"] = r_sst[0]
        out[f"{name}_sst_lo"], out[f"{name}_sst_hi"] = inf.bounds(r_sst[1:], level)
    p = sign_flip_pvalues(grams["num"], n_flips, seed + 1)
    out["p"], out["q"] = p, inf.q_values(p)
    out["resid_share"] = u["den_resid"].sum() / den[0].sum()
    return out


def expected_leakage(
    ds: xr.Dataset,
    *,
    window: str = "all",
    target: str = "logit",
    fit: str = "saturated+query",
    landmark: bool = True,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    alpha: float = 0.05,
) -> xr.Dataset:
    """Headline leakage (ΔR² of the expected map) of one window and target of a leakage store.

    Needs the reducer's ``leak_offsum``, ``leak_key0sum``, ``leak_rowsum``, ``leak_sst``,
    ``leak_map_sum`` and ``leak_logz_sum`` (``LeakageReducer(expected_stats=True,
    mean_maps=True)``), and its attrs
    ``leak_pair_subsample``, ``leak_seed`` for the measured pairs.

    Returns ``exp_delta``/``exp_lo``/``exp_hi``/``exp_num``/``exp_den``/``p_value``/``q_value``/
    ``exp_significant`` (layer, head); ``leakage_layer*`` (layer); ``exp_pooled*`` (); and
    ``exp_resid_share`` (), the share of D̂ whose resampling is held at its mean;
    ``exp_den_rounding`` (), a bound on the relative error of the pooled D̂ from the precision of
    ``leak_map_sum`` (the final store keeps the summed logits in float32: ‖C S‖² is then good to
    ≈ 3u‖S‖², storeview.rounding_bound). exp_num and
    exp_den are per prompt pair (N̂, D̂ / (n(n − 1))). ``*_sst``, ``*_sst_lo``, ``*_sst_hi``: the
    companion ρ_SST = N̂/(n(n − 1)) / mean SST_p and its CI (module docstring).
    """
    grams, rounding = store_grams(ds, window=window, target=target, fit=fit, landmark=landmark)
    n = grams["sst"].shape[-1]
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_boot)
    r = estimate_bootstrap(grams, counts, level=level, seed=seed)
    lh, lay = ("layer", "head"), ("layer",)
    data = {
        f"exp_{k}": (lh, r[f"head_{k}"])
        for k in ("num", "den", "lo", "hi", "sst", "sst_lo", "sst_hi")
    }
    data["exp_delta"] = (lh, r["head"])
    data.update({f"exp_{k}": (lh, r[k]) for k in ("p", "q")})
    data["exp_significant"] = (lh, r["q"] <= alpha)
    data["leakage_layer"] = (lay, r["layer"])
    keys = ("lo", "hi", "num", "den", "sst", "sst_lo", "sst_hi")
    data.update({f"exp_layer_{k}": (lay, r[f"layer_{k}"]) for k in keys})
    data["exp_pooled"] = ((), r["pooled"])
    data.update({f"exp_pooled_{k}": ((), r[f"pooled_{k}"]) for k in keys})
    data["exp_resid_share"] = ((), r["resid_share"])
    n = int(ds.sizes["sequence"])
    data["exp_den_rounding"] = ((), rounding / abs(r["pooled_den"] * n * (n - 1)))
    return xr.Dataset(
        data,
        coords={"layer": ds["layer"].values, "head": ds["head"].values},
        attrs={
            "window": window,
            "exp_target": target,
            "fit": fit,
            "landmark": int(landmark),
            "exp_n_prompts": int(ds.sizes["sequence"]),
            "exp_n_boot": n_boot,
            "exp_level": level,
            "exp_alpha": alpha,
            "exp_note": "headline: U-statistic ratio sum_{p!=q} y_p'P_D y_q / sum_{p!=q} y_p'C y_q "
            "(delta R2 of the expected map); CI: percentile bootstrap over prompts; p: sign flips "
            "of the prompts' c-vectors; q: BH across (layer, head)",
        },
    )


def expected_table(
    ds: xr.Dataset, *, windows=None, targets=("logit", "logattn"), **kw
) -> xr.Dataset:
    """:func:`expected_leakage` for every window (default: the store's) and target, stacked on
    ``window`` and ``exp_target`` (keyword arguments pass through)."""
    windows = list(ds["leak_exp_window"].values) if windows is None else list(windows)
    rows = [
        xr.concat(
            [expected_leakage(ds, window=w, target=t, **kw) for t in targets], dim="exp_target"
        )
        for w in windows
    ]
    out = xr.concat(rows, dim="window", combine_attrs="drop_conflicts")
    for k in ("window", "exp_target"):
        out.attrs.pop(k, None)
    return out.assign_coords(window=windows, exp_target=list(targets))
