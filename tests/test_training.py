"""causalpos.training: tokenizer, one-factor variants, deterministic and resumable training.

Tiny models (hidden 32, 2 layers) on a slice of the KJV keep the whole file under ~40 s on 2 cores.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch

from causalpos.data import kjv_documents
from causalpos.training import (
    architecture,
    batches,
    checkpoints,
    loop,
    loss,
    settings,
    tokenizer,
    trainlog,
)
from causalpos.training.corpus import split_documents
from causalpos.training.settings import RunOptions, TrainSettings

TINY = dict(
    hidden=32,
    layers=2,
    heads=4,
    kv_heads=2,
    intermediate=64,
    context=32,
    batch=8,
    lr=1e-2,
    warmup=5,
    eval_every=10,
    n_eval=16,
)
VOCAB = 384


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Tokenizer trained on Genesis + Exodus; held-out stream from Ruth and Jonah."""
    docs = kjv_documents("chapter", books=["Genesis", "Exodus", "Ruth", "Jonah"])
    train_texts, heldout_texts = split_documents(docs, ["Ruth", "Jonah"])
    tok_dir = tmp_path_factory.mktemp("tok")
    tokenizer.fit_tokenizer(train_texts, VOCAB, tok_dir, seed=0)
    return {
        "tok": tok_dir,
        "train_texts": train_texts,
        "heldout_texts": heldout_texts,
        "train": tokenizer.encode_documents(tok_dir, train_texts),
        "heldout": tokenizer.encode_documents(tok_dir, heldout_texts),
    }


def _train(corpus, out: Path, variant: str = "rope", **kw):
    """Train ``variant`` on the tiny setting; ``kw``: settings and run options (both flat)."""
    args = dict(TINY, steps=20, seed=0, checkpoint_every=10)
    args.update(kw)
    run_keys = {f.name for f in fields(RunOptions)}
    return loop.run_training(
        TrainSettings.from_params(
            {"variant": variant} | {k: v for k, v in args.items() if k not in run_keys}
        ),
        tokenizer_dir=corpus["tok"],
        out_dir=out,
        train_ids=corpus["train"],
        heldout_ids=corpus["heldout"],
        run=RunOptions(**{k: v for k, v in args.items() if k in run_keys}),
    )


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path / "model.safetensors")


# ---------------------------------------------------------------------------------------------
# Tokenizer and data


def test_tokenizer_prepends_bos_and_round_trips(corpus, tmp_path):
    tok = tokenizer.load_tokenizer(corpus["tok"])
    text = "And Ruth said, Intreat me not to leave thee."
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id == 0
    assert ids[1:] == tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids[1:]) == text  # byte-level BPE is lossless
    assert (tok.eos_token_id, tok.pad_token_id, len(tok)) == (1, 2, VOCAB)
    # BPE training is deterministic: the same texts give the same tokenizer, byte for byte.
    tokenizer.fit_tokenizer(corpus["train_texts"], VOCAB, tmp_path, seed=0)
    assert (tmp_path / "tokenizer.json").read_bytes() == (
        Path(corpus["tok"]) / "tokenizer.json"
    ).read_bytes()


def test_encode_documents_separates_with_eos(corpus):
    tok = tokenizer.load_tokenizer(corpus["tok"])
    ids = tokenizer.encode_documents(corpus["tok"], ["In the beginning", "God"])
    a = tok("In the beginning", add_special_tokens=False).input_ids
    b = tok("God", add_special_tokens=False).input_ids
    assert ids.tolist() == a + [1] + b + [1]


def test_split_documents_by_book():
    docs = kjv_documents("chapter", books=["Ruth", "Jonah", "Joel"])
    train, held = split_documents(docs, ["jonah"])
    assert (len(train), len(held)) == (4 + 3, 4)
    with pytest.raises(ValueError, match="Jonas"):
        split_documents(docs, ["Jonas"])


def test_batches_are_pure_functions_of_seed_and_step(corpus):
    ids = corpus["train"]
    a = batches.batch_at(ids, 7, batch=4, context=16, bos_id=0, seed=3)
    assert torch.equal(a, batches.batch_at(ids, 7, batch=4, context=16, bos_id=0, seed=3))
    assert not torch.equal(a, batches.batch_at(ids, 8, batch=4, context=16, bos_id=0, seed=3))
    assert a.shape == (4, 16) and bool((a[:, 0] == 0).all())
    # Each row is BOS + a contiguous slice of the stream.
    start = int(
        np.flatnonzero(
            np.lib.stride_tricks.sliding_window_view(ids, 15).__eq__(a[0, 1:].numpy()).all(1)
        )[0]
    )
    assert ids[start : start + 15].tolist() == a[0, 1:].tolist()


def test_lr_schedule_values():
    f = [loop.lr_factor(s, steps=110, warmup=10, min_lr_ratio=0.1) for s in range(111)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert f[10] == pytest.approx(1.0)
    assert f[60] == pytest.approx(0.1 + 0.9 * 0.5)  # cosine midpoint
    assert f[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(f[10:], f[11:]))


def test_unigram_baselines_match_direct_computation():
    train = np.array([0, 1, 1, 2, 2, 2])
    eval_tokens = torch.tensor([[9, 1, 1, 2, 3]])  # column 0 (BOS) is never a target
    out = batches.unigram_baselines(train, eval_tokens, vocab_size=4)
    p = np.array([2, 1, 1]) / 4
    assert out["unigram_entropy"] == pytest.approx(-(p * np.log(p)).sum())
    q = (np.array([1, 2, 3, 0]) + 0.5) / 8.0
    assert out["unigram_xent"] == pytest.approx(
        -(2 * np.log(q[1]) + np.log(q[2]) + np.log(q[3])) / 4
    )


# ---------------------------------------------------------------------------------------------
# Variants


def _configs(vocab=64, context=32):
    shape = settings.ModelShape(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64)
    return {
        v: architecture.build_config(v, vocab_size=vocab, shape=shape, context=context)
        for v in settings.VARIANTS
    }


def test_variants_start_from_identical_weights():
    models = {v: architecture.build_model(c, seed=5) for v, c in _configs().items()}
    ref = models["rope"].state_dict()
    for v, m in models.items():
        sd = m.state_dict()
        assert sd.keys() == ref.keys(), v
        assert all(torch.equal(sd[k], ref[k]) for k in ref), v
    assert type(models["swa"]).__name__ == "MistralForCausalLM"
    assert models["swa"].config.sliding_window == 8
    assert models["nope"].config.causalpos_rope == "none"
    assert not hasattr(models["rope"].config, "causalpos_rope")
    other = architecture.build_model(_configs()["rope"], seed=6).state_dict()
    assert not torch.equal(
        other["model.layers.0.self_attn.q_proj.weight"],
        ref["model.layers.0.self_attn.q_proj.weight"],
    )


def test_ntk_inverse_frequencies_follow_llama3_scaling():
    cfgs = _configs(context=32)
    rope = architecture.build_model(cfgs["rope"], seed=0).model.rotary_emb.inv_freq.double().numpy()
    ntk = architecture.build_model(cfgs["ntk"], seed=0).model.rotary_emb.inv_freq.double().numpy()
    d, theta = 8, 10000.0
    base = theta ** (-np.arange(0, d, 2) / d)
    np.testing.assert_allclose(rope, base, rtol=1e-6)
    # Llama 3.1 (factor 8, low 1, high 4, original context = the training context 32):
    # wavelength < 32/4 unchanged; > 32/1 divided by 8; smooth interpolation in between.
    factor, low, high, orig = 8.0, 1.0, 4.0, 32.0
    wavelen = 2 * np.pi / base
    smooth = (orig / wavelen - low) / (high - low)
    expected = np.where(
        wavelen < orig / high,
        base,
        np.where(wavelen > orig / low, base / factor, (1 - smooth) * base / factor + smooth * base),
    )
    np.testing.assert_allclose(ntk, expected, rtol=1e-6)
    # d = 8: wavelengths 6.3, 63, 628, 6283 → the first unchanged, the other three divided by 8.
    assert ntk[0] == pytest.approx(rope[0], rel=1e-7)
    np.testing.assert_allclose(ntk[1:], rope[1:] / 8, rtol=1e-6)
    assert cfgs["ntk"].rope_parameters["rope_type"] == "llama3"


_CAPTURED: list[tuple[torch.Tensor, torch.Tensor]] = []


def _register_test_capture() -> str:
    """An attention function that records post-rotary q, k and then runs eager attention."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.models.llama.modeling_llama import eager_attention_forward

    def attn(module, query, key, value, attention_mask, **kw):
        _CAPTURED.append((query.detach().clone(), key.detach().clone()))
        return eager_attention_forward(module, query, key, value, attention_mask, **kw)

    AttentionInterface.register("causalpos_test_train", attn)
    AttentionMaskInterface.register("causalpos_test_train", eager_mask)
    return "causalpos_test_train"


def test_nope_layer1_scores_equal_unrotated_projection():
    name = _register_test_capture()
    x = torch.randint(3, 64, (2, 12))
    for variant in ("nope", "rope"):
        model = architecture.build_model(_configs()[variant], seed=1).eval()
        model.set_attn_implementation(name)
        _CAPTURED.clear()
        with torch.no_grad():
            model(input_ids=x)
            layer = model.model.layers[0]
            y = layer.input_layernorm(model.model.embed_tokens(x))
            q = layer.self_attn.q_proj(y).view(2, 12, 4, 8).transpose(1, 2)
            k = (
                layer.self_attn.k_proj(y)
                .view(2, 12, 2, 8)
                .transpose(1, 2)
                .repeat_interleave(2, dim=1)
            )
        q_model, k_model = _CAPTURED[0]
        s_model = q_model @ k_model.repeat_interleave(2, dim=1).transpose(-1, -2) / math.sqrt(8)
        s_direct = q @ k.transpose(-1, -2) / math.sqrt(8)
        if variant == "nope":
            assert torch.equal(q_model, q)  # identity rotation: bit for bit
            torch.testing.assert_close(s_model, s_direct, rtol=0, atol=1e-7)
        else:  # the same test on RoPE must see the rotation (position 0 is unrotated)
            assert torch.equal(q_model[:, :, 0], q[:, :, 0])
            assert (s_model - s_direct).abs().max() > 1e-3


def test_swa_attention_ignores_keys_beyond_the_window():
    """Perturb token p: with L layers of window W, output t changes iff 0 <= t - p <= L (W - 1)."""
    cfgs = _configs(context=32)
    x = torch.randint(3, 64, (1, 32))
    y = x.clone()
    p = 3
    y[0, p] = (x[0, p] + 1 - 3) % 61 + 3
    window, n_layers = cfgs["swa"].sliding_window, cfgs["swa"].num_hidden_layers
    reach = n_layers * (window - 1)
    for variant in ("swa", "rope"):
        model = architecture.build_model(cfgs[variant], seed=2).eval()
        with torch.no_grad():
            a, b = model(input_ids=x).logits[0], model(input_ids=y).logits[0]
        changed = [t for t in range(32) if not torch.equal(a[t], b[t])]
        if variant == "swa":
            assert changed == list(range(p, p + reach + 1))  # 3 .. 17: later outputs bit-identical
        else:
            assert changed == list(range(p, 32))  # full causal attention: every later output moves


# ---------------------------------------------------------------------------------------------
# Training runs


def test_loss_decreases_on_kjv(corpus, tmp_path):
    s = _train(corpus, tmp_path / "m", steps=30, checkpoint_every=30)
    curve = trainlog.read_loss_curve(tmp_path / "m")
    held = curve["heldout_loss"][~np.isnan(curve["heldout_loss"])]
    assert curve["step"].tolist() == list(range(31)) and len(held) == 4  # steps 0, 10, 20, 30
    # Random init predicts ~uniformly: loss log(384) = 5.95. Measured after 30 updates (seeds 0-2,
    # lr 1e-2 and 2e-2): 4.81-4.83, a drop of 1.13-1.16 nats, i.e. the model has learnt at least the
    # token frequencies (train-unigram cross-entropy on this held-out text: 4.75). A drop of 1.0
    # fails for a broken gradient, optimiser or schedule; beating the unigram needs longer runs
    # (the CPU default: 3.8 vs 5.7 nats).
    assert s["initial_heldout_loss"] == pytest.approx(math.log(VOCAB), abs=0.05)
    assert s["final_heldout_loss"] < s["initial_heldout_loss"] - 1.0
    assert s["final_heldout_loss"] == held[-1]
    saved = json.loads((tmp_path / "m" / trainlog.TRAINING_JSON).read_text())
    assert saved["final_heldout_loss"] == s["final_heldout_loss"]


def test_same_seed_identical_and_resume_bit_identical(corpus, tmp_path):
    _train(corpus, tmp_path / "a")
    _train(corpus, tmp_path / "b")
    # Interrupted after 6 updates (checkpoint written at the stop), then resumed to 20.
    partial = _train(corpus, tmp_path / "r", stop_after=6)
    assert partial["step"] == 6 and not (tmp_path / "r" / trainlog.TRAINING_JSON).exists()
    assert [s for s, _ in checkpoints.list_checkpoints(tmp_path / "r.checkpoints")] == [6]
    # the resume point is plain data: it loads with weights_only=True (no pickled code)
    ((_, ckpt6),) = checkpoints.list_checkpoints(tmp_path / "r.checkpoints")
    state = torch.load(ckpt6 / checkpoints.TRAINER_STATE, map_location="cpu", weights_only=True)
    assert state["step"] == 6 and isinstance(state["torch_rng"], torch.Tensor)
    _train(corpus, tmp_path / "r")
    assert [s for s, _ in checkpoints.list_checkpoints(tmp_path / "r.checkpoints")] == [
        20
    ]  # keep_checkpoints=1
    _train(corpus, tmp_path / "c", seed=1)
    wa, wb, wr, wc = (_weights(tmp_path / n) for n in "abrc")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert all(torch.equal(wa[k], wr[k]) for k in wa)
    assert not torch.equal(
        wa["model.layers.0.self_attn.q_proj.weight"], wc["model.layers.0.self_attn.q_proj.weight"]
    )
    assert (tmp_path / "a" / trainlog.LOSS_CURVE).read_text() == (
        tmp_path / "r" / trainlog.LOSS_CURVE
    ).read_text()
    # A checkpoint made with other settings is refused, not silently mixed in.
    with pytest.raises(ValueError, match="other settings"):
        _train(corpus, tmp_path / "r", lr=2e-2)


def test_trainer_state_is_plain_data_for_weights_only_loading(tmp_path):
    state = checkpoints.plain_state(
        {
            "rng": np.random.default_rng(0).bit_generator.state["state"]["state"],
            "x": np.float32(1.5),
            "a": np.arange(3),
            "rows": [{"loss": np.float64(2.0)}],
            "betas": (0.9, 0.95),
        }
    )
    torch.save(state, tmp_path / "s.pt")
    back = torch.load(tmp_path / "s.pt", weights_only=True)
    assert back["x"] == 1.5 and back["rows"][0]["loss"] == 2.0 and back["betas"] == (0.9, 0.95)
    assert torch.equal(back["a"], torch.arange(3))
    with pytest.raises(TypeError, match="weights_only"):
        checkpoints.plain_state({"gen": np.random.default_rng(0)})


@pytest.mark.parametrize("variant", settings.VARIANTS)
def test_checkpoint_round_trip_reproduces_heldout_loss(corpus, tmp_path, variant):
    """The saved model, loaded through transformers, recomputes the final held-out loss exactly."""
    from transformers import AutoModelForCausalLM

    s = _train(
        corpus, tmp_path / variant, variant=variant, steps=5, checkpoint_every=5, eval_every=5
    )
    eval_tokens = batches.heldout_windows(
        corpus["heldout"], n=TINY["n_eval"], length=TINY["context"], bos_id=0
    )
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / variant)
    model = architecture.apply_causalpos_attributes(plain)
    assert loss.evaluate(model, eval_tokens, batch=TINY["batch"]) == s["final_heldout_loss"]
    models = pytest.importorskip("causalpos.models.load")
    loaded, tok = models.load_model(tmp_path / variant)
    assert loss.evaluate(loaded, eval_tokens, batch=TINY["batch"]) == s["final_heldout_loss"]
    assert tok.bos_token_id == 0
    x = eval_tokens[:2]
    with torch.no_grad():
        assert torch.equal(model(input_ids=x).logits, loaded(input_ids=x).logits)
    if variant == "nope":  # loading without honouring causalpos_rope gives a different (RoPE) model
        raw = AutoModelForCausalLM.from_pretrained(tmp_path / variant)
        with torch.no_grad():
            diff = (raw(input_ids=x).logits - model(input_ids=x).logits).abs()
        assert float(diff[:, 0].max()) == 0.0  # position 0 is unrotated either way
        assert float(diff[:, 1:].max()) > 1e-3


def test_restart_on_mismatch_and_provenance(corpus, tmp_path):
    """What a pipeline rerun needs: stale checkpoints (other settings or code) are discarded, not resumed."""
    out = tmp_path / "m"
    _train(corpus, out, stop_after=6, provenance={"code": "old"})
    with pytest.raises(
        ValueError, match="provenance"
    ):  # same settings, other code: refused by default
        _train(corpus, out, provenance={"code": "new"})
    s = _train(
        corpus, out, provenance={"code": "new"}, on_mismatch="restart", keep_final_checkpoint=False
    )
    assert s["provenance"] == {"code": "new"} and s["step"] == 20
    assert not checkpoints.default_checkpoint_dir(out).exists()
    _train(corpus, tmp_path / "ref", provenance={"code": "new"})  # uninterrupted, from scratch
    wa, wb = _weights(out), _weights(tmp_path / "ref")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert json.loads((out / trainlog.TRAINING_JSON).read_text())["provenance"] == {"code": "new"}
    # the tokenizer directory is replaced whole, with the provenance given
    tok = tmp_path / "tok"
    tokenizer.fit_tokenizer(
        corpus["train_texts"], VOCAB, tok, extra_meta={"corpus": {"type": "kjv"}}
    )
    (tok / "stale.txt").write_text("x")
    tokenizer.fit_tokenizer(
        corpus["train_texts"], VOCAB, tok, extra_meta={"corpus": {"type": "kjv"}}
    )
    assert not (tok / "stale.txt").exists()
    assert json.loads((tok / "causalpos_tokenizer.json").read_text())["corpus"] == {"type": "kjv"}


# ---------------------------------------------------------------------------------------------
# Settings declared once; checkpoints of earlier code


def test_config_keys_are_the_settings_fields_and_the_schema_declares_each_with_its_default():
    import yaml

    from causalpos.config import TRAIN_KEYS, TRAIN_TYPE_KEYS

    shared, own = settings.config_keys()
    assert (TRAIN_KEYS, TRAIN_TYPE_KEYS) == (shared, own)
    assert own == {"swa": ("window",), "ntk": ("ntk_factor",)}
    every = set(shared) | {k for keys in own.values() for k in keys}
    # every field is a config key but the variant (from `positional`), the seed (the top-level
    # seed) and the llama3 original context (always the training context)
    fields_ = {f.name for f in fields(settings.ModelShape)}
    fields_ |= {f.name for f in fields(TrainSettings)} - {"shape"}
    assert fields_ - every == {"variant", "seed", "ntk_original_context"}
    assert len(shared) == 18 and len(every) == 20
    schema = yaml.safe_load(
        (Path(__file__).parents[1] / "workflow/schemas/config.schema.yaml").read_text()
    )
    section = schema["properties"]["train"]["properties"]
    per_variant = section["variants"]["additionalProperties"]["properties"]
    assert set(per_variant) == every | {"positional", "seed"}
    default = TrainSettings()
    for key in every:
        value = getattr(default.shape if hasattr(default.shape, key) else default, key)
        if key == "window":  # None: a quarter of the context
            value = TrainSettings(variant="swa").resolved().window
        assert section[key]["default"] == value, key


def test_settings_from_params_names_an_unknown_key_and_check_names_the_bad_value():
    s = TrainSettings.from_params({"variant": "swa", "hidden": 32, "context": 64, "lr": 0.5})
    assert (s.shape.hidden, s.shape.layers, s.context, s.lr) == (32, 4, 64, 0.5)
    r = s.resolved()
    assert (r.window, r.ntk_factor, r.ntk_original_context) == (16, 0.0, None)
    r = TrainSettings(variant="ntk", context=64).resolved()
    assert (r.window, r.ntk_factor, r.ntk_original_context) == (None, 8.0, 64)
    with pytest.raises(ValueError, match=r"no key\(s\) \['hiden'\]"):
        TrainSettings.from_params({"hiden": 32})
    with pytest.raises(ValueError, match="warmup=9 must be in"):
        TrainSettings(steps=5, warmup=9).check()
    with pytest.raises(ValueError, match="unknown variant 'alibi'"):
        TrainSettings(variant="alibi").check()
    with pytest.raises(ValueError, match="on_mismatch='skip'"):
        RunOptions(on_mismatch="skip").check()


#: trainer_state.pt as the code before causalpos.training wrote it (models/train.py at 28c7187).
OLD_TRAINER_STATE_KEYS = [
    "step",
    "settings",
    "provenance",
    "optimizer",
    "scheduler",
    "torch_rng",
    "cuda_rng",
    "rows",
    "elapsed_s",
    "cpu_s",
]


def _old_settings_record(corpus) -> dict:
    """The ``settings`` record of the tiny rope run, laid out as the earlier code wrote it (its
    TrainSettings.to_dict: vocab_size after variant, the shape nested, data hash last)."""
    import hashlib

    h = hashlib.sha256()
    for a in (corpus["train"], corpus["heldout"]):
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        h.update(b"|")
    shape = dict(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64)
    return {
        "variant": "rope",
        "vocab_size": VOCAB,
        "shape": {**shape, "rope_theta": 10000.0, "tie_embeddings": True},
        "context": 32,
        "steps": 20,
        "batch": 8,
        "lr": 1e-2,
        "warmup": 5,
        "min_lr_ratio": 0.1,
        "weight_decay": 0.1,
        "grad_clip": 1.0,
        "seed": 0,
        "window": None,
        "ntk_factor": 0.0,
        "ntk_original_context": None,
        "eval_every": 10,
        "n_eval": 16,
        "dtype": "float32",
        "train_tokens": len(corpus["train"]),
        "heldout_tokens": len(corpus["heldout"]),
        "data_hash": h.hexdigest()[:16],
    }


def test_a_checkpoint_in_the_format_of_earlier_code_resumes_to_the_uninterrupted_result(
    corpus, tmp_path
):
    """Checkpoints written before the training package still resume: the same directory and file
    names, the same trainer-state keys, the same settings record (written out literally here).
    (Checked once against the earlier code itself: its step-6 checkpoint, resumed by this code,
    ends bit-identical to its own uninterrupted run.)"""
    ckpt = checkpoints.default_checkpoint_dir(tmp_path / "r") / "step-000006"
    _train(corpus, tmp_path / "r", stop_after=6)
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "trainer_state.pt",
    ]
    state = torch.load(ckpt / "trainer_state.pt", map_location="cpu", weights_only=True)
    old = _old_settings_record(corpus)
    assert list(state) == OLD_TRAINER_STATE_KEYS
    assert state["settings"] == old and list(state["settings"]) == list(old)
    assert state["scheduler"]["lr_lambdas"] == [None, None]  # plain functions: no state saved
    # the trainer state as the earlier code saved it: that dict, with the literal record
    torch.save({**state, "settings": old}, ckpt / "trainer_state.pt")
    s = _train(corpus, tmp_path / "r")
    ref = _train(corpus, tmp_path / "ref")
    wr, wref = _weights(tmp_path / "r"), _weights(tmp_path / "ref")
    assert wr.keys() == wref.keys() and all(torch.equal(wr[k], wref[k]) for k in wr)
    assert (tmp_path / "r" / trainlog.LOSS_CURVE).read_bytes() == (
        tmp_path / "ref" / trainlog.LOSS_CURVE
    ).read_bytes()
    assert s["settings"] == ref["settings"] == old


def test_training_stops_where_the_loss_stops_being_finite(corpus, tmp_path):
    """lr 1e30 sends the weights to inf: the third update's loss is NaN (the first runs at lr 0,
    in the warmup) and the run stops there, naming the step and the key to lower; no model."""
    with pytest.raises(
        loop.TrainingDiverged,
        match=r"diverged at step 3: the training loss is nan .*lower train\.lr",
    ):
        _train(corpus, tmp_path / "m", lr=1e30, warmup=1, steps=5)
    assert not (tmp_path / "m").exists()


def test_a_held_out_loss_that_is_not_finite_stops_training(corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "evaluate", lambda *a, **k: float("nan"))
    with pytest.raises(
        loop.TrainingDiverged, match=r"diverged at step 5: the held-out loss is nan"
    ):
        _train(corpus, tmp_path / "m", steps=5)


def test_the_final_held_out_loss_is_never_the_step_0_loss(corpus, tmp_path):
    """A run stopped before its first evaluation has no final held-out loss (NaN), not step 0's."""
    summary = _train(corpus, tmp_path / "m", steps=20, stop_after=3)
    assert math.isfinite(summary["initial_heldout_loss"])
    assert math.isnan(summary["final_heldout_loss"])
    done = _train(corpus, tmp_path / "m", steps=20)  # resumes; evaluated at 10 and 20
    with open(tmp_path / "m" / trainlog.LOSS_CURVE) as f:
        last = list(csv.DictReader(f))[-1]
    assert int(last["step"]) == 20
    assert done["final_heldout_loss"] == pytest.approx(float(last["heldout_loss"]), rel=1e-6)
    assert done["final_heldout_loss"] != done["initial_heldout_loss"]


# ---------------------------------------------------------------------------------------------
# Trained weights recorded and checked; checkpoints that cannot be read or written


def test_a_trained_model_records_its_weights_and_an_edit_refuses_the_load(
    corpus, tmp_path, monkeypatch
):
    from causalpos.models.load import load_model, read_source
    from causalpos.models.weights import ModelIntegrityError, sha256_file

    monkeypatch.chdir(tmp_path)
    out = Path("resources/models/trained-rope")
    _train(corpus, out, steps=5, checkpoint_every=5, eval_every=5)
    record = read_source(out)
    weights = out / "model.safetensors"
    assert record["source"] == "trained" and record["name"] == "trained-rope"
    assert record["sha256"] == {"model.safetensors": sha256_file(weights)}
    assert record["weights_stat"]["model.safetensors"][0] == weights.stat().st_size
    model, _ = load_model(out)
    assert model.causalpos_source["sha256"] == record["sha256"]
    data = bytearray(weights.read_bytes())
    data[-4:] = b"\x00\x00\x00\x40"  # finite, same size, other weights
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError) as info:
        load_model(out)
    msg = str(info.value)
    assert "resources/models/trained-rope/model.safetensors has changed since" in msg
    assert "snakemake --force resources/models/trained-rope" in msg


def test_a_truncated_trainer_state_is_named_with_the_choice_to_delete_it(corpus, tmp_path):
    _train(corpus, tmp_path / "r", stop_after=6)
    ((_, ckpt),) = checkpoints.list_checkpoints(tmp_path / "r.checkpoints")
    state = ckpt / checkpoints.TRAINER_STATE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    with pytest.raises(checkpoints.CheckpointError) as info:
        _train(corpus, tmp_path / "r")
    msg = str(info.value)
    assert f"checkpoint {ckpt}: trainer_state.pt cannot be read" in msg
    assert f"`rm -r {ckpt}`" in msg and "restarts from step 0" in msg
    import shutil

    shutil.rmtree(ckpt)  # the advice, followed: a fresh run gives the uninterrupted result
    _train(corpus, tmp_path / "r")
    _train(corpus, tmp_path / "a")
    wa, wr = _weights(tmp_path / "a"), _weights(tmp_path / "r")
    assert all(torch.equal(wa[k], wr[k]) for k in wa)


def test_a_full_disk_while_a_checkpoint_is_written_is_named_with_path_and_free_space(
    corpus, tmp_path, monkeypatch
):
    import shutil
    from collections import namedtuple

    def full(obj, f, *a, **kw):  # what torch says when the disk fills up under it
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 * 2**20, 10 * 2**20 - 4096, 4096))
    with pytest.raises(checkpoints.CheckpointError) as info:
        _train(corpus, tmp_path / "r", stop_after=6)
    msg = str(info.value)
    ckpt = tmp_path / "r.checkpoints" / "step-000006"
    assert f"the disk is full: writing checkpoint {ckpt} failed" in msg
    assert "unexpected pos" in msg and "has 0.0 MiB free" in msg
    assert not any((tmp_path / "r.checkpoints").iterdir())  # nothing half-written left
    # the same error with space to spare is not called a full disk
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(2**40, 0, 2**40))
    with pytest.raises(RuntimeError, match="unexpected pos") as info:
        _train(corpus, tmp_path / "r", stop_after=6)
    assert not isinstance(info.value, checkpoints.CheckpointError)


def test_each_training_default_is_written_once():
    """The hyper-parameters' defaults are the schema's ``train:`` defaults (config.yaml
    agreeing), but ``window``: None in the library means context // 4, which the schema writes
    out for the default context (32 of 128)."""
    from tests.settings_defaults import disagreements, schema_node

    assert disagreements(settings.LengthGenSettings) == []
    assert disagreements(settings.ModelShape) == []
    assert disagreements(settings.TrainSettings) == [
        "TrainSettings.window = None, schema train.window = 32"
    ]
    assert schema_node("train.window")["default"] == settings.TrainSettings().context // 4
