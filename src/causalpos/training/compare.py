"""The trained variants vs their untrained twins, side by side: paper 1's index (with the paired
difference and ratio to the twin, and the scale-free non-relative share), paper 2's decomposition
of each model and of its twin, and the held-out loss and length generalization of each variant."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import xarray as xr

from causalpos.models.layer_kinds import layer_kinds
from causalpos.paper1.compare import group_maps, paired_index_bootstrap
from causalpos.paper1.diagonal import index_ci, key0_column
from causalpos.paper1.nonrelative import interval_columns, paired, share_intervals
from causalpos.training.twin import INIT_SUFFIX


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


def _decomposition(summary: xr.Dataset) -> dict[str, float]:
    """Paper 2's total / residual / causal-mask leakage (with CIs) of the model's own positional
    encoding: the causal vs bidirectional pair, condition ``rope`` in the summary (Table 6 names
    the conditions by their rotation; a NoPE model's pair carries the same name)."""
    if "per_prompt_decomposition" not in summary:
        return {}
    conds = [str(c) for c in summary["per_prompt_condition"].values]
    cond = next((c for c in ("rope", "causal") if c in conds), None)
    if cond is None:
        return {}
    dec = summary["per_prompt_decomposition"].sel(per_prompt_condition=cond)
    out = {}
    for comp in ("total", "residual_stream", "causal_mask", "share_causal_mask"):
        est, lo, hi = (float(dec.sel(component=comp, stat=s)) for s in ("estimate", "lo", "hi"))
        out[f"leak_{comp}"], out[f"leak_{comp}_lo"], out[f"leak_{comp}_hi"] = est, lo, hi
    return out


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

    ``stores``: variant -> (score store of the trained model, of its init twin or None), causal,
    one dataset for all; ``leakage`` / ``leakage_init``: variant -> paper 2 leakage summary of
    the model / its twin; ``lengthgen``: ``results/stats/train_lengthgen.csv`` as a DataFrame.

    ``index``: one row per (variant, weights ∈ {trained, init}, layer): the debiased index with
    CI and noise floor, the share, and on trained rows the paired difference and ratio to the
    twin (the ratio only where the twin's interval excludes 0). ``comparison``: one row per
    variant: the layer-mean index and the pooled share with their contrasts to the twin, paper
    2's decomposition (``leak_*``, ``init_leak_*``), the held-out loss and the loss excess
    beyond the training length.
    """
    import pandas as pd

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
        # key 0 (the fixed BOS of the training windows) out of the index and the share, its
        # column measured beside them (causalpos.paper1.diagonal, paper 1 §7)
        p = paired_index_bootstrap(g_t, g_i, level=confidence, n_boot=n_boot, seed=seed, key0=False)
        # the scale-free share next to the logit index: an init model's logits are near 0, so a
        # logit-unit difference grows with the logit scale alone (causalpos.paper1.nonrelative)
        shares = tuple(share_intervals(x, level=confidence, key0=False) for x in (g_t, g_i))
        key0 = tuple(
            index_ci(x, level=confidence, n_boot=n_boot, seed=seed, index_values=key0_column(x))
            for x in (g_t, g_i)
        )
        n_sequences = int(trained.attrs.get("n_sequences", -1))
        twin = init is not None
        kinds = layer_kinds(trained, g_t.shape[1])
        idx_rows += _index_rows(
            variant,
            p,
            shares,
            key0,
            n_groups=g_t.shape[0],
            n_sequences=n_sequences,
            twin=twin,
            kinds=kinds,
        )
        row = _comparison_row(variant, trained, p, shares, twin=twin)
        if leakage and variant in leakage:
            row.update(_decomposition(leakage[variant]))
        if leakage_init and variant in leakage_init:
            row.update({f"init_{k}": v for k, v in _decomposition(leakage_init[variant]).items()})
        if lg is not None and variant in lg.index:
            r = lg.loc[variant]
            row["positional"] = r.get("positional", row["positional"])
            row["heldout_loss"] = float(r["final_heldout_loss"])
            excess = r[["excess_mean", "excess_lo", "excess_hi"]]
            row.update(interval_columns("excess_beyond_context", excess))
        row.update({"confidence": confidence, "n_sequences": n_sequences})
        cmp_rows.append(row)
    return pd.DataFrame(idx_rows), pd.DataFrame(cmp_rows)


def _index_rows(
    variant, p, shares, key0, *, n_groups: int, n_sequences: int, twin: bool, kinds
) -> list[dict]:
    """The index table's rows of one variant: per layer (with its ``layer_kind``, ``kinds``) the
    trained model (with its contrasts to the twin) and, when there is a twin, the twin;
    ``key0``: the key-0 column's index of each (:class:`~causalpos.paper1.diagonal.IndexCI`)."""
    (s_t, _), (s_i, _) = shares
    k_t, k_i = key0
    diff, ratio, s_diff = p.difference(), p.ratio(), paired(s_t, s_i)
    rows = []
    for layer in range(len(p.estimate_a)):
        base = {
            "variant": variant,
            "layer": layer + 1,
            "layer_kind": kinds[layer],
            "n_groups": n_groups,
            "n_sequences": n_sequences,
        }
        row = _weights_row(
            base, "trained", (p.estimate_a, p.lo_a, p.hi_a, p.floor_a), s_t, k_t, layer
        )
        rows.append(row)
        if not twin:
            continue
        ok = p.lo_b[layer] > 0  # the twin's index is detected: the ratio is bounded
        row.update(interval_columns("minus_init", diff, layer))
        row.update(interval_columns("over_init", ratio, layer, skip=not ok))
        row.update(interval_columns("share_minus_init", s_diff, layer))
        rows.append(
            _weights_row(base, "init", (p.estimate_b, p.lo_b, p.hi_b, p.floor_b), s_i, k_i, layer)
        )
    return rows


def _weights_row(base: dict, weights: str, index, share, key0, layer: int) -> dict:
    """One layer's row of one model (``weights``: trained or init): ``index`` its (estimate, lo,
    hi, noise floor) per layer, ``share`` its non-relative share with CI, ``key0`` the key-0
    column's debiased index with CI (logit units)."""
    estimate, lo, hi, floor = index
    return {
        **base,
        "weights": weights,
        "index": estimate[layer],
        "ci_lo": lo[layer],
        "ci_hi": hi[layer],
        "noise_floor": floor[layer],
        **interval_columns("share", share, layer),
        **interval_columns("key0", (key0.debiased, key0.lo, key0.hi), layer),
    }


def _comparison_row(variant, trained: xr.Dataset, p, shares, *, twin: bool) -> dict:
    """The comparison table's row of one variant: the layer-mean index and the pooled share, and
    with a twin their contrasts to it."""
    (_, p_t), (_, p_i) = shares
    m = p.layer_mean()
    row = {
        "variant": variant,
        "positional": trained.attrs.get("positional", variant),
        **interval_columns("index_mean", m["a"]),
        **interval_columns("share_pooled", p_t),
    }
    if twin:
        # A ratio over an index indistinguishable from 0 is unbounded: reported only where the
        # twin's own interval excludes 0 (the difference is always reported).
        amp = m["ratio"] if m["b"][1] > 0 else (math.nan,) * 3
        row.update(
            {
                **interval_columns("init_index_mean", m["b"]),
                **interval_columns("minus_init", m["difference"]),
                **interval_columns("amplification", amp),
                **interval_columns("init_share_pooled", p_i),
                **interval_columns("share_pooled_minus_init", paired(p_t, p_i)),
            }
        )
    return row
