"""The training stage of the session's smoke run (configs/smoke.yaml, tests/conftest.py), then
rerun guarantees.

Dry runs of the training stage's outputs and a small part of the simulation branch (paper 1's
theory check and Fig. 1), as targets on the command line, under an edited config (or library)
say what the edit reruns, in both branches.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
import yaml

from tests.wfutil import SMOKE, planned_jobs, rule_counts, snakemake

pytestmark = pytest.mark.slow


def _config(work: Path) -> dict:
    return yaml.safe_load((work / SMOKE).read_text())


def _train_targets(cfg: dict) -> list[str]:
    tr, fmts = cfg["train"], cfg["figures"]["formats"]
    out = [f"resources/models/trained-{v}" for v in tr["variants"]]
    out += ["results/lengthgen/lengthgen.zarr", "results/stats/train_lengthgen.csv"]
    stems = ["train_loss_curves", "train_loss_by_position"]
    for m in tr["gram"]["models"]:
        out.append(f"results/gram/{m}.zarr")
        stems += [f"train_fig3_{m}", f"train_fig8_{m}"]
    out += [f"results/figures/{s}.{f}" for s in stems for f in fmts]
    return out


def _targets(cfg: dict) -> list[str]:
    """The training outputs plus cheap simulation-branch outputs (to see that it does not rerun)."""
    sim = ["results/sim/theory.csv"] + [
        f"results/figures/fig1_theory.{f}" for f in cfg["figures"]["formats"]
    ]
    return _train_targets(cfg) + sim


def _open(path: Path) -> xr.Dataset:
    return xr.open_zarr(path, consolidated=False, chunks=None)


@pytest.fixture(scope="module")
def pipeline(smoke_pipeline) -> Path:
    """The session's smoke run (tests/conftest.py)."""
    return smoke_pipeline


def _edited(pipeline: Path, tmp_path: Path, edit) -> str:
    cfg = _config(pipeline)
    edit(cfg)
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


def _reruns(pipeline: Path, configfile: str = SMOKE) -> list[tuple[str, str]]:
    """Jobs a dry run of the built targets plans under ``configfile``."""
    return planned_jobs(pipeline, *_targets(_config(pipeline)), "--configfile", configfile)


# ---------------------------------------------------------------------------------------------
# Numbers


def test_trained_models_load_and_reproduce_their_heldout_loss(pipeline):
    from causalpos.models.load import load_model
    from causalpos.paper1.gram import rope_is_identity
    from causalpos.training import batches, checkpoints, corpus, loss, tokenizer, trainlog

    tr = _config(pipeline)["train"]
    tok_dir = pipeline / "resources" / "tokenizers" / tr["tokenizer"]["name"]
    meta = json.loads((tok_dir / "causalpos_tokenizer.json").read_text())
    assert (
        meta["heldout_sources"] == tr["heldout"]
        and meta["vocab_size"] == tr["tokenizer"]["vocab_size"]
    )
    train_texts, heldout_texts = corpus.prepare_texts(tr["corpus"], tr["heldout"])
    assert meta["n_texts"] == len(train_texts)  # held-out books never reach the tokenizer
    heldout = tokenizer.encode_documents(tok_dir, heldout_texts)
    settings = {}
    for variant in tr["variants"]:
        out = pipeline / "resources" / "models" / f"trained-{variant}"
        assert not checkpoints.default_checkpoint_dir(
            out
        ).exists()  # removed once the model is complete
        summary = trainlog.read_training_summary(out)
        settings[variant] = summary["settings"]
        assert summary["step"] == tr["steps"] and summary["settings"]["context"] == tr["context"]
        # the rule's code fingerprint travels with the checkpoints, so a code edit never resumes old ones
        assert len(summary["provenance"]["code"]) == 16
        model, tok = load_model(out)
        assert (out / "tokenizer.json").read_bytes() == (tok_dir / "tokenizer.json").read_bytes()
        assert model.config.causalpos_variant == variant
        assert rope_is_identity(model) == (variant == "nope")
        eval_tokens = batches.heldout_windows(
            heldout, n=tr["n_eval"], length=tr["context"], bos_id=tok.bos_token_id
        )
        nll = loss.evaluate(model, eval_tokens, batch=tr["batch"])
        assert nll == pytest.approx(summary["final_heldout_loss"], rel=1e-6, abs=1e-6)
        # random init is ~uniform over the vocabulary; 20 updates at lr 1e-2 learn at least frequencies
        assert summary["initial_heldout_loss"] == pytest.approx(
            math.log(tr["tokenizer"]["vocab_size"]), abs=0.1
        )
        assert summary["final_heldout_loss"] < summary["initial_heldout_loss"] - 0.5
        curve = trainlog.read_loss_curve(out)
        assert curve["step"].tolist() == list(range(tr["steps"] + 1))
        assert curve["heldout_loss"][-1] == summary["final_heldout_loss"]
    # one factor: the variants' settings (data hash, shape, schedule, seed) differ in the variant only
    a, b = ({k: v for k, v in s.items() if k != "variant"} for s in settings.values())
    assert a == b


def test_gram_stores_satisfy_their_identities(pipeline):
    from causalpos.models.load import load_model
    from causalpos.training import corpus

    tr = _config(pipeline)["train"]
    _, heldout_texts = corpus.prepare_texts(tr["corpus"], tr["heldout"])
    g = tr["gram"]
    for name in g["models"]:
        ds = _open(pipeline / "results" / "gram" / f"{name}.zarr")
        n, t = g["n_sequences"], g["seq_len"]
        assert ds["gram"].shape == (9, t, t) and ds["score"].shape == (tr["layers"], t, t)
        assert ds.attrs["n_samples"] == n and ds.attrs["model"] == name
        # the hand-recomputed layer 1 matched the model's hidden_states[1]
        assert ds.attrs["x1_max_rel_error"] < ds.attrs["x1_tolerance"] == 1e-5
        assert ds.attrs["rope_identity"] == (name == "trained-nope")
        tokens = ds["tokens"].values
        model, tok = load_model(pipeline / "resources" / "models" / name)
        assert (tokens[:, 0] == tok.bos_token_id).all()
        # held-out text only: every sample is the start of a held-out chapter
        for row in tokens:
            assert any(text.startswith(tok.decode(row[1:])) for text in heldout_texts)
        # panel (a) diagonal = mean squared norm of input_layernorm(embeddings), computed directly
        with torch.no_grad():
            y = model.model.layers[0].input_layernorm(
                model.model.embed_tokens(torch.as_tensor(tokens))
            )
        direct = (y.double() ** 2).sum(-1).mean(0).numpy()
        np.testing.assert_allclose(np.diagonal(ds["gram"].sel(panel="a").values), direct, rtol=1e-5)
        # score panels (b), (i) from the layer-1 trace equal Fig. 8's layers 1, 2 (separate code path)
        for panel, layer in (("b", 0), ("i", 1)):
            np.testing.assert_allclose(
                ds["gram"].sel(panel=panel).values,
                ds["score"].isel(layer=layer).values,
                rtol=1e-5,
                atol=1e-6,
            )
        upper = np.triu_indices(t, 1)
        assert np.isnan(ds["gram"].values[:, upper[0], upper[1]]).all()
        assert np.isfinite(ds["gram"].values[:, np.tril_indices(t)[0], np.tril_indices(t)[1]]).all()


def test_loss_by_position_store_and_table(pipeline):
    from causalpos.models.load import load_model
    from causalpos.training.lengthgen import per_token_nll

    tr = _config(pipeline)["train"]
    lg = tr["lengthgen"]
    ds = _open(pipeline / "results" / "lengthgen" / "lengthgen.zarr")
    seq_len = int(lg["length_factor"] * tr["context"])
    variants = list(tr["variants"])
    assert ds["nll"].dims == ("variant", "sequence", "position")
    assert ds["nll"].shape == (len(variants), lg["n_sequences"], seq_len - 1)
    assert ds["position"].values.tolist() == list(range(1, seq_len))
    assert list(ds["variant"].values) == variants and list(ds["positional"].values) == variants
    assert (ds["train_context"].values == tr["context"]).all()
    np.testing.assert_allclose(
        ds["nll_mean"].values, ds["nll"].values.astype(np.float64).mean(1), rtol=1e-6
    )
    assert (ds["nll_lo"].values <= ds["nll_mean"].values).all() and (
        ds["nll_mean"].values <= ds["nll_hi"].values
    ).all()
    # independent recomputation of two sequences' per-token loss for each variant
    tokens = ds["tokens"].values[:2]
    for v in variants:
        model, _ = load_model(pipeline / "resources" / "models" / f"trained-{v}")
        np.testing.assert_allclose(
            per_token_nll(model, tokens), ds["nll"].sel(variant=v).values[:2], rtol=1e-5, atol=1e-5
        )
    table = pd.read_csv(pipeline / "results" / "stats" / "train_lengthgen.csv")
    assert table["variant"].tolist() == variants
    assert (table["seq_len"] == seq_len).all() and (table["train_context"] == tr["context"]).all()
    np.testing.assert_allclose(table["excess_mean"], ds["excess_mean"].values, rtol=1e-12)
    np.testing.assert_allclose(
        table["final_heldout_loss"], ds["final_heldout_loss"].values, rtol=1e-12
    )
    for fig in _train_targets(_config(pipeline)):
        if fig.startswith("results/figures/"):
            assert (pipeline / fig).stat().st_size > 10_000, fig


# ---------------------------------------------------------------------------------------------
# Reruns


def test_second_run_has_nothing_to_do(pipeline):
    assert _reruns(pipeline) == []


def test_one_variants_steps_rerun_that_model_and_what_reads_it(pipeline, tmp_path):
    edited = _edited(
        pipeline, tmp_path, lambda c: c["train"]["variants"].update(nope={"steps": 25})
    )
    jobs = _reruns(pipeline, edited)
    assert ("train_model", "variant=nope") in jobs and ("gram_panels", "model=trained-nope") in jobs
    assert rule_counts(jobs) == {
        "train_model": 1,  # nope only; the tokenizer and rope stay
        "gram_panels": 1,
        "plot_gram_figures": 1,
        "length_generalization": 1,  # reads every variant
        "plot_loss_curves": 1,
        "plot_loss_by_position": 1,
    }, jobs


def test_section_hyper_parameter_reruns_every_model_not_the_tokenizer(pipeline, tmp_path):
    edited = _edited(pipeline, tmp_path, lambda c: c["train"].update(lr=0.02))
    counts = rule_counts(_reruns(pipeline, edited))
    assert counts == {
        "train_model": 2,
        "gram_panels": 2,
        "plot_gram_figures": 1,  # one job draws every model's Figs. 3 and 8
        "length_generalization": 1,
        "plot_loss_curves": 1,
        "plot_loss_by_position": 1,
    }, counts


@pytest.mark.parametrize(
    "edit",
    [
        lambda c: c["train"].update(window=8),  # neither rope nor nope reads it
        lambda c: c["train"].update(checkpoint_every=3),  # where the resume points are
        lambda c: c["train"]["gram"].update(batch_size=5),
        lambda c: c.update(device="auto"),
        lambda c: c["train"].update(variants=dict(reversed(list(c["train"]["variants"].items())))),
    ],
    ids=["swa-only-key", "checkpoint_every", "batch_size", "device", "variants-reordered"],
)
def test_settings_that_do_not_change_a_result_rerun_nothing(pipeline, tmp_path, edit):
    assert _reruns(pipeline, _edited(pipeline, tmp_path, edit)) == []


def test_editing_gram_module_reruns_only_gram_panels_and_their_figures(pipeline):
    module = pipeline / "src" / "causalpos" / "paper1" / "gram.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit\n")
        counts = rule_counts(_reruns(pipeline))
        assert counts == {"gram_panels": 2, "plot_gram_figures": 1}, counts
    finally:
        module.write_text(original)
    assert _reruns(pipeline) == []


@pytest.mark.parametrize(
    "edit, names",
    [
        (lambda c: c["train"]["variants"].update(alibi={}), "alibi"),
        (lambda c: c["train"]["variants"].update(rope={"window": 8}), "window"),
        (lambda c: c["train"]["gram"].update(models=["trained-ntk"]), "trained-ntk"),
        (lambda c: c["train"].update(stepz=3), "stepz"),
    ],
)
def test_bad_training_config_fails_before_any_job_naming_the_key(pipeline, tmp_path, edit, names):
    proc = snakemake(pipeline, "-n", "--configfile", _edited(pipeline, tmp_path, edit), check=False)
    assert proc.returncode != 0
    assert names in proc.stdout + proc.stderr
