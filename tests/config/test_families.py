"""causalpos.config.families: one job per family of light jobs writes exactly the files the
config asks for, reads exactly the stores those files come from, and one merge job per
(model, dataset) writes every variant store a stage reads (no Snakemake run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

import causalpos.paths as paths
from causalpos.config import Resolved, family_paths, score_dirs

REPO = Path(__file__).resolve().parents[2]
SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
CONFIGS = ("config.yaml", "configs/smoke.yaml", "configs/paper.yaml", "configs/paper-shape.yaml")


def _resolved(name: str) -> Resolved:
    cfg = yaml.safe_load((REPO / name).read_text())
    validate(cfg, SCHEMA)
    return Resolved(cfg)


def _families(r: Resolved) -> dict[str, tuple[dict, tuple[str, ...], str]]:
    """rule -> (family, its output keys, the figure stems' prefix)."""
    return {
        "plot_simulation": (r.sim_figure_family(), ("outputs",), "sim_"),
        "plot_llm_appendix": (r.llm_appendix_family(), ("outputs",), "llm_appE_"),
        "plot_gram_figures": (r.gram_figure_family(), ("fig3", "fig8"), "train_fig"),
        "plot_paper2_heads": (r.paper2_heads_family(), ("outputs",), "paper2_heads_"),
        "plot_paper2_layers": (
            r.paper2_experiment_family("layers"),
            ("outputs", "claim1"),
            ("paper2_layers_", "paper2_claim1_"),
        ),
        "plot_paper2_shares": (
            r.paper2_experiment_family("shares"),
            ("outputs", "routes"),
            ("paper2_shares_", "paper2_routes_"),
        ),
        "plot_paper2_position0": (
            r.paper2_experiment_family("position0"),
            ("outputs",),
            "paper2_position0_",
        ),
    }


@pytest.mark.parametrize("name", CONFIGS)
def test_each_figure_target_is_written_by_exactly_one_family_job(name):
    r = _resolved(name)
    targets = [t for t in r.all_targets() if t.startswith("results/figures/")]
    families = _families(r)  # built once: each family resolves every experiment of the config
    written: list[str] = []
    for rule, (family, keys, prefix) in families.items():
        outputs = family_paths(family, *keys)
        assert all(Path(o).name.startswith(prefix) for o in outputs), (rule, outputs)
        assert set(outputs) <= set(targets), (rule, sorted(set(outputs) - set(targets)))
        written += outputs
    # no file of two families; every per-item figure of the config has its family
    assert len(written) == len(set(written))
    per_item = [
        t for t in targets if any(Path(t).name.startswith(p) for *_, p in families.values())
    ]
    assert sorted(per_item) == sorted(written), name


def test_the_default_configs_families_and_what_each_item_reads():
    r = _resolved("config.yaml")
    sim = r.sim_figure_family()
    assert sorted(sim) == sorted(r.config["figures"]["simulation"])
    for fig in sim.values():  # each figure reads its settings' stores, in the spec's order
        assert fig["stores"] == [f"results/sim/{s}.zarr" for s in fig["spec"]["settings"]]
    heads = r.paper2_heads_family()
    assert len(heads) == len(r.leakage_pairs()) == 5
    assert heads["smollm2-135m/kjv-chunks128-bos"] == {
        "store": "results/leakage/smollm2-135m/kjv-chunks128-bos.zarr",
        "outputs": [
            f"results/figures/paper2_heads_smollm2-135m_kjv-chunks128-bos.{f}"
            for f in ("png", "pdf")
        ],
        # the pair's display names (causalpos.figures.labels), its own only
        "names": {
            "kjv-chunks128-bos": "KJV Bible, 128-token chunks (BOS)",
            "smollm2-135m": "SmolLM2-135M-Instruct (Q4_1)",
        },
    }
    p0 = r.position0_family()
    assert sorted(family_paths(p0, "output")) == sorted(r.position0_stores())
    pair = p0["smollm2-135m/kjv-chunks128-bos"]
    assert pair["sink"] == "results/scores/smollm2-135m/kjv-chunks128-bos/causal.zarr"
    # the conditions in the config's order (the output's), each with its store in the pair's
    # merged directory
    conditions = r.position0_conditions("smollm2-135m", "kjv-chunks128-bos")
    assert pair["conditions"] == conditions == r.config["leakage"]["position0"]["conditions"]
    assert pair["stores"] == [
        f"results/scores/smollm2-135m/kjv-chunks128-bos/{c}.zarr" for c in conditions
    ]
    assert pair["data"] == r.data_store("smollm2-135m", "kjv-chunks128-bos")


@pytest.mark.parametrize("name", CONFIGS)
def test_one_merge_per_pair_writes_every_store_a_stage_reads(name):
    r = _resolved(name)
    read = r.paper1_score_stores() + [
        paths.SCORE_STORE.format(model=m, dataset=d, variant=v)
        for (m, d), variants in r.leakage_pairs().items()
        for v in variants
    ]
    read += [s for m, d in r.leakage_pairs() for s in r.position0_inputs(m, d)]
    if r.compare_section():
        inputs = r.compare_inputs()
        read += inputs["trained"] + inputs["init"]
    assert read
    for store in read:
        directory, variant = store.rsplit("/", 1)
        _, _, model, dataset = directory.split("/")
        assert directory == r.score_dir(model, dataset)
        assert variant.removesuffix(".zarr") in r.merge_variants(model, dataset), store
    # one directory per (model, dataset), each once
    dirs = score_dirs(read)
    assert len(dirs) == len({tuple(d.split("/")[2:]) for d in dirs})
