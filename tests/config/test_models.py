"""causalpos.config.models: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import pytest

from causalpos.config import ConfigError
from tests.config.configs import resolved


def test_tokenizer_sharing_decides_the_data_store(default, smoke, paper):
    assert default.tokenizer_of("smollm2-135m-random") == "smollm2-135m"
    assert (
        default.data_store("smollm2-135m-random", "kjv-chunks128")
        == "results/data/kjv-chunks128/smollm2-135m.zarr"
    )
    assert paper.tokenizer_of("llama-3.2-1b-random") == "llama-3.2-1b"
    assert paper.tokenizer_of("phi-4") == "phi-4"
    # every model trained here, its init twin and a model taking a trained model's `tokenizer:`
    # share the trained tokenizer's store, sampled from the tokenizer itself: no training first
    tok = smoke.train_tokenizer_key()
    assert tok == f"tokenizer-{smoke.config['train']['tokenizer']['name']}"
    for model in ("tiny-random", "trained-rope", "trained-rope-init", "trained-nope"):
        assert smoke.data_store(model, "kjv-first24") == f"results/data/kjv-first24/{tok}.zarr"
    assert smoke.sample_inputs("kjv-first24", tok)["tokenizer"] == smoke.train_tokenizer_dir()
    assert default.sample_inputs("kjv-chunks128", "smollm2-135m") == {
        "tokenizer": "resources/models/smollm2-135m"
    }
    # a random_init model taking a trained model's tokenizer needs the tokenizer, not the training
    assert smoke.prepare_model_inputs("tiny-random") == [smoke.train_tokenizer_dir()]
    assert smoke.prepare_tokenizer_dir("tiny-random") == "resources/tokenizers/smoke-bpe"
    assert default.prepare_model_inputs("smollm2-135m-random") == ["resources/models/smollm2-135m"]
    assert default.prepare_model_inputs("smollm2-135m") == []


def test_a_tokenizer_of_a_missing_model_fails_where_the_model_is_prepared_or_its_data_read():
    cfg = resolved(
        "configs/smoke.yaml", lambda c: c["models"]["tiny-random"].update(tokenizer="ghost")
    )
    for call in (
        lambda: cfg.prepare_model_inputs("tiny-random"),
        lambda: cfg.data_store("tiny-random", "kjv-first24"),
    ):
        with pytest.raises(
            ConfigError, match=r"models: no model 'ghost'; defined: \['tiny-random'\]"
        ):
            call()
