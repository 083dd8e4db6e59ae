"""causalpos.config.schema: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import pytest
import yaml
from snakemake.utils import validate

from causalpos.config import schema_error_summary
from tests.config.configs import REPO, SCHEMA


def test_schema_errors_are_summarized_short_and_name_the_key():
    for edit, key, extra in [
        (lambda c: c.update(sed=1), "(top level)", "'sed' was unexpected"),
        (lambda c: c["extract"].update(batch_size="big"), "extract.batch_size", "'big'"),
        (
            lambda c: c["simulate"]["settings"]["l2_a000"].update(norm="rms"),
            "simulate.settings.l2_a000.norm",
            "'rms' is not one of",
        ),
        # a retired key says what replaces it (one margin per control)
        (
            lambda c: c["leakage"]["plant_stream"].update(margin=0.003),
            "leakage.plant_stream",
            "`leakage.plant_stream.margin` is retired: the dose series has no margin of its own",
        ),
        # (a misspelt variant name passes the schema, which checks only a name's shape: the
        # resolver's check names it, test_unknown_variant_in_an_experiment_names_it_...)
    ]:
        cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
        edit(cfg)
        with pytest.raises(Exception) as info:
            validate(cfg, SCHEMA)
        text = schema_error_summary(info.value, "workflow/schemas/config.schema.yaml")
        assert len(text.splitlines()) < 20 and "$schema" not in text, text
        assert f"`{key}`" in text and extra in text, text
