"""Claim 1's trained-minus-twin contrast (causalpos.paper2.tables.twins): paired through the
replicates where both summaries resampled the same prompts, and saying why not otherwise."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from causalpos.paper2.tables.twins import twin_contrast_frame

B = 400


def _summary(est: float, boot: np.ndarray | None, digest: str | None, **attrs) -> xr.Dataset:
    """A summary's headline: ``leakage_model`` (causal and bidirectional runs, two windows, both
    targets) with the causal run's logit estimate ``est``, its replicates ``boot`` on the first
    window (``leakage_model_boot``; none where None), the prompts' digest."""
    model = np.full((2, 2, 2, 3), 0.5)
    model[0, 0, 1] = [est, np.nan, np.nan]
    data = {"leakage_model": (("variant", "window", "target", "stat"), model)}
    if boot is not None:
        data["leakage_model_boot"] = (("variant", "replicate"), np.stack([boot, boot + 1.0]))
    coords = {
        "variant": ["causal", "bidirectional"],
        "window": ["all", "early32"],
        "target": ["logattn", "logit"],
        "stat": ["estimate", "lo", "hi"],
    }
    attrs = {"level": 0.95, **attrs} | ({"counts_digest": digest} if digest else {})
    return xr.Dataset(data, coords=coords, attrs=attrs)


def test_the_paired_interval_is_the_percentile_interval_of_the_replicates_differences():
    rng = np.random.default_rng(0)
    shared = rng.normal(size=B)  # the prompts' draw both models share: it cancels when paired
    trained = (0.009 + 0.002 * shared + 0.0003 * rng.normal(size=B)).astype(np.float32)
    twin = (0.139 + 0.01 * shared + 0.001 * rng.normal(size=B)).astype(np.float32)
    summaries = {
        ("m", "d"): _summary(0.009, trained, "abc"),
        ("m-random", "d"): _summary(0.139, twin, "abc", init_of="m"),
        ("g", "d"): _summary(0.02, trained, "abc"),
        ("g-random", "d"): _summary(0.01, twin, "xyz", init_of="g"),  # other prompts
        ("h", "d"): _summary(0.02, None, "abc"),  # a store from before the replicates
        ("h-random", "d"): _summary(0.01, twin, "abc", init_of="h"),
        ("lonely-random", "d"): _summary(0.1, twin, "abc", init_of="absent"),
    }
    df = twin_contrast_frame(summaries).set_index("twin")
    assert sorted(df.index) == ["g-random", "h-random", "m-random"]
    m = df.loc["m-random"]
    assert (m["model"], m["dataset"], m["window"], m["target"]) == ("m", "d", "all", "logit")
    assert m["difference"] == pytest.approx(0.009 - 0.139)
    # independently: the 2.5 % and 97.5 % quantiles (numpy's default, linear) of the
    # replicates' differences, in float64
    d = trained.astype(np.float64) - twin.astype(np.float64)
    q = np.quantile(d, [0.025, 0.975])
    assert (m["difference_lo"], m["difference_hi"]) == (q[0], q[1])
    assert m["paired"] and m["pairing"].startswith("paired: the same resampled prompts")
    # the pairing removes the shared draw: narrower than the independent combination would be
    w_trained, w_twin = (
        np.diff(np.quantile(trained, [0.025, 0.975])),
        np.diff(np.quantile(twin, [0.025, 0.975])),
    )
    assert q[1] - q[0] < 0.8 * float(np.hypot(w_trained, w_twin)[0])
    g, h = df.loc["g-random"], df.loc["h-random"]
    assert not g["paired"] and np.isnan(g["difference_lo"]) and np.isnan(g["difference_hi"])
    assert g["pairing"] == (
        "independent: the two summaries resampled different prompts (counts_digest abc vs xyz)"
    )
    assert g["difference"] == pytest.approx(0.01)
    assert not h["paired"] and h["pairing"].startswith("independent: h keeps no replicates")
