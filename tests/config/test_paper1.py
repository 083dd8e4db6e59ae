"""causalpos.config.paper1: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations


def test_paper1_twins(default, smoke, paper):
    # a random_init model `like:` a paper 1 model is its twin; the smoke's random model only
    # borrows a tokenizer (a different architecture), so it is no twin
    assert default.paper1_twins() == {
        "smollm2-135m": "smollm2-135m-random",
        "gemma3-270m": "gemma3-270m-random",
    }
    assert smoke.paper1_twins() == {}
    assert paper.paper1_twins() == {}


def test_paper1_triples(paper):
    assert paper.paper1_labels() == [
        "llama-3.1-8b/fineweb-first1024/causal",
        "phi-4/fineweb-first1024/causal",
        "qwen3-8b/fineweb-first1024/causal",
        "nope-1.5b/fineweb-first1024/causal",
    ]
    assert paper.paper1_score_stores()[1] == "results/scores/phi-4/fineweb-first1024/causal.zarr"
    assert (
        paper.paper1_normalized_stores()[3]
        == "results/normalized/nope-1.5b/fineweb-first1024/causal.zarr"
    )
