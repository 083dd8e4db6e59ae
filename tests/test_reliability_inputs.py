"""Issue 24, the config and training half: names that become paths cannot escape their parent,
datasets feeding statistics have two sequences, a BOS-less tokenizer cannot prepend its BOS,
model and corpus files named by path are rule inputs, prepared models are copies whose sha256 is
checked when loaded, extraction params hold only what changes results, and training stops where
its loss stops being finite."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from causalpos.config import ConfigError, Resolved, schema_error_summary

REPO = Path(__file__).resolve().parents[1]
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def smoke_config(edit=None, *, schema: bool = True) -> dict:
    cfg = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
    validate(cfg, SCHEMA)  # defaults filled in, as the Snakefile does
    if edit is not None:
        edit(cfg)
        if schema:
            validate(cfg, SCHEMA)
    return cfg


# --- (4) names that become paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda c: c["train"]["tokenizer"].update(name=".."), "train.tokenizer.name"),
        (lambda c: c["train"]["tokenizer"].update(name="."), "train.tokenizer.name"),
        (lambda c: c["train"]["tokenizer"].update(name="a/b"), "train.tokenizer.name"),
        (lambda c: c["simulate"]["settings"].update({"..": {"alpha": 0.0}}), "simulate.settings"),
        (lambda c: c["simulate"]["settings"].update({".x": {"alpha": 0.0}}), "simulate.settings"),
        (
            lambda c: c["leakage"]["experiments"].update(
                _x={"models": ["tiny-random"], "datasets": ["kjv-first24"]}
            ),
            "leakage.experiments",
        ),
    ],
)
def test_a_name_that_is_not_a_plain_name_is_refused_at_config_time(edit, key, tmp_path):
    with pytest.raises(WorkflowError) as info:
        smoke_config(edit)
    summary = schema_error_summary(info.value)
    assert key in summary, summary
    # whatever the schema says, the resolver refuses it before any job, naming the key
    cfg = smoke_config(edit, schema=False)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Resolved(cfg, document_sizes=lambda corpus: None).check()


def test_the_tokenizer_directory_of_a_dotdot_name_is_never_formed():
    cfg = smoke_config(lambda c: c["train"]["tokenizer"].update(name=".."), schema=False)
    with pytest.raises(ConfigError, match=r"train\.tokenizer\.name: '\.\.' cannot name"):
        Resolved(cfg).train_tokenizer_dir()


# --- (5) n_sequences ------------------------------------------------------------------------------


def test_one_sequence_in_a_dataset_that_feeds_statistics_is_a_config_error_naming_the_key():
    cfg = smoke_config(lambda c: c["datasets"]["kjv-first24"].update(n_sequences=1))
    with pytest.raises(ConfigError, match=r"datasets\.kjv-first24\.n_sequences: 1;.*at least 2"):
        Resolved(cfg, document_sizes=lambda corpus: None).check()
    Resolved(smoke_config(), document_sizes=lambda corpus: None).check()  # 12 sequences pass
