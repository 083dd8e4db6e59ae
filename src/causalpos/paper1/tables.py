"""Paper 1 tables: the non-relativeness index of simulations and of language models per layer,
and the trained models against their untrained twins (:mod:`causalpos.stages.stats`,
:mod:`causalpos.stages.compare` write them)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

from causalpos.models.twin import INIT_SUFFIX
from causalpos.paper1.compare import group_maps, paired_index_bootstrap
from causalpos.paper1.diagonal import index_ci
from causalpos.paper1.nonrelative import band_ci, minus_first_layer, paired, share_intervals


def llm_index_table(
    stores: dict[tuple[str, str, str], xr.Dataset],
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    first_keys: int = 4,
    twins: Mapping[str, str] | None = None,
):
    """Per (model, dataset, variant, layer) non-relativeness statistics of the head-averaged map.

    ``stores``: (model, dataset, variant) -> merged score store with ``score_group_mean``
    (group, layer, query, key), the raw head-averaged maps of groups of sequences.
    ``twins``: model -> its random-init twin (same architecture, tokenizer, prompts), both among
    the stores; the model's rows then carry the share contrast with the twin.

    Columns: the logit-unit index (bootstrap over groups, :func:`causalpos.paper1.diagonal.
    index_ci`: ``index``, ``index_debiased``, ``noise_floor``, ``index_over_floor``, ``ci_lo``,
    ``ci_hi``, ``se``); the scale-free non-relative share with its jackknife CI (``share``,
    ``share_lo``, ``share_hi``) and its paired difference from layer 1 (``share_minus_l1*``, NaN on
    layer 1); the share pooled over the model's layers (``share_pooled*``, the same on every row
    of the model); the first-keys band, keys 1..``first_keys`` (``band_keys``), sink column excluded
    before normalizing (``band``, ``band_lo``, ``band_hi``) and with it
    (``band_with_sink*``), logit units, signed (:mod:`causalpos.paper1.nonrelative`); with a twin:
    ``twin``, ``share_minus_twin*`` per layer and ``share_pooled_minus_twin*`` (pooled over
    layers, the same on every row of the model); ``n_groups``, ``n_sequences``.
    """
    twins = dict(twins or {})
    maps, shares = {}, {}
    for key, ds in stores.items():
        model, dataset, variant = key
        maps[key] = group_maps(ds, f"{model}/{dataset}/{variant}")
        shares[key] = share_intervals(maps[key], level=confidence)  # (per layer, pooled)
    rows = []
    for key, ds in stores.items():
        model, dataset, variant = key
        g = maps[key]
        ci = index_ci(g, level=confidence, n_boot=n_boot, seed=seed)
        sh, pooled = shares[key]
        band = band_ci(g, first_keys, level=confidence)
        band_sink = band_ci(g, first_keys, exclude_sink=False, level=confidence)
        l1 = minus_first_layer(sh)
        twin = twins.get(model)
        tkey = (twin, dataset, variant)
        vs_twin = pooled_vs_twin = None
        if twin is not None and tkey in stores:
            _check_same_groups(ds, stores[tkey], "/".join(key), "/".join(tkey))
            vs_twin = paired(sh, shares[tkey][0])
            pooled_vs_twin = paired(pooled, shares[tkey][1])
        for layer in range(g.shape[1]):
            row = {
                "model": model,
                "dataset": dataset,
                "variant": variant,
                "layer": layer + 1,
                "index": float(ci.estimate[layer]),
                "index_debiased": float(ci.debiased[layer]),
                "noise_floor": float(ci.noise_floor[layer]),
                "index_over_floor": float(ci.estimate[layer] / ci.noise_floor[layer])
                if ci.noise_floor[layer] > 0
                else math.nan,
                "ci_lo": float(ci.lo[layer]),
                "ci_hi": float(ci.hi[layer]),
                "se": float(ci.se[layer]),
                "share": float(sh.estimate[layer]),
                "share_lo": float(sh.lo[layer]),
                "share_hi": float(sh.hi[layer]),
                **_triple("share_minus_l1", l1, layer, skip=layer == 0),
                **_triple("share_pooled", (pooled.estimate, pooled.lo, pooled.hi), None),
                "band_keys": int(first_keys),
                "band": float(band.estimate[layer]),
                "band_lo": float(band.lo[layer]),
                "band_hi": float(band.hi[layer]),
                "band_with_sink": float(band_sink.estimate[layer]),
                "band_with_sink_lo": float(band_sink.lo[layer]),
                "band_with_sink_hi": float(band_sink.hi[layer]),
            }
            if vs_twin is not None:
                row["twin"] = twin
                row.update(_triple("share_minus_twin", vs_twin, layer))
                row.update(_triple("share_pooled_minus_twin", pooled_vs_twin, None))
            row["n_groups"] = int(ci.n_groups)
            row["n_sequences"] = int(ds.attrs.get("n_sequences", -1))
            rows.append(row)
    return pd.DataFrame(rows)


def _triple(name: str, est_lo_hi, layer: int | None, skip: bool = False) -> dict[str, float]:
    """``{name, name_lo, name_hi}`` of one layer (or of a scalar contrast: ``layer`` None)."""
    if skip:
        return {name: math.nan, f"{name}_lo": math.nan, f"{name}_hi": math.nan}
    vals = [np.asarray(x) for x in est_lo_hi]
    vals = [float(v if layer is None else v[layer]) for v in vals]
    return dict(zip((name, f"{name}_lo", f"{name}_hi"), vals))


def _check_same_groups(a: xr.Dataset, b: xr.Dataset, la: str, lb: str) -> None:
    """A paired contrast needs the two stores to hold the same groups of the same sequences."""
    na, nb = a.sizes.get("group"), b.sizes.get("group")
    same = na == nb and a.attrs.get("n_sequences") == b.attrs.get("n_sequences")
    if same and "group" in a.coords and "group" in b.coords:
        same = np.array_equal(a["group"].values, b["group"].values)
    if not same:
        raise ValueError(
            f"{la} and its twin {lb} do not hold the same groups of sequences ({na} vs {nb} groups); "
            "a twin must be extracted on the same dataset with the same extract.n_groups"
        )


def simulation_index_table(
    stores: Mapping[str, xr.Dataset], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Per-layer non-relativeness index of simulation stores, one row per (setting, layer).

    ``stores``: mapping setting name → simulation dataset with ``score_group`` (group, layer,
    query, key) (:func:`causalpos.paper1.simulate.run_simulation`). Returns a pandas DataFrame with columns
    ``setting``, the setting's ``alpha``, ``norm``, ``scaling``, ``rope``, ``causal``,
    ``residual``, ``layer`` (numbered as in the paper: 1 = first layer), ``index`` (of the
    grand-mean map), ``ci_lo``, ``ci_hi`` (noise-corrected bootstrap over groups at ``confidence``,
    a CI for the noise-free index; :func:`index_ci`),
    ``se`` (bootstrap sd), ``noise_floor``, ``index_over_floor`` (≈ 1: no detectable
    non-relative signal), ``index_debiased``, ``n_groups``, ``n_samples``.
    """
    rows = []
    for name, ds in stores.items():
        if "score_group" not in ds:
            raise ValueError(
                f"simulation_index_table: store {name!r} has no 'score_group'; rerun the "
                f"simulation with n_groups >= 2"
            )
        gm = ds["score_group"].transpose("group", "layer", "query", "key").values
        ci = index_ci(gm, level=confidence, n_boot=n_boot, seed=seed)
        a = ds.attrs
        for k, layer in enumerate(ds["layer"].values):
            rows.append(
                {
                    "setting": name,
                    "alpha": a.get("alpha"),
                    "norm": a.get("norm"),
                    "scaling": a.get("scaling"),
                    "rope": a.get("rope"),
                    "causal": a.get("causal"),
                    "residual": a.get("residual"),
                    "layer": int(layer) + 1,
                    "index": float(ci.estimate[k]),
                    "ci_lo": float(ci.lo[k]),
                    "ci_hi": float(ci.hi[k]),
                    "se": float(ci.se[k]),
                    "noise_floor": float(ci.noise_floor[k]),
                    "index_over_floor": (
                        float(ci.estimate[k] / ci.noise_floor[k])
                        if ci.noise_floor[k] > 0
                        else float("nan")
                    ),
                    "index_debiased": float(ci.debiased[k]),
                    "n_groups": ci.n_groups,
                    "n_samples": a.get("n_samples"),
                }
            )
    return pd.DataFrame(rows)


def _check_same_prompts(a: xr.Dataset, b: xr.Dataset, la: str, lb: str) -> None:
    for key in ("dataset_name", "n_sequences"):
        if key in a.attrs and key in b.attrs and a.attrs[key] != b.attrs[key]:
            raise ValueError(
                f"{la} and {lb} were not extracted on the same prompts ({key}: "
                f"{a.attrs[key]!r} vs {b.attrs[key]!r}); a paired comparison needs the same groups"
            )
    if (
        "group" in a.coords
        and "group" in b.coords
        and not np.array_equal(a["group"].values, b["group"].values)
    ):
        raise ValueError(f"{la} and {lb} have different groups of sequences")


def _leakage_decomposition(summary: xr.Dataset) -> dict[str, float]:
    """Paper 2's total / residual / causal-mask leakage (with CIs) of the model's own positional
    encoding: the causal vs bidirectional pair, condition ``rope`` in the summary (Table 6 names
    the conditions by their rotation; a NoPE model's pair carries the same name)."""
    if "decomposition" not in summary:
        return {}
    conds = [str(c) for c in summary["condition"].values]
    cond = next((c for c in ("rope", "causal") if c in conds), None)
    if cond is None:
        return {}
    dec = summary["decomposition"].sel(condition=cond)
    out = {}
    for comp in ("total", "residual", "causal_mask", "share_causal_mask"):
        est, lo, hi = (float(dec.sel(component=comp, stat=s)) for s in ("estimate", "lo", "hi"))
        out[f"leak_{comp}"], out[f"leak_{comp}_lo"], out[f"leak_{comp}_hi"] = est, lo, hi
    return out


def _named(name: str, est_lo_hi) -> dict[str, float]:
    return dict(zip((name, f"{name}_lo", f"{name}_hi"), (float(x) for x in est_lo_hi)))


def comparison_tables(
    stores: Mapping[str, tuple[xr.Dataset, xr.Dataset | None]],
    *,
    leakage: Mapping[str, xr.Dataset] | None = None,
    leakage_init: Mapping[str, xr.Dataset] | None = None,
    lengthgen=None,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
):
    """The index table (per variant and layer) and the comparison table (per variant).

    Args:
        stores: variant -> (score store of the trained model, score store of its init twin or
            None), causal forward pass, one dataset for all.
        leakage: variant -> paper 2 leakage summary of the trained model on that dataset (optional).
        leakage_init: variant -> the same for its init twin (paper 2's random-init baseline).
        lengthgen: ``results/stats/train_lengthgen.csv`` as a DataFrame (optional).

    Returns ``(index, comparison)`` DataFrames. ``index``: one row per (variant, weights, layer)
    with ``weights`` ∈ {trained, init}, layer 1-indexed, the debiased index with CI and noise
    floor, the scale-free non-relative share (``share*``, jackknife CI,
    :mod:`causalpos.paper1.nonrelative`), and on trained rows the paired difference and ratio to
    the twin (the ratio only where the twin's interval excludes 0) and the paired share difference
    (``share_minus_init*``). ``comparison``: one row per variant: the layer-mean index (trained,
    init, difference, ratio) with CIs, the share pooled over layers (``share_pooled*``,
    ``init_share_pooled*``, ``share_pooled_minus_init*``, paired over groups), paper 2's
    decomposition of the trained model
    (``leak_*``) and of its twin (``init_leak_*``, paper 2's random-init baseline), the held-out
    loss and the loss excess beyond the training length.
    """
    idx_rows, cmp_rows = [], []
    lg = None
    if lengthgen is not None and len(lengthgen):
        lg = lengthgen.set_index("variant")
    for variant, (trained, init) in stores.items():
        g_t = group_maps(trained, f"trained-{variant}")
        if init is not None:
            _check_same_prompts(
                trained, init, f"trained-{variant}", f"trained-{variant}{INIT_SUFFIX}"
            )
            g_i = group_maps(init, f"trained-{variant}{INIT_SUFFIX}")
        else:
            g_i = g_t  # no twin: the contrasts are dropped below
        p = paired_index_bootstrap(g_t, g_i, level=confidence, n_boot=n_boot, seed=seed)
        diff, ratio = p.difference(), p.ratio()
        # the scale-free share next to the logit index: an init model's logits are near 0, so a
        # logit-unit difference grows with the logit scale alone (causalpos.paper1.nonrelative)
        (s_t, p_t), (s_i, p_i) = (share_intervals(x, level=confidence) for x in (g_t, g_i))
        s_diff = paired(s_t, s_i)
        for layer in range(g_t.shape[1]):
            base = {
                "variant": variant,
                "layer": layer + 1,
                "n_groups": g_t.shape[0],
                "n_sequences": int(trained.attrs.get("n_sequences", -1)),
            }
            row = {
                **base,
                "weights": "trained",
                "index": p.estimate_a[layer],
                "ci_lo": p.lo_a[layer],
                "ci_hi": p.hi_a[layer],
                "noise_floor": p.floor_a[layer],
                "share": s_t.estimate[layer],
                "share_lo": s_t.lo[layer],
                "share_hi": s_t.hi[layer],
            }
            if init is not None:
                ok = p.lo_b[layer] > 0  # the twin's index is detected: the ratio is bounded
                row.update(
                    {
                        "minus_init": diff[0][layer],
                        "minus_init_lo": diff[1][layer],
                        "minus_init_hi": diff[2][layer],
                        "over_init": ratio[0][layer] if ok else math.nan,
                        "over_init_lo": ratio[1][layer] if ok else math.nan,
                        "over_init_hi": ratio[2][layer] if ok else math.nan,
                        "share_minus_init": s_diff[0][layer],
                        "share_minus_init_lo": s_diff[1][layer],
                        "share_minus_init_hi": s_diff[2][layer],
                    }
                )
                idx_rows.append(row)
                idx_rows.append(
                    {
                        **base,
                        "weights": "init",
                        "index": p.estimate_b[layer],
                        "ci_lo": p.lo_b[layer],
                        "ci_hi": p.hi_b[layer],
                        "noise_floor": p.floor_b[layer],
                        "share": s_i.estimate[layer],
                        "share_lo": s_i.lo[layer],
                        "share_hi": s_i.hi[layer],
                    }
                )
            else:
                idx_rows.append(row)
        m = p.layer_mean()
        row = {
            "variant": variant,
            "positional": trained.attrs.get("positional", variant),
            "index_mean": m["a"][0],
            "index_mean_lo": m["a"][1],
            "index_mean_hi": m["a"][2],
            **_named("share_pooled", (p_t.estimate, p_t.lo, p_t.hi)),
        }
        if init is not None:
            # A ratio over an index indistinguishable from 0 is unbounded: reported only where the
            # twin's own interval excludes 0 (the difference is always reported).
            amp = m["ratio"] if m["b"][1] > 0 else (math.nan,) * 3
            row.update(
                {
                    "init_index_mean": m["b"][0],
                    "init_index_mean_lo": m["b"][1],
                    "init_index_mean_hi": m["b"][2],
                    "minus_init": m["difference"][0],
                    "minus_init_lo": m["difference"][1],
                    "minus_init_hi": m["difference"][2],
                    "amplification": amp[0],
                    "amplification_lo": amp[1],
                    "amplification_hi": amp[2],
                    **_named("init_share_pooled", (p_i.estimate, p_i.lo, p_i.hi)),
                    **_named("share_pooled_minus_init", paired(p_t, p_i)),
                }
            )
        if leakage and variant in leakage:
            row.update(_leakage_decomposition(leakage[variant]))
        if leakage_init and variant in leakage_init:
            row.update(
                {f"init_{k}": v for k, v in _leakage_decomposition(leakage_init[variant]).items()}
            )
        if lg is not None and variant in lg.index:
            r = lg.loc[variant]
            row.update(
                {
                    "positional": r.get("positional", row["positional"]),
                    "heldout_loss": float(r["final_heldout_loss"]),
                    "excess_beyond_context": float(r["excess_mean"]),
                    "excess_beyond_context_lo": float(r["excess_lo"]),
                    "excess_beyond_context_hi": float(r["excess_hi"]),
                }
            )
        row.update(
            {"confidence": confidence, "n_sequences": int(trained.attrs.get("n_sequences", -1))}
        )
        cmp_rows.append(row)
    return pd.DataFrame(idx_rows), pd.DataFrame(cmp_rows)
