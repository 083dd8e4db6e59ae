"""causalpos.config.plants: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import pytest

from causalpos.config import ConfigError
from tests.config.configs import resolved


def test_stream_doses_reach_only_their_extractions_and_are_checked(default, smoke):
    p = default.extraction_params("smollm2-135m", "kjv-chunks128-bos")
    streams = {v: spec["stream"] for v, spec in p.items() if "stream" in spec}
    assert streams == {
        f"identity_rope+plant_stream{k}+bidirectional": {"dose": d, "layer": 2, "profile": "log"}
        for k, d in ((1, 0.175), (2, 0.35), (3, 0.7))
    }
    assert (
        p["identity_rope+plant_stream1+bidirectional"]["leakage"]
        == (p["identity_rope+bidirectional"]["leakage"])
    )
    default.check_plant_stream()  # SmolLM2's layer count is known only once it is built
    smoke.check_plant_stream()
    assert smoke.model_layers("trained-rope") == 2

    def stream(**kw):
        return lambda c: c["leakage"]["plant_stream"].update(kw)

    with pytest.raises(ConfigError, match="plant_stream.layer = 2 is outside the 2 layers"):
        resolved("configs/smoke.yaml", stream(layer=2)).check_plant_stream()
    with pytest.raises(
        ConfigError, match="plants dose 2 of leakage.plant_stream.doses, which has 1"
    ):
        resolved("configs/smoke.yaml", stream(doses=[0.5])).check_plant_stream()
    with pytest.raises(ConfigError, match="doses must be increasing"):
        resolved("configs/smoke.yaml", stream(doses=[1.0, 0.5])).leakage_plant_stream()
    # a changed dose changes the extraction's params (the job reruns)
    edited = resolved("config.yaml", stream(doses=[0.175, 0.35, 0.8]))
    q = edited.extraction_params("smollm2-135m", "kjv-chunks128-bos")
    assert q["identity_rope+plant_stream3+bidirectional"]["stream"]["dose"] == 0.8
    assert (
        q["identity_rope+plant_stream1+bidirectional"]
        == p["identity_rope+plant_stream1+bidirectional"]
    )
