"""causalpos.figures.labels: the one table from config names to what a figure shows, and that it
stays importable without the figure stack (the config resolver reads it)."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from causalpos.figures import labels as L

REPO = Path(__file__).resolve().parents[2]


def test_every_model_and_dataset_of_the_shipped_configs_has_a_display_name():
    """config.yaml's and configs/paper.yaml's names are all in the table (a name left out would
    show as its slug); a random-init twin is its model's "random init", without the weights'
    format; the models trained here are named by their positional type."""
    for name in ("config.yaml", "configs/paper.yaml"):
        cfg = yaml.safe_load((REPO / name).read_text())
        for model, spec in cfg["models"].items():
            like = spec.get("like") if spec.get("source") == "random_init" else None
            if like is None:
                assert model in L.MODELS, (name, model)
        for dataset in cfg["datasets"]:
            assert dataset in L.DATASETS, (name, dataset)
    assert L.model_name("smollm2-135m") == "SmolLM2-135M-Instruct (Q4_1)"
    assert L.model_name("gemma3-270m") == "Gemma-3 270M (Q4_K_M)"
    assert L.model_name("gemma3-270m-random", like="gemma3-270m") == "Gemma-3 270M, random init"
    assert L.model_name("trained-rope") == "trained here: RoPE"
    assert L.model_name("trained-nope-init") == "trained here: NoPE (causal mask only), init twin"
    assert L.model_name("trained-rope_s1", positional="rope") == "trained here: RoPE (rope_s1)"
    assert L.dataset_name("kjv-first256") == "KJV Bible, first 256 tokens (BOS)"


def test_a_users_name_falls_back_to_itself_unless_figures_labels_names_it():
    assert L.model_name("my-model") == "my-model"
    assert L.dataset_name("my-data") == "my-data"
    labels = {"my-model": "My Model 1B", "smollm2-135m": "SmolLM2 (ours)", "my-data": "Mine"}
    assert L.model_name("my-model", labels=labels) == "My Model 1B"
    assert L.model_name("smollm2-135m", labels=labels) == "SmolLM2 (ours)"
    # a twin of a renamed model takes the new name; a twin named itself keeps its own
    assert L.model_name("twin", like="my-model", labels=labels) == "My Model 1B, random init"
    assert L.model_name("twin", like="x", labels={"twin": "T"}) == "T"
    assert L.dataset_name("my-data", labels) == "Mine"


def test_variants_and_settings_in_words():
    assert L.variant_name("causal") == "causal (as trained)"
    assert L.variant_name("identity_rope+ring") == "identity RoPE + ring (no mask, cyclic offsets)"
    assert L.variant_name("causal+plant_stream2") == "causal + stream plant, dose 2"
    assert L.variant_name("new_atom") == "new_atom"
    assert L.setting_name({"alpha": 0.2, "norm": "l2"}) == "α = 0.2, L2, QKᵀ, no PE, causal"
    assert L.pair_name("smollm2-135m/kjv-first256", {"smollm2-135m": "S"}) == ("S", "kjv-first256")
    assert L.common_part(["a", "a"]) == "a" and L.common_part(["a", "b"]) is None


def test_the_label_table_imports_the_standard_library_only():
    """The config resolver imports it (tests/test_architecture.py's pure config modules):
    nothing of matplotlib, numpy or torch, nothing else of the library."""
    tree = ast.parse((REPO / "src/causalpos/figures/labels.py").read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mods.add(node.module)
        elif isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
    assert mods <= {"__future__", "collections.abc"}, mods
