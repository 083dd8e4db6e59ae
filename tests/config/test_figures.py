"""causalpos.config.figures: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import pytest

from causalpos.config import ConfigError
from tests.config.configs import resolved


def test_simulation_figures(default):
    assert default.sim_figure_stores("fig6") == [
        "results/sim/l2_a040.zarr",
        "results/sim/l2_a060.zarr",
        "results/sim/l2_a080.zarr",
    ]
    assert default.sim_figure_params("fig4") == {"normalized_row": True, "settings": ["rope_a000"]}
    assert default.figure_paths("fig1_theory") == [
        "results/figures/fig1_theory.png",
        "results/figures/fig1_theory.pdf",
    ]


def test_each_figure_rule_gets_the_display_names_of_what_it_draws(default, smoke):
    """The label table through the config: a random_init twin named after the model it copies,
    the models trained here by their type, figures.labels over both; each family item carries
    only its own models' and datasets' names (a model added elsewhere reruns none of it)."""
    assert default.display_names(["smollm2-135m-random", "gemma3-270m"], ["kjv-chunks640-bos"]) == {
        "gemma3-270m": "Gemma-3 270M (Q4_K_M)",
        "kjv-chunks640-bos": "KJV Bible, 640-token chunks (BOS)",
        "smollm2-135m-random": "SmolLM2-135M-Instruct, random init",
    }
    assert default.paper2_experiment_family("layers")["gemma_controls"]["names"] == {
        "gemma3-270m": "Gemma-3 270M (Q4_K_M)",
        "kjv-chunks640-bos": "KJV Bible, 640-token chunks (BOS)",
    }
    assert default.train_display_names()["trained-swa-init"] == (
        "trained here: sliding-window RoPE, init twin"
    )
    # a user's model: its own name, or the one figures.labels gives it
    assert smoke.display_names(["tiny-random"]) == {"tiny-random": "tiny-random"}
    named = resolved(
        "configs/smoke.yaml",
        lambda c: c["figures"].update(labels={"tiny-random": "Tiny Llama", "kjv-first24": "KJV"}),
    )
    assert named.paper1_display_names() == {
        "kjv-first24": "KJV",
        "tiny-random": "Tiny Llama",
        "trained-rope": "trained here: RoPE",
    }
    named.check()


def test_a_figure_label_that_names_nothing_is_refused_naming_the_key():
    cfg = resolved(
        "configs/smoke.yaml", lambda c: c["figures"].update(labels={"tiny-randm": "Tiny"})
    )
    with pytest.raises(ConfigError, match=r"figures.labels: \['tiny-randm'\] name no model"):
        cfg.check()
    # a model trained here (or its twin) may be named; a bare variant name is no model
    ok = resolved(
        "configs/smoke.yaml", lambda c: c["figures"].update(labels={"trained-rope-init": "T0"})
    )
    ok.check_figure_labels()
    bad = resolved("configs/smoke.yaml", lambda c: c["figures"].update(labels={"rope": "R"}))
    with pytest.raises(ConfigError, match="trained-<variant>"):
        bad.check_figure_labels()
