"""causalpos.config.yamlfile: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from causalpos.config import ConfigError, schema_error_summary
from causalpos.models.variants import parse_variant, variant_names
from tests.config.configs import REPO, SCHEMA, resolved


def test_the_schema_and_the_resolver_allow_exactly_the_variants_the_library_parses():
    schema = yaml.safe_load(Path(SCHEMA).read_text())
    exp = schema["properties"]["leakage"]["properties"]["experiments"]["additionalProperties"]
    pattern = re.compile(exp["properties"]["variants"]["items"]["pattern"])
    # the schema checks the shape; the resolver checks each name with the library's parser
    assert all(pattern.search(v) for v in variant_names())
    assert [parse_variant(v).name for v in variant_names()] == variant_names()
    for bad, message in (
        ("bidirectional+scrambled_rope", "canonical order"),
        ("identity_rope+scrambled_rope", "conflicts"),
        ("sideways", "'sideways' unknown"),
    ):
        cfg = resolved(
            "configs/smoke.yaml",
            lambda c, bad=bad: c["leakage"]["experiments"]["smoke"].update(
                variants=["causal", bad]
            ),
        )
        with pytest.raises(ConfigError, match=f"leakage.experiments.smoke.variants: .*{message}"):
            cfg.all_targets()


def test_every_seed_key_takes_exactly_what_torch_and_numpy_both_take():
    import numpy as np
    import torch

    top = 2**64 - 1  # torch.manual_seed: -2**63 .. 2**64 - 1; numpy: no negative seed
    torch.manual_seed(top)
    np.random.default_rng(top)
    with pytest.raises(ValueError):
        torch.manual_seed(top + 1)
    with pytest.raises(ValueError):
        np.random.default_rng(-1)
    torch.manual_seed(0)
    keys = {
        "seed": lambda c, v: c.update(seed=v),
        "models.tiny-random.seed": lambda c, v: c["models"]["tiny-random"].update(seed=v),
        "datasets.kjv-first24.seed": lambda c, v: c["datasets"]["kjv-first24"].update(seed=v),
        "train.variants.rope.seed": lambda c, v: c["train"]["variants"].update(rope={"seed": v}),
    }
    for key, edit in keys.items():
        for fine in (0, 2**63, top):
            cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
            edit(cfg, fine)
            validate(cfg, SCHEMA)
        for bad, said in ((top + 1, "is greater than the maximum of"), (-1, "is less than")):
            cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
            edit(cfg, bad)
            with pytest.raises(Exception) as info:
                validate(cfg, SCHEMA)
            text = schema_error_summary(info.value, "workflow/schemas/config.schema.yaml")
            assert text.startswith(f"invalid config at `{key}`: {bad} {said}"), text
            assert "0 .. 2**64 - 1" in text, text
