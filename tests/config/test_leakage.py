"""causalpos.config.leakage: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import pytest
import yaml

from causalpos.config import ConfigError
from tests.config.configs import REPO, _overlay, resolved


def test_wildcard_patterns(default):
    assert default.model_wildcard_pattern() == (
        r"smollm2\-135m|smollm2\-135m\-random|gemma3\-270m|gemma3\-270m\-random"
    )
    assert (
        resolved("configs/smoke.yaml", lambda c: c.update(models={})).model_wildcard_pattern()
        == "(?!)"
    )


def test_leakage_pairs_take_the_union_of_their_experiments_variants(default, paper):
    pairs = default.leakage_pairs()
    # the fixed-BOS controls: each RoPE control and each BOS replacement run causally (sinks
    # kept) and bidirectionally
    assert pairs[("smollm2-135m", "kjv-chunks128-bos")] == [
        "causal",
        "bidirectional",
        "ring",
        "identity_rope",
        "identity_rope+ring",
        "identity_rope+bidirectional",
        "bos_replace_mean",
        "bos_replace_all_gaussian",
        "bos_replace_mean+ring",
        "bos_replace_all_gaussian+ring",
        "layer_bidirectional",
        # the positive control that propagates: three doses in layer 2's residual stream
        "identity_rope+plant_stream1+bidirectional",
        "identity_rope+plant_stream2+bidirectional",
        "identity_rope+plant_stream3+bidirectional",
    ]
    assert pairs[("smollm2-135m", "random-chunks128-bos")] == ["causal", "ring"]
    assert pairs[("smollm2-135m", "kjv-chunks128")] == ["causal", "ring", "identity_rope+ring"]
    assert len(pairs) == 5 and list(pairs)[:4] == [
        ("smollm2-135m", "kjv-chunks128-bos"),
        ("smollm2-135m-random", "kjv-chunks128-bos"),
        ("smollm2-135m", "random-chunks128-bos"),
        ("smollm2-135m", "kjv-chunks128"),
    ]
    assert default.leakage_variants("smollm2-135m", "kjv-chunks128-bos")[-3:] == [
        "identity_rope+plant_stream1+bidirectional",
        "identity_rope+plant_stream2+bidirectional",
        "identity_rope+plant_stream3+bidirectional",
    ]
    assert len(paper.leakage_variants("llama-3.2-1b", "wiki-chunks256")) == 16
    with pytest.raises(
        ConfigError, match="no leakage experiment names model 'phi-4' with dataset 'wiki-chunks256'"
    ):
        paper.leakage_variants("phi-4", "wiki-chunks256")


def test_leakage_params(default):
    assert repr(default.leakage_summary_params()) == (
        "{'alpha': 0.05, 'bos_windows': ['early16', 'early32', 'early64', 'late'], "
        "'control_alpha': 0.05, 'control_margin_logattn': 0.001, 'control_margin_logit': 0.001, "
        "'fit': 'saturated+query', "
        "'floor_correct': True, 'level': 0.95, 'n_boot': 2000, 'n_perm': 200, "
        "'perm_variants': ['causal'], 'planted': 0.01, 'seed': 0, "
        "'taus': [0.3, 0.5, 0.8], 'window': 'all'}"
    )
    assert repr(default.position0_params()) == (
        "{'conditions': ['causal', 'bidirectional'], 'n_folds': 5, "
        "'n_permutations': 100, 'ridge': 1.0, 'tau': 0.5}"
    )


def test_experiment_inputs_and_labels(smoke, default):
    assert smoke.experiment_labels("smoke") == [
        "trained-rope/kjv-first24",
        "trained-rope-init/kjv-first24",
        "tiny-random/kjv-first24",
    ]
    assert (
        smoke.experiment_position0_stores("smoke")[2]
        == "results/position0/tiny-random/kjv-first24.zarr"
    )
    assert default.experiment_summary_stores("content") == [
        "results/leakage/smollm2-135m/kjv-chunks128-bos.zarr",
        "results/leakage/smollm2-135m/random-chunks128-bos.zarr",
    ]
    assert len(default.leakage_summary_stores()) == len(default.position0_stores()) == 5
    assert default.leakage_pair_labels()[-1] == "gemma3-270m/kjv-chunks640-bos"
    with pytest.raises(ConfigError, match="leakage.experiments has no experiment 'ghost'"):
        default.experiment_labels("ghost")


def test_shares_figure_only_where_a_pair_has_a_bidirectional_run():
    causal_only = resolved(
        "configs/smoke.yaml",
        lambda c: c["leakage"]["experiments"]["smoke"].update(variants=["causal"]),
    )
    assert not causal_only.experiment_has_decomposition("smoke")
    targets = causal_only.leakage_targets()
    assert "results/figures/paper2_layers_smoke.png" in targets
    assert not any("paper2_shares" in t for t in targets)
    # a control's own pair decomposes too (identity RoPE, causal and bidirectional)
    control_only = resolved(
        "configs/smoke.yaml",
        lambda c: c["leakage"]["experiments"]["smoke"].update(
            variants=["causal", "identity_rope", "identity_rope+bidirectional"]
        ),
    )
    assert control_only.experiment_has_decomposition("smoke")


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["leakage"]["experiments"]["smoke"].update(variants=["bidirectional"]),
            "leakage.experiments.smoke.variants must include 'causal'",
        ),
        (
            lambda c: c["leakage"].update(fit="saturated+both"),
            r"leakage.fit 'saturated\+both' is not among leakage.reducer.fits",
        ),
        (
            lambda c: c["leakage"].update(bos_windows=["early32"]),
            r"leakage.bos_windows: \['early32'\] not among",
        ),
        (
            lambda c: c["leakage"].update(window="early32"),
            r"leakage.window: \['early32'\] not among",
        ),
        (
            lambda c: c["leakage"]["experiments"]["smoke"].update(datasets=["ghost"]),
            "datasets: no dataset 'ghost'",
        ),
        (
            lambda c: c["leakage"]["experiments"]["smoke"].update(models=["ghost"]),
            "models: no model 'ghost'",
        ),
    ],
)
def test_bad_leakage_config_names_the_key(edit, message):
    with pytest.raises(ConfigError, match=message):
        resolved("configs/smoke.yaml", edit).all_targets()


def test_model_attrs_name_the_positional_type_and_the_twin(default, paper):
    assert default.model_attrs("trained-ntk") == {"positional": "ntk", "init_of": ""}
    assert default.model_attrs("trained-swa-init") == {
        "positional": "swa",
        "init_of": "trained-swa",
    }
    assert default.model_attrs("smollm2-135m") == {"positional": "", "init_of": ""}
    assert default.model_attrs("smollm2-135m-random") == {
        "positional": "",
        "init_of": "smollm2-135m",
    }
    assert paper.model_attrs("llama-3.2-1b-random")["init_of"] == "llama-3.2-1b"


def test_the_powered_overlay_passes_every_check_and_its_margins_are_half_its_thresholds():
    """configs/decide.yaml over config.yaml: every config check passes without warnings, both
    real models run at the prompts the default run's power calculation asks for (capped on
    Gemma), and on each model every margin is at most half the smallest threshold on its
    reading (the rule the check enforces, recomputed here from the overlay's own values)."""
    from causalpos.config.leakage import MATERIALITY_READINGS

    cfg = resolved("config.yaml", lambda c: _overlay(c, "configs/decide.yaml"))
    assert cfg.check() == []
    pairs = cfg.leakage_pairs()
    trained = ("trained-rope", "trained-ntk", "trained-swa")
    assert set(pairs) == {
        ("smollm2-135m", "kjv-decide128-bos"),
        ("gemma3-270m", "kjv-decide640-bos"),
    } | {(m, "kjv-decide128-heldout") for m in trained}
    assert cfg.dataset_spec("kjv-decide128-bos")["n_sequences"] == 128
    assert cfg.dataset_spec("kjv-decide640-bos")["n_sequences"] == 96
    # the trained models on their own held-out books (not the decide datasets' training text)
    held = cfg.dataset_spec("kjv-decide128-heldout")
    assert held["corpus"]["books"] == cfg.config["train"]["heldout"]
    assert held["n_sequences"] == 400
    # Table 6 on both real models: each RoPE condition causal, on the ring and bidirectionally
    table6 = {
        f"{c}{s}"
        for c in ("identity_rope", "scrambled_rope")
        for s in ("", "+ring", "+bidirectional")
    }
    for pair in (("gemma3-270m", "kjv-decide640-bos"), ("smollm2-135m", "kjv-decide128-bos")):
        assert {"causal", "ring", "bidirectional"} | table6 <= set(pairs[pair]), pair
    for m in trained:
        # claim 3's window by intervention on the sliding-window model only (no_window is
        # refused on a model without a window)
        extra = {"no_window"} if m == "trained-swa" else set()
        assert (
            set(pairs[(m, "kjv-decide128-heldout")]) == {"causal", "ring", "bidirectional"} | extra
        )
    declared = yaml.safe_load((REPO / "configs/decide.yaml").read_text())["leakage"]["per_model"]
    assert set(declared) == {"smollm2-135m", "gemma3-270m", *trained}
    for model, entry in declared.items():
        for reading in ("logit", "logattn"):
            smallest = min(
                v for c, v in entry["materiality"].items() if MATERIALITY_READINGS[c] == reading
            )
            assert entry["margin"][reading] <= smallest / 2, (model, reading)
        # each model's summaries read its own margins
        params = cfg.leakage_summary_params(model)
        assert params["control_margin_logit"] == entry["margin"]["logit"]
    assert cfg.leakage_materiality()["per_model"]["gemma3-270m"]["claim1_logit"] == 0.001
