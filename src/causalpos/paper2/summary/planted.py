"""Positive controls planted in the model: a known query-position term in one layer's attention
logits (variant ``plant_query``), read back end to end through extraction and the headline
estimator (:mod:`causalpos.paper2.estimator.expected`), against a truth computed from the term alone.

**The plant.** Extraction adds b_i = a·log(1 + i) (:func:`causalpos.models.variants.plant_term`)
to every score of query row i of one layer, every head, before the softmax; the score store
records ``plant_term``, ``plant_layer`` (0-based), ``plant_scale`` (a) and ``plant_profile``.

**What each reading can see.** A pure query term cancels in the softmax exactly, so the planted
run's log-attention maps (and every later layer's) equal the unplanted run's; the planted layer's
logit maps are y_p + b exactly. On a *position-free* run on prompts exchangeable over positions
μ lies in the span of the baseline with the key-0 column modelled, so P_Δ μ = 0 and

    E[N̂(y + b)] / (n(n − 1)) = ‖P_Δ (μ + b)‖² = ‖P_Δ b‖² = ‖(I − P_B) b‖²   per head,

the residual sum of squares of b on the baseline alone (P_F b = b), computed by its own closed
form (:func:`planted_truth`). No term planted in the logits has a log-attention effect computable
from the term alone (it depends on the model's own attention), so on log-attention the planted
run only checks that its statistics equal the twin's; the statistics-level positive control is
:func:`causalpos.paper2.estimator.pairgrams.plant_query_effect`.

**Pass rule (decision).** The percentile-bootstrap interval of the planted layer's N̂ (per
prompt pair, summed over heads) excludes 0 and contains the truth (far from 0 the percentile
bootstrap is consistent). Judge it only where the run is a negative control too (the stage's
``mode == "chunks"``): elsewhere N̂ carries 2 bᵀP_Δ μ, 1 % of the truth on document openings.

**Twin (optional).** The unplanted run of the same weights and prompts adds its own N̂ (≈ 0), the
paired difference planted − twin, and two exact checks of the plumbing: the planted logit
statistics equal the twin's with b added (:func:`plant_query_effect`), its log-attention
statistics equal the twin's, each within float32 rounding (:data:`CHECK_TOL_UNITS`).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from causalpos.models.variants import PLANT_PROFILE, parse_variant, plant_term, without_plant
from causalpos.paper2 import inference as inf
from causalpos.paper2.estimator.expected import u_statistics
from causalpos.paper2.estimator.pairgrams import plant_query_effect, prompt_grams
from causalpos.paper2.estimator.storeview import store_grams, store_masks, store_stats
from causalpos.paper2.extraction.design import build_design, parse_fit

#: Score-store attrs a planted run carries (written by :func:`causalpos.capture.hook.resolve_plant`).
PLANT_ATTRS = ("plant_term", "plant_layer", "plant_scale", "plant_profile")

#: Relative tolerance of the exact checks: the stores keep per-prompt sums in float32, each a
#: sum of at most T cells, so a statistic is good to about T·u (u = 2⁻²⁴) of its scale; the
#: checks compare Grams of such statistics (quadratic: 2T·u) and allow a factor 8 for the
#: rounding of the float32 scores themselves (s + b rounds where s does not): 16·T·u.
CHECK_TOL_UNITS = 16.0


def plant_of(ds: xr.Dataset) -> tuple[int, np.ndarray]:
    """``(layer, b)`` of a planted score store: the planted layer (0-based) and its term b (T,),
    recomputed from the store's ``plant_*`` attrs."""
    missing = [k for k in PLANT_ATTRS if k not in ds.attrs]
    if missing:
        raise ValueError(
            f"the store has no planted term (attrs {missing} missing): it is not a run of a "
            "plant_query variant (extract it with a variant such as "
            "identity_rope+plant_query+bidirectional and leakage.plant set)"
        )
    if ds.attrs["plant_term"] != "query" or ds.attrs["plant_profile"] != PLANT_PROFILE:
        raise ValueError(
            f"planted term {ds.attrs['plant_term']!r} with profile {ds.attrs['plant_profile']!r} "
            f"is not the query term {PLANT_PROFILE!r} this module computes the truth of"
        )
    T = int(ds.sizes["query"])
    return int(ds.attrs["plant_layer"]), plant_term(T, float(ds.attrs["plant_scale"]))


def _by_offset_residual(v: np.ndarray, d: np.ndarray, T: int) -> np.ndarray:
    """v minus its mean within each offset (the saturated baseline's projection removed)."""
    n = np.bincount(d, minlength=T).astype(np.float64)
    s = np.bincount(d, weights=v, minlength=T)
    return v - (s / np.where(n > 0, n, 1.0))[d]


def planted_truth(
    b: np.ndarray, mask: np.ndarray, fit: str = "saturated+query", *, landmark: bool = True
) -> float:
    """‖P_Δ b‖² of the query term b (T,) on the measured pairs ``mask`` ((T, T) bool): the
    expected-map numerator a planted query term adds per head (module docstring).

    Computed as the residual sum of squares of the map b_i on the baseline B alone (a query
    term lies in F, so P_F b = b), by its own closed form, not by the estimator's solver:
    saturated baseline — b minus its within-offset means, then (landmark) the key-0 indicator
    residualized the same way projected out (Frisch–Waugh–Lovell); linear baseline — least
    squares on [1, i − j (, key-0 indicator)].
    """
    baseline, absolute = parse_fit(fit)
    if absolute not in ("query", "both"):
        raise ValueError(
            f"fit {fit!r} has no query effects: a planted query term is not in its span, and "
            "the headline estimator reads query fits only"
        )
    mask = np.asarray(mask, dtype=bool)
    T = mask.shape[0]
    b = np.asarray(b, dtype=np.float64)
    if b.shape != (T,):
        raise ValueError(f"planted_truth: b must have shape ({T},), got {b.shape}")
    i, j = np.nonzero(mask)
    d = i - j
    y = b[i]
    k0 = (j == 0).astype(np.float64)
    if baseline == "saturated":
        r = _by_offset_residual(y, d, T)
        if landmark:
            z = _by_offset_residual(k0, d, T)
            zz = float(z @ z)
            if zz > 1e-12 * max(1.0, float(k0 @ k0)):
                r = r - (z @ r) / zz * z
        return float(r @ r)
    cols = [np.ones_like(y), d.astype(np.float64)] + ([k0] if landmark else [])
    x = np.stack(cols, axis=1)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = y - x @ coef
    return float(r @ r)


def _interval(name: str, reps: np.ndarray, level: float) -> dict[str, np.ndarray]:
    """``name`` (per layer), ``name_pooled`` and their percentile intervals from replicates
    (1 + B, layer), row 0 the estimate."""
    out = {}
    for key, r in ((name, reps), (f"{name}_pooled", reps.sum(-1))):
        out[key] = r[0]
        out[f"{key}_lo"], out[f"{key}_hi"] = inf.bounds(r[1:], level)
    return out


def recover(
    grams: dict[str, np.ndarray], truth: np.ndarray, counts: np.ndarray, *, level: float = 0.95
) -> dict[str, np.ndarray]:
    """The planted truth (layer,) against the estimator's N̂ of ``grams`` ((layer, head, ...)
    Grams of :func:`causalpos.paper2.estimator.pairgrams.prompt_grams`): ``plant_num*`` (per layer and
    pooled, with percentile intervals under the bootstrap ``counts`` (B, n)), ``plant_truth*``,
    ``plant_ratio*`` (N̂ / truth, NaN where the truth is 0), ``plant_share`` (truth / D̂) and
    ``plant_passed`` (the interval of the one layer with a non-zero truth excludes 0 and contains
    it)."""
    truth = np.asarray(truth, dtype=np.float64)
    planted = np.flatnonzero(truth)
    if planted.size != 1:
        raise ValueError(f"recover: the truth must be non-zero on exactly one layer, got {truth}")
    n = grams["sst"].shape[-1]
    weights = np.concatenate([np.ones((1, n)), np.asarray(counts, dtype=np.float64)])
    u = u_statistics(grams, weights)
    out = _interval("plant_num", u["num"].sum(-1) / u["pairs"][:, None], level)
    out["plant_truth"], out["plant_truth_pooled"] = truth, truth.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        for s in ("", "_lo", "_hi"):
            out[f"plant_ratio{s}"] = np.where(truth != 0, out[f"plant_num{s}"] / truth, np.nan)
            out[f"plant_ratio_pooled{s}"] = out[f"plant_num_pooled{s}"] / truth.sum()
        out["plant_share"] = truth / (u["den"][0].sum(-1) / (n * (n - 1)))
    k = int(planted[0])
    lo, hi = out["plant_num_lo"][k], out["plant_num_hi"][k]
    out["plant_passed"] = np.bool_((lo > 0 or hi < 0) and lo <= truth[k] <= hi)
    return out


def _gram_deviation(got: dict, want: dict) -> np.ndarray:
    """Per layer: the largest difference between two layers' Grams (``num``, ``low``, ``sst``)
    relative to the scale of the expected ones (max |low| for the Grams, max sst for sst)."""
    out = []
    for ly in range(want["low"].shape[0]):
        devs = [
            float(np.abs(got[k][ly] - want[k][ly]).max()) / float(np.abs(want[s][ly]).max())
            for k, s in (("num", "low"), ("low", "low"), ("sst", "sst"))
        ]
        out.append(max(devs))
    return np.asarray(out)


def _exact_checks(
    planted: xr.Dataset, twin: xr.Dataset, layer: int, b: np.ndarray, g_plant: dict, read: dict
) -> dict[str, np.ndarray]:
    """Logit: the planted Grams ``g_plant`` vs the twin's with b planted in its statistics on the
    planted layer; log-attention: the planted Grams vs the twin's. Per layer, relative
    (:func:`_gram_deviation`); ``read``: the reading's window, fit and landmark."""
    want = []
    w = read["window"]
    for li, (lay, mask) in enumerate(store_masks(twin, w, "logit").items()):
        st = store_stats(twin, lay, w, "logit", mask)
        if li == layer:
            st = plant_query_effect(st, mask, b)
        want.append(prompt_grams(st, build_design(mask, read["fit"], landmark=read["landmark"])))
    want_logit = {k: np.stack([x[k] for x in want]) for k in ("num", "low", "sst")}
    la_p, la_t = (store_grams(ds, target="logattn", **read)[0] for ds in (planted, twin))
    return {
        "check_logit": _gram_deviation(g_plant, want_logit),
        "check_logattn": _gram_deviation(la_p, la_t),
    }


def planted_recovery(
    planted: xr.Dataset,
    twin: xr.Dataset | None = None,
    *,
    window: str = "all",
    fit: str = "saturated+query",
    landmark: bool = True,
    counts: np.ndarray | None = None,
    level: float = 0.95,
) -> xr.Dataset:
    """The positive control planted in the model, read back on logits (module docstring).

    Args:
        planted: the merged score store of a ``plant_query`` run (a leakage store with the
            expected-map statistics: ``LeakageReducer(expected_stats=True)``).
        twin: optionally, the unplanted run of the same weights and prompts
            (:func:`causalpos.models.variants.without_plant` of the planted variant).
        window, fit, landmark: the headline reading (the planted layer's truth is computed on
            its measured pairs and fit).
        counts: bootstrap prompt multiplicities (B, n), e.g. the summary's shared draws; default
            2000 multinomial draws seeded by 0.

    Returns a Dataset over ``layer`` (and pooled, ``*_pooled``), N̂ in the estimator's units (per
    prompt pair, summed over the layer's heads): :func:`recover`'s variables, ``plant_truth``
    n_heads · ‖P_Δ b‖² on the planted layer (0 on every other), ``plant_share`` the planted share
    of the expected-map variance (for sizing the plant); with ``twin``: ``twin_num*`` (its N̂, ≈ 0
    on a position-free run), ``plant_diff*`` (planted − twin, paired), ``check_logit`` /
    ``check_logattn`` (per layer, relative deviation of the exact checks), ``check_tol`` and
    ``check_passed`` ().

    Attrs: ``plant_layer``, ``plant_scale``, ``plant_profile``, the reading and the rule.
    """
    layer, b = plant_of(planted)
    n = int(planted.sizes["sequence"])
    if n < 3:
        raise ValueError(f"the planted control needs at least 3 prompts, got {n}")
    read = dict(window=window, fit=fit, landmark=landmark)
    g = store_grams(planted, target="logit", **read)[0]
    n_layers, n_heads = g["num"].shape[:2]
    masks = store_masks(planted, window, "logit")
    truth = np.zeros(n_layers)
    truth[layer] = n_heads * planted_truth(b, list(masks.values())[layer], fit, landmark=landmark)
    if counts is None:
        counts = np.random.default_rng(0).multinomial(n, np.full(n, 1.0 / n), size=2000)
    out = recover(g, truth, counts, level=level)
    attrs = {
        "plant_layer": layer,
        "plant_scale": float(planted.attrs["plant_scale"]),
        "plant_profile": PLANT_PROFILE,
        "plant_window": window,
        "plant_fit": fit,
        "plant_landmark": int(landmark),
        "plant_level": level,
        "plant_n_prompts": n,
        "plant_rule": "passed: the planted layer's percentile-bootstrap interval of N-hat (per "
        "prompt pair, summed over heads, logits) excludes 0 and contains n_heads * ||P_D b||^2",
    }
    if twin is not None:
        a, t = planted["sequence"].values, twin["sequence"].values
        if a.shape != t.shape or (a != t).any() or planted.sizes["query"] != twin.sizes["query"]:
            raise ValueError(
                "the planted run and its twin must be read on the same prompts (sequence ids and "
                "length): pass the unplanted run of the same (model, dataset)"
            )
        weights = np.concatenate([np.ones((1, n)), np.asarray(counts, dtype=np.float64)])
        num = []  # N̂ per prompt pair summed over heads (1 + B, layer), planted then twin
        for x in (g, store_grams(twin, target="logit", **read)[0]):
            u = u_statistics(x, weights)
            num.append(u["num"].sum(-1) / u["pairs"][:, None])
        out.update(_interval("twin_num", num[1], level))
        out.update(_interval("plant_diff", num[0] - num[1], level))
        out.update(_exact_checks(planted, twin, layer, b, g, read))
        out["check_tol"] = CHECK_TOL_UNITS * int(planted.sizes["query"]) * 2.0**-24
        out["check_passed"] = np.bool_(
            (out["check_logit"] <= out["check_tol"]).all()
            and (out["check_logattn"] <= out["check_tol"]).all()
        )
    data = {k: (("layer",) if np.ndim(v) == 1 else (), v) for k, v in out.items()}
    return xr.Dataset(data, coords={"layer": planted["layer"].values}, attrs=attrs)


#: ``plant_model``'s last axis: the planted layer's truth, N̂ with its CI, recovered/truth.
PLANT_STATS = ("truth", "estimate", "lo", "hi", "ratio", "ratio_lo", "ratio_hi")


def planted_block(runs, counts: np.ndarray, position_free_runs, *, level: float) -> xr.Dataset:
    """The planted positive control of every planted run of a summary whose unplanted twin is a
    negative control there (position-free, on prompts exchangeable over positions: elsewhere the
    plant meets the data's own position and the run is no control).

    ``runs``: variant -> store (the summary's prompts, sorted); ``counts``: the summary's shared
    bootstrap draws. Returns ``plant_model`` (plant_variant, plant_stat =
    :data:`PLANT_STATS`) on the planted layer, ``plant_model_check`` (plant_variant) 1 where
    the exact checks hold (the twin's maps elsewhere, log-attention unchanged), and
    ``plant_model_passed`` (plant_variant) 1 where the control passes (interval excludes 0,
    contains the truth, checks hold); empty when no planted run qualifies."""
    planted = [
        v
        for v in runs
        if parse_variant(v).plant is not None and without_plant(v) in position_free_runs
    ]
    if not planted:
        return xr.Dataset()
    stat = np.full((len(planted), len(PLANT_STATS)), np.nan)
    check, passed = np.zeros(len(planted)), np.zeros(len(planted))
    for k, v in enumerate(planted):
        r = planted_recovery(runs[v], runs[without_plant(v)], counts=counts, level=level)
        layer = int(r.attrs["plant_layer"])
        sel = r.isel(layer=layer)
        keys = ("truth", "num", "num_lo", "num_hi", "ratio", "ratio_lo", "ratio_hi")
        stat[k] = [float(sel[f"plant_{x}"]) for x in keys]
        check[k] = float(bool(r["check_passed"]))
        passed[k] = float(bool(r["plant_passed"]) and bool(r["check_passed"]))
    return xr.Dataset(
        {
            "plant_model": (("plant_variant", "plant_stat"), stat),
            "plant_model_check": (("plant_variant",), check),
            "plant_model_passed": (("plant_variant",), passed),
        },
        coords={"plant_variant": planted, "plant_stat": list(PLANT_STATS)},
    )
