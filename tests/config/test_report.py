"""What `snakemake --report` shows of each figure and the names its labels and captions carry
(causalpos.config.report)."""

from __future__ import annotations

import pytest

from causalpos.config import ConfigError, Resolved
from causalpos.config.report import LABELS, labels, shown
from tests.config.configs import load


def test_the_report_shows_a_figures_png_and_leaves_its_other_formats_out():
    assert shown(["results/figures/a.png", "results/figures/a.pdf"]) == ["results/figures/a.png"]
    assert shown(["results/figures/a.pdf", "results/figures/a.png"]) == ["results/figures/a.png"]
    assert shown(["results/figures/a.pdf", "results/figures/a.svg"]) == ["results/figures/a.pdf"]
    assert shown([]) == []


@pytest.mark.parametrize("name", ["config.yaml", "configs/smoke.yaml", "configs/paper.yaml"])
def test_every_family_item_is_named_with_its_figure_model_and_dataset(name):
    cfg = Resolved(load(name))
    families = {
        "simulation": cfg.sim_figure_family(),
        "llm_appendix": cfg.llm_appendix_family(),
        "gram": cfg.gram_figure_family(),
        "paper2_heads": cfg.paper2_heads_family(),
        "paper2_experiment": cfg.paper2_experiment_family("layers"),
    }
    assert all(families.values()), [k for k, v in families.items() if not v]
    for kind, family in families.items():
        for item in family:
            names = cfg.report_names(kind, item, "F")
            assert set(LABELS) <= set(names) and all(names.values()), (kind, item, names)
            assert list(labels(names)) == list(LABELS)
    appendix = next(iter(families["llm_appendix"]))
    model, dataset, variant = appendix.split("/")
    assert cfg.report_names("llm_appendix", appendix, "App. E") == {
        "figure": "App. E",
        "model": model,
        "dataset": dataset,
        "variant": variant,
    }


def test_items_of_several_models_name_them_all():
    cfg = Resolved(load("configs/smoke.yaml"))
    smoke = cfg.report_names("paper2_experiment", "smoke", "Claim 1 by layer")
    assert smoke["model"] == "trained-rope, trained-rope-init, tiny-random"
    assert smoke["dataset"] == "kjv-first24" and smoke["experiment"] == "smoke"
    assert cfg.report_names("simulation", "fig2", "simulation") == {
        "figure": "simulation fig2",
        "model": "parameter-free decoder",
        "dataset": "l2_a000, l2_a020",
    }
    assert cfg.report_labels("Fig. 5", ["a", "b"], ["d"]) == {
        "figure": "Fig. 5",
        "model": "a, b",
        "dataset": "d",
    }
    assert cfg.report_labels("x.csv") == {
        "figure": "x.csv",
        "model": "every model",
        "dataset": "every dataset",
    }
    assert cfg.trained_labels("maps")["dataset"] == "kjv-first24"  # train.compare.dataset
    # paper1_llm.models and .datasets
    assert cfg.paper1_report_labels("Fig. 5") == {
        "figure": "Fig. 5",
        "model": "trained-rope, tiny-random",
        "dataset": "kjv-first24",
    }
    off = Resolved(load("configs/smoke.yaml", lambda c: c["paper1_llm"].update(models=[])))
    assert off.paper1_report_labels("Fig. 5")["model"] == "every model"
    with pytest.raises(ConfigError, match="no figure family 'heads'; known: simulation"):
        cfg.report_names("heads", "m/d", "F")
