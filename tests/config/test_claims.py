"""What the config's runs let the scorecard decide, said before any job (causalpos.config.claims):
a decomposition without its ring run, paper 2 on document openings, a random-init twin whose
weights are its model's by construction."""

from __future__ import annotations

import copy

import pytest

from causalpos.config import ConfigError, Resolved
from causalpos.config.claims import missing_rings
from tests.config.configs import load


@pytest.fixture(scope="module")
def smoke_config() -> dict:
    return load("configs/smoke.yaml")


def _resolved(cfg: dict, edit=None) -> Resolved:
    cfg = copy.deepcopy(cfg)
    if edit is not None:
        edit(cfg)
    return Resolved(cfg, document_sizes=lambda corpus: None)


def test_missing_rings_are_those_of_conditions_run_bidirectionally_only():
    assert missing_rings(["causal", "bidirectional"]) == {"ring": "bidirectional"}
    assert missing_rings(["causal", "ring", "bidirectional"]) == {}
    assert missing_rings(["causal", "ring"]) == {}  # decomposed on the ring alone
    assert missing_rings(["causal"]) == {}  # no decomposition at all
    ident = ["causal", "ring", "identity_rope", "identity_rope+bidirectional"]
    assert missing_rings(ident) == {"identity_rope+ring": "identity_rope+bidirectional"}


def test_the_smoke_experiment_is_warned_that_its_decomposition_has_no_ring(smoke_config):
    warnings = _resolved(smoke_config).decomposition_warnings()
    assert warnings == [
        "leakage.experiments.smoke: variants ['causal', 'bidirectional'] decompose trained-rope, "
        "trained-rope-init, tiny-random on kjv-first24 without the 'ring' run, the ablation "
        "paper 2's decomposition reads its residual-stream component on (no mask at all, cyclic "
        "RoPE offsets); claim 2's components and its causal-mask row, claims 3, 4's "
        "artefact-free share, 10 and Table 6 on them will read 'not run: ring'. Fix: add 'ring' "
        "to leakage.experiments.smoke.variants"
    ]
    # and the Snakefile's checks return it, with the openings' warning, before any job
    assert warnings[0] in _resolved(smoke_config).check()

    def add_ring(c):
        c["leakage"]["experiments"]["smoke"]["variants"].insert(1, "ring")

    assert _resolved(smoke_config, add_ring).decomposition_warnings() == []

    def ring_elsewhere(c):  # a pair is extracted once: another experiment's ring run serves it
        c["leakage"]["experiments"]["ring"] = {
            "models": ["tiny-random"],
            "datasets": ["kjv-first24"],
            "variants": ["causal", "ring"],
        }

    (only,) = _resolved(smoke_config, ring_elsewhere).decomposition_warnings()
    assert "decompose trained-rope, trained-rope-init on kjv-first24 without" in only


def test_an_identity_rope_condition_without_its_ring_run_is_named(smoke_config):
    def edit(c):
        c["leakage"]["experiments"]["smoke"]["variants"] = [
            "causal",
            "ring",
            "identity_rope",
            "identity_rope+bidirectional",
        ]

    # trained-rope's pair also runs identity_rope+bidirectional in experiment controls: the
    # union of the pair's runs decomposes, so both experiments that ask for it are named
    smoke, controls = _resolved(smoke_config, edit).decomposition_warnings()
    assert "without the 'identity_rope+ring' run" in smoke
    assert smoke.endswith("Fix: add 'identity_rope+ring' to leakage.experiments.smoke.variants")
    assert "decompose trained-rope, trained-rope-init, tiny-random on kjv-first24" in smoke
    assert controls.startswith("leakage.experiments.controls: ")
    assert "decompose trained-rope on kjv-first24 without the 'identity_rope+ring' run" in controls


def test_paper2_on_document_openings_is_named_per_dataset(smoke_config):
    (w,) = _resolved(smoke_config).openings_warnings()
    assert w.startswith(
        "datasets.kjv-first24: mode 'first' (document openings) in paper 2's "
        "leakage.experiments smoke, controls:"
    )
    assert "claims 1 and 2 and the negative controls will read 'not run'" in w
    assert w.endswith(
        "Fix: give those experiments a dataset with mode: chunks (chunks at random offsets)"
    )

    def chunks(c):
        c["datasets"]["kjv-first24"]["mode"] = "chunks"

    assert _resolved(smoke_config, chunks).openings_warnings() == []
    # paper 1 on document openings is what paper 1 reads: no word about it
    no_paper2 = _resolved(smoke_config, lambda c: c["leakage"].update(experiments={}))
    assert no_paper2.openings_warnings() == []


def _twin_config(smoke_config, **twin) -> dict:
    cfg = copy.deepcopy(smoke_config)
    cfg["models"]["tiny-random-twin"] = {"source": "random_init", "like": "tiny-random", **twin}
    cfg["paper1_llm"]["models"].append("tiny-random-twin")
    return cfg


def test_a_random_twin_of_a_random_model_with_its_seed_is_refused(smoke_config):
    """tiny-random is random_init with seed 0: a twin like: it with seed 0 (or none: 0 is the
    default) and no other change holds the same weights bit for bit."""
    for twin in ({"seed": 0}, {}, {"config": {"hidden_size": 32}}):
        cfg = _resolved(_twin_config(smoke_config, **twin))
        assert cfg.same_weights_as("tiny-random-twin") == "tiny-random", twin
        with pytest.raises(
            ConfigError,
            match=r"models.tiny-random-twin: random_init like: 'tiny-random' with seed 0, and "
            r"'tiny-random' is itself random_init with seed 0, .* the same, bit for bit, .* Fix: "
            r"give models.tiny-random-twin another seed \(e.g. seed: 1\)",
        ):
            cfg.check()
    # what makes the weights differ: another seed, a changed config, another dtype
    for twin in (
        {"seed": 1},
        {"config": {"hidden_size": 64}},
        {"config": {"rope_theta": 99.0}},  # a key tiny-random's known config does not set
        {"dtype": "bfloat16"},
        {"rope": "none"},  # the same weights, another model: no rotation
    ):
        cfg = _resolved(_twin_config(smoke_config, **twin))
        assert cfg.same_weights_as("tiny-random-twin") is None, twin
    # a twin of a model from files or trained here: its weights are not known before any job
    cfg = _resolved(smoke_config)
    assert cfg.same_weights_as("tiny-random") is None  # architecture, not like:
    cfg = _resolved(load("config.yaml"))
    assert cfg.same_weights_as("smollm2-135m-random") is None
    assert cfg.check() == []
