"""The three routes in the tables (paper2.tables.routes): where the mask-free route applies
(token 0 one fixed id across the prompts, read from their tokens), paper 2's two components on
each mapping."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from causalpos.paper2.tables import routes as RT
from causalpos.stages.leakage import token0_attrs


def _data(tok0) -> xr.Dataset:
    """A token store of len(tok0) prompts of 4 tokens, token 0 as given (sequence ids 10, 11...)."""
    tokens = np.arange(4 * len(tok0)).reshape(len(tok0), 4) + 100
    tokens[:, 0] = tok0
    seq = np.arange(len(tok0)) + 10
    return xr.Dataset({"tokens": (("sequence", "position"), tokens)}, coords={"sequence": seq})


def test_token_0_is_read_from_the_prompts_tokens():
    data = _data([1, 1, 1, 7])
    assert token0_attrs(data, [10, 11, 12]) == {"token0_fixed": 1, "token0_ids": [1]}
    assert token0_attrs(data, [12, 13]) == {"token0_fixed": 0, "token0_ids": [1, 7]}
    varied = _data(list(range(9)))
    assert token0_attrs(varied, np.arange(9) + 10)["token0_ids"] == [0, 1, 2, 3, 4]
    assert token0_attrs(xr.Dataset(), [10]) == {}


def _comp() -> pd.DataFrame:
    row = {"condition": "rope", "landmark": "counted", "reading": "expected-map", "window": "all"}
    row |= {"target": "logattn", "ring_run": "ring"}
    vals = {
        "total": 1.0,
        "causal_mask": 0.9,
        "mask_free": 0.1,
        "direct_mask": 0.6,
        "logit": 0.4,
        "share_causal_mask_ablation": 0.9,
        "share_causal_mask_mechanism": 0.6,
        "share_mask_free": 0.1,
        "indirect_mask": 0.3,
    }
    for k, v in vals.items():
        row |= {k: v, f"{k}_lo": v - 0.05, f"{k}_hi": v + 0.05}
    return pd.DataFrame([row])


@pytest.mark.parametrize(
    ("attrs", "fixed", "status"),
    [
        ({"token0_fixed": 1, "token0_ids": [1]}, 1.0, "measured"),
        ({"token0_fixed": 0, "token0_ids": [3, 8]}, 0.0, "not applicable: token 0 is not one"),
        ({}, np.nan, "not applicable: the summary does not record token 0"),
    ],
)
def test_the_mask_free_route_applies_only_with_a_fixed_token_0(attrs, fixed, status):
    summary = xr.Dataset(attrs=attrs)
    df = RT.mark_mask_free(_comp(), summary)
    np.testing.assert_equal(df["token0_fixed"].iloc[0], fixed)
    assert df["mask_free_status"].iloc[0].startswith(status)
    gone = [c + s for c in RT.MASK_FREE_COLUMNS for s in ("", "_lo", "_hi")]
    if status == "measured":
        assert df[gone].notna().all(axis=None)
    else:
        assert df[gone].isna().all(axis=None)
        # the indirect route, the mechanism mapping and the aliases keep their numbers
        assert (
            df[["indirect_mask", "share_causal_mask_mechanism", "causal_mask"]]
            .notna()
            .all(axis=None)
        )
    if attrs.get("token0_ids") == [3, 8]:
        assert "(ids 3, 8)" in df["mask_free_status"].iloc[0]


def test_each_mapping_is_a_row_naming_its_components():
    m = RT.mappings_frame(RT.mark_mask_free(_comp(), xr.Dataset(attrs={"token0_fixed": 1})))
    assert m["mapping"].tolist() == ["ablation", "mechanism"]
    abl, mech = (m[m["mapping"] == k].iloc[0] for k in ("ablation", "mechanism"))
    assert (abl.causal_mask, abl.residual_stream, abl.share_causal_mask) == (0.9, 0.1, 0.9)
    assert (mech.causal_mask, mech.residual_stream, mech.share_causal_mask) == (0.6, 0.4, 0.6)
    assert (abl.causal_mask_lo, mech.residual_stream_hi) == (0.85, 0.45)
    assert abl.causal_mask_is == "direct_mask + indirect_mask" and abl.residual_stream_is == (
        "mask_free"
    )
    assert mech.causal_mask_is == "direct_mask"
    assert mech.residual_stream_is == "indirect_mask + mask_free"
    assert (m["total"] == 1.0).all() and (m["status"] == "measured").all()
    # without a fixed token 0 the ablation mapping's residual stream and share are not applicable
    na = RT.mappings_frame(RT.mark_mask_free(_comp(), xr.Dataset(attrs={"token0_fixed": 0})))
    abl = na[na["mapping"] == "ablation"].iloc[0]
    assert np.isnan(abl.residual_stream) and np.isnan(abl.share_causal_mask)
    assert abl.causal_mask == 0.9 and abl.status.startswith("not applicable")
    assert na[na["mapping"] == "mechanism"].iloc[0].share_causal_mask == 0.6
