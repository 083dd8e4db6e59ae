"""Training small decoders from scratch that differ in exactly one positional factor.

Paper 1 (§8) and paper 2 (§6) both name the same missing experiment: models trained identically
except for how position enters attention. This module trains such a family:

=========  ===========================================================================================
variant    what differs (everything else — tokenizer, data order, initial weights, optimiser — is equal)
=========  ===========================================================================================
``rope``   standard rotary embedding (HF rotate-half convention, ``rope_theta``)
``nope``   no positional encoding: the rotary application is the identity (cos = 1, sin = 0). Same
           weights layout; ``causalpos_rope: "none"`` is written to ``config.json`` so that loaders
           (``causalpos.models.load_model``) rebuild the model without rotation
``ntk``    llama3-style frequency scaling of RoPE (``rope_parameters.rope_type = "llama3"``), with
           ``original_max_position_embeddings`` set to the training context so the scaling acts on
           the wavelengths the model actually sees (with Llama-3.1's 8192 it would touch almost
           nothing at a context of 128)
``swa``    sliding-window attention shorter than the training context: the Mistral architecture,
           which is Llama plus ``sliding_window`` (identical parameter names and shapes, so the
           initial weights are copied from the same Llama initialisation)
=========  ===========================================================================================

Training is deterministic on CPU: the initial weights come from ``torch.manual_seed(seed)``, the
batch at step ``s`` is a pure function of ``(seed, s)``, and a checkpoint stores the weights, the
optimiser and scheduler state, the RNG state, the step and the loss log, so a run interrupted and
resumed ends bit-identical to an uninterrupted one (on the same machine and thread count).

Sequences are ``[BOS] + context - 1`` corpus tokens, so position 0 is always the same BOS token —
the setting of the papers' Llama models. The loss is the mean next-token NLL over target positions
``1 .. context - 1`` (BOS is never a target).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from causalpos.io.atomic import atomic_dir
from causalpos.models.device import DTYPES, resolve_device
from causalpos.models.trainlog import (  # noqa: F401  (read here by older callers)
    LOSS_CURVE,
    TRAINING_JSON,
    read_loss_curve,
    read_training_summary,
)

log = logging.getLogger(__name__)


VARIANTS: tuple[str, ...] = ("rope", "nope", "ntk", "swa")


BOS_TOKEN = "<|bos|>"


EOS_TOKEN = "<|eos|>"


PAD_TOKEN = "<|pad|>"


TRAINER_STATE = "trainer_state.pt"


CHECKPOINT_PREFIX = "step-"


HELDOUT_BOOKS: tuple[str, ...] = ("Ruth", "Ecclesiastes", "Hosea", "Mark", "Romans")


def split_documents(
    docs: Sequence, heldout_sources: Sequence[str] = HELDOUT_BOOKS
) -> tuple[list[str], list[str]]:
    """Split documents into ``(train_texts, heldout_texts)`` by source (book title).

    ``docs``: ``causalpos.data.Document`` items (``.text``, ``.source``), e.g.
    ``causalpos.data.kjv_documents("chapter")``. Raises if a held-out source is absent, so a
    misspelt book name cannot silently hold out nothing.
    """
    wanted = {s.lower() for s in heldout_sources}
    present = {d.source.lower() for d in docs}
    missing = [s for s in heldout_sources if s.lower() not in present]
    if missing:
        raise ValueError(
            f"held-out source(s) {missing} not among the documents' sources "
            f"{sorted({d.source for d in docs})}"
        )
    train = [d.text for d in docs if d.source.lower() not in wanted]
    heldout = [d.text for d in docs if d.source.lower() in wanted]
    if not train or not heldout:
        raise ValueError(f"split by held-out sources {list(heldout_sources)} leaves a side empty")
    return train, heldout


def prepare_texts(
    corpus: Mapping[str, Any], heldout_sources: Sequence[str] = HELDOUT_BOOKS
) -> tuple[list[str], list[str]]:
    """Load a corpus spec (``causalpos.data`` format, e.g. ``{"type": "kjv"}``) and split it by source.

    Returns ``(train_texts, heldout_texts)`` — what :func:`train_tokenizer` and :func:`train_model`
    take. The held-out sources are read by the analyses as their own dataset
    (``{"type": "kjv", "books": [...]}``).
    """
    from causalpos.data import load_documents

    return split_documents(load_documents(dict(corpus)), heldout_sources)


def train_tokenizer(
    texts: Sequence[str],
    vocab_size: int,
    out_dir: str | os.PathLike,
    seed: int = 0,
    *,
    add_bos: bool = True,
    min_frequency: int = 2,
    extra_meta: Mapping[str, Any] | None = None,
) -> Path:
    """Train a byte-level BPE tokenizer on ``texts`` and save it as an HF tokenizer in ``out_dir``.

    Special tokens ``<|bos|>`` (id 0), ``<|eos|>`` (id 1), ``<|pad|>`` (id 2). With ``add_bos`` the
    tokenizer prepends BOS whenever it is called with ``add_special_tokens=True`` (the default), so
    position 0 of every encoded sequence is the same token. Loadable with
    ``transformers.AutoTokenizer.from_pretrained(out_dir)`` (a ``PreTrainedTokenizerFast``).

    BPE training is deterministic (merge counts, ties broken by the library's ordering); ``seed`` is
    recorded in ``causalpos_tokenizer.json`` for provenance and changes nothing, as is
    ``extra_meta`` (e.g. the corpus spec and held-out sources). ``out_dir`` is written under a
    temporary name and renamed into place (replacing what was there), so it is complete or absent.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    n_special = 3
    n_bytes = len(pre_tokenizers.ByteLevel.alphabet())
    if vocab_size < n_special + n_bytes + 1:
        raise ValueError(
            f"vocab_size={vocab_size} is too small for byte-level BPE: it needs the {n_bytes} byte "
            f"symbols + {n_special} special tokens + at least one merge (use >= {n_special + n_bytes + 1})"
        )
    if not texts:
        raise ValueError("train_tokenizer got no texts")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[BOS_TOKEN, EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    bos_id = tok.token_to_id(BOS_TOKEN)
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS_TOKEN} $A",
            pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
            special_tokens=[(BOS_TOKEN, bos_id)],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=int(1e9),
    )
    out = Path(out_dir)
    meta = {
        "vocab_size": tok.get_vocab_size(),
        "requested_vocab_size": vocab_size,
        "add_bos": add_bos,
        "min_frequency": min_frequency,
        "seed": seed,
        "n_texts": len(texts),
        "n_characters": int(sum(len(t) for t in texts)),
        **dict(extra_meta or {}),
    }

    def write(tmp: Path) -> None:
        fast.save_pretrained(tmp)
        (tmp / "causalpos_tokenizer.json").write_text(json.dumps(meta, indent=2) + "\n")

    with atomic_dir(out) as tmp:
        write(tmp)
    return out


def load_tokenizer(tokenizer_dir: str | os.PathLike):
    """The HF fast tokenizer saved by :func:`train_tokenizer` (or any HF tokenizer directory)."""
    from transformers import AutoTokenizer

    path = Path(tokenizer_dir)
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"no tokenizer.json in {path}: train one with causalpos.train.train_tokenizer"
        )
    return AutoTokenizer.from_pretrained(path)


def encode_documents(tokenizer_dir: str | os.PathLike, texts: Sequence[str]) -> np.ndarray:
    """Token stream ``(n_tokens,)`` int64: each document's tokens (no BOS) followed by EOS.

    Training windows are cut from this stream and get their own BOS at position 0 (see
    :func:`batch_at`); EOS marks document boundaries inside a window.
    """
    tok = load_tokenizer(tokenizer_dir)
    if tok.eos_token_id is None:
        raise ValueError(
            f"tokenizer in {tokenizer_dir} has no EOS token; train it with train_tokenizer"
        )
    enc = tok(list(texts), add_special_tokens=False)["input_ids"]
    eos = tok.eos_token_id
    return np.fromiter((i for ids in enc for i in (*ids, eos)), dtype=np.int64)


def batch_at(
    ids: np.ndarray, step: int, *, batch: int, context: int, bos_id: int, seed: int
) -> torch.Tensor:
    """Training batch of update ``step``: ``(batch, context)`` int64, column 0 = BOS.

    Window starts are drawn uniformly from ``np.random.default_rng([seed, step])``: the same for
    every variant trained with the same seed (same data order), independent of any other RNG.
    """
    n_free = len(ids) - (context - 1) + 1
    if n_free < 1:
        raise ValueError(
            f"token stream of {len(ids)} tokens is shorter than one window of {context - 1}"
        )
    rng = np.random.default_rng([seed, 0x5EED, step])
    starts = rng.integers(0, n_free, size=batch)
    return _windows(ids, starts, context, bos_id)


def heldout_windows(ids: np.ndarray, *, n: int, length: int, bos_id: int) -> torch.Tensor:
    """The first ``n`` non-overlapping windows of ``ids``: ``(n, length)`` int64, column 0 = BOS."""
    need = n * (length - 1)
    if len(ids) < need:
        raise ValueError(
            f"held-out stream has {len(ids)} tokens, fewer than n={n} windows of {length - 1} tokens "
            f"({need}); lower the number of held-out sequences or hold out more text"
        )
    return _windows(ids, np.arange(n) * (length - 1), length, bos_id)


def _windows(ids: np.ndarray, starts: np.ndarray, length: int, bos_id: int) -> torch.Tensor:
    idx = starts[:, None] + np.arange(length - 1)[None, :]
    body = torch.from_numpy(np.asarray(ids, dtype=np.int64)[idx])
    bos = torch.full((len(starts), 1), bos_id, dtype=torch.int64)
    return torch.cat([bos, body], dim=1)


def unigram_baselines(
    train_ids: np.ndarray, eval_tokens: torch.Tensor, vocab_size: int
) -> dict[str, float]:
    """Unigram baselines (nats/token) on the held-out targets ``eval_tokens[:, 1:]``.

    ``unigram_entropy``: plug-in entropy of the held-out targets' own frequencies — the loss of the
    best unigram model fitted to the held-out text itself, a lower bound for any unigram model.
    ``unigram_xent``: cross-entropy of the add-½ smoothed training unigram on the held-out targets.
    A model that learned anything beyond token frequencies beats both.
    """
    targets = eval_tokens[:, 1:].reshape(-1).numpy()
    counts = np.bincount(targets, minlength=vocab_size).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    train_counts = np.bincount(np.asarray(train_ids), minlength=vocab_size).astype(np.float64) + 0.5
    q = train_counts / train_counts.sum()
    return {
        "unigram_entropy": float(-(p * np.log(p)).sum()),
        "unigram_xent": float(-(counts * np.log(q)).sum() / counts.sum()),
    }


def apply_causalpos_attributes(model: nn.Module) -> nn.Module:
    """Honour ``causalpos_rope`` in ``model.config`` exactly as ``causalpos.models.load_model`` does.

    ``"none"`` makes the rotary application the identity through
    :func:`causalpos.models.disable_rope` — the one definition of NoPE in the package, so a model is
    trained with the same mechanism the analyses load it with. In place; returns ``model``.
    """
    from causalpos.models.load import apply_rope_setting

    return apply_rope_setting(model)


@dataclass(frozen=True)
class ModelShape:
    """Size of the decoder (the same for every variant)."""

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 384
    rope_theta: float = 10000.0
    tie_embeddings: bool = True


def build_config(
    variant: str,
    *,
    vocab_size: int,
    shape: ModelShape,
    context: int,
    window: int | None = None,
    ntk_factor: float = 8.0,
    ntk_low_freq_factor: float = 1.0,
    ntk_high_freq_factor: float = 4.0,
    ntk_original_context: int | None = None,
    bos_id: int = 0,
    eos_id: int = 1,
    pad_id: int = 2,
):
    """The transformers config of ``variant`` (LlamaConfig, or MistralConfig for ``swa``).

    ``window`` (``swa`` only) defaults to ``context // 4``; ``ntk_original_context`` (``ntk`` only)
    defaults to ``context``. Every config carries ``causalpos_variant`` and
    ``causalpos_train_context``; NoPE carries ``causalpos_rope = "none"``.
    """
    from transformers import LlamaConfig, MistralConfig

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    if shape.hidden % shape.heads or shape.heads % shape.kv_heads:
        raise ValueError(
            f"hidden={shape.hidden} must be divisible by heads={shape.heads}, and heads by "
            f"kv_heads={shape.kv_heads}"
        )
    head_dim = shape.hidden // shape.heads
    if head_dim % 2:
        raise ValueError(
            f"head_dim = hidden/heads = {head_dim} must be even for the rotary embedding"
        )
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(shape.rope_theta)}
    extra: dict[str, Any] = {"causalpos_variant": variant, "causalpos_train_context": int(context)}
    max_positions = context
    if variant == "ntk":
        # llama3 scaling reads only original_max_position_embeddings; max_position_embeddings (the
        # nominal extended length, factor × original) only has to exceed it for transformers' check.
        max_positions = int(ntk_factor * (ntk_original_context or context))
        rope = {
            "rope_type": "llama3",
            "rope_theta": float(shape.rope_theta),
            "factor": float(ntk_factor),
            "low_freq_factor": float(ntk_low_freq_factor),
            "high_freq_factor": float(ntk_high_freq_factor),
            "original_max_position_embeddings": int(ntk_original_context or context),
        }
    if variant == "nope":
        from causalpos.models.load import ROPE_CONFIG_KEY

        extra[ROPE_CONFIG_KEY] = "none"
    common = dict(
        vocab_size=vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=head_dim,
        hidden_act="silu",
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=shape.tie_embeddings,
        attention_dropout=0.0,
        rope_parameters=rope,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        **extra,
    )
    if variant == "swa":
        window = context // 4 if window is None else int(window)
        if not 1 <= window < context:
            raise ValueError(
                f"swa window={window} must be in [1, context={context}) to mask anything in training"
            )
        return MistralConfig(sliding_window=window, **common)
    return LlamaConfig(**common)


def build_model(
    config, *, seed: int, base_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """A freshly initialised causal LM for ``config`` (identity rotation if NoPE).

    The initial weights are those of a plain Llama model built under ``torch.manual_seed(seed)`` with
    the same sizes, copied in — so every variant starts from bit-identical weights, whatever its
    class. ``base_state`` overrides them (used when resuming).
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if base_state is None:
        d = config.to_dict()
        keep = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "hidden_act",
            "rms_norm_eps",
            "initializer_range",
            "tie_word_embeddings",
            "bos_token_id",
            "eos_token_id",
            "pad_token_id",
        )
        base_cfg = LlamaConfig(
            **{k: d[k] for k in keep}, max_position_embeddings=config.max_position_embeddings
        )
        torch.manual_seed(seed)
        base_state = LlamaForCausalLM(base_cfg).state_dict()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    missing, unexpected = model.load_state_dict(dict(base_state), strict=False)
    # Tied lm_head may be absent from a state dict; anything else missing is a real mismatch.
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(
            f"initial weights do not fit {type(model).__name__}: missing {missing}, unexpected {unexpected}"
        )
    if config.tie_word_embeddings:
        model.tie_weights()
    return apply_causalpos_attributes(model)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@dataclass(frozen=True)
class TrainSettings:
    """Everything that determines a run's result; checked on resume so a checkpoint is never mixed."""

    variant: str
    vocab_size: int
    shape: ModelShape
    context: int
    steps: int
    batch: int
    lr: float
    warmup: int
    min_lr_ratio: float
    weight_decay: float
    grad_clip: float
    seed: int
    window: int | None
    ntk_factor: float
    ntk_original_context: int | None
    eval_every: int
    n_eval: int
    dtype: str
    train_tokens: int
    heldout_tokens: int
    data_hash: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = asdict(self.shape)
        return d


def lr_factor(step: int, *, steps: int, warmup: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier of update ``step`` (0-based): linear warmup, then cosine to ``min_lr_ratio``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (
        1.0 + math.cos(math.pi * min(1.0, progress))
    )


def sequence_nll(
    model: nn.Module, tokens: torch.Tensor, *, autocast_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Per-token next-token NLL ``(batch, seq - 1)`` float32: entry t is −log p(token t+1 | tokens ≤ t).

    Logits are cast to float32 before the log-softmax (bf16 log-softmax errs by ~0.1 nats).
    """
    device = next(model.parameters()).device
    tokens = tokens.to(device)
    with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        logits = model(input_ids=tokens, use_cache=False).logits
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)


@torch.no_grad()
def evaluate(
    model: nn.Module, tokens: torch.Tensor, *, batch: int, autocast_dtype: torch.dtype | None = None
) -> float:
    """Mean next-token NLL (nats) over all targets of ``tokens`` ``(n, seq)``; summed in float64."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(tokens), batch):
        nll = sequence_nll(model, tokens[i : i + batch], autocast_dtype=autocast_dtype)
        total += float(nll.double().sum())
        count += nll.numel()
    model.train(was_training)
    return total / count


def _data_hash(*arrays: np.ndarray) -> str:
    import hashlib

    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def default_checkpoint_dir(out_dir: str | os.PathLike) -> Path:
    """Where :func:`train_model` keeps checkpoints by default: the sibling ``<out_dir>.checkpoints``."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + ".checkpoints")


def _checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    found = []
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            if p.name.startswith(CHECKPOINT_PREFIX) and (p / TRAINER_STATE).is_file():
                try:
                    found.append((int(p.name[len(CHECKPOINT_PREFIX) :]), p))
                except ValueError:
                    continue
    return sorted(found)


def plain_state(obj: Any) -> Any:
    """``obj`` made of what ``torch.load(..., weights_only=True)`` accepts: tensors, dicts,
    lists, tuples, str, int, float, bool and None (numpy scalars and arrays are converted)."""
    if isinstance(obj, np.generic):  # before float: np.float64 is a float subclass
        return obj.item()
    if isinstance(obj, torch.Tensor) or obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        return {k: plain_state(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain_state(v) for v in obj)
    raise TypeError(
        f"trainer state holds a {type(obj).__name__}, which torch.load(weights_only=True) "
        "refuses; convert it to tensors, numbers, strings, lists or dicts"
    )


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """A checkpoint's ``trainer_state.pt``, loaded with ``weights_only=True`` (no pickled code)."""
    return torch.load(checkpoint / TRAINER_STATE, map_location="cpu", weights_only=True)


def save_model_dir(model: nn.Module, tokenizer_dir: Path, out: Path) -> None:
    model.save_pretrained(out, safe_serialization=True)
    load_tokenizer(tokenizer_dir).save_pretrained(out)


def _write_curve(rows: Sequence[Mapping[str, float]], path: Path) -> None:
    lines = ["step,train_loss,heldout_loss,lr"]
    for r in rows:
        lines.append(f"{int(r['step'])},{r['train_loss']!r},{r['heldout_loss']!r},{r['lr']!r}")
    path.write_text("\n".join(lines) + "\n")


def train_model(
    variant: str,
    *,
    tokenizer_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    train_ids: np.ndarray | None = None,
    heldout_ids: np.ndarray | None = None,
    train_texts: Sequence[str] | None = None,
    heldout_texts: Sequence[str] | None = None,
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 384,
    rope_theta: float = 10000.0,
    tie_embeddings: bool = True,
    context: int = 128,
    window: int | None = None,
    ntk_factor: float = 8.0,
    ntk_original_context: int | None = None,
    steps: int = 500,
    batch: int = 16,
    lr: float = 3e-3,
    warmup: int = 50,
    min_lr_ratio: float = 0.1,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    eval_every: int = 50,
    n_eval: int = 64,
    checkpoint_every: int = 100,
    checkpoint_dir: str | os.PathLike | None = None,
    keep_checkpoints: int = 1,
    stop_after: int | None = None,
    progress: bool = False,
    on_mismatch: str = "raise",
    provenance: Mapping[str, Any] | None = None,
    keep_final_checkpoint: bool = True,
) -> dict[str, Any]:
    """Train one ``variant`` from scratch (resuming from the last checkpoint) and save it in HF format.

    Data: pass either token streams ``train_ids`` / ``heldout_ids`` ``(n_tokens,)`` (as made by
    :func:`encode_documents`) or the texts (encoded here). Training windows are
    :func:`batch_at`; held-out loss is the mean NLL on the first ``n_eval`` non-overlapping
    held-out windows, measured at step 0, every ``eval_every`` updates and at the end.

    Optimiser: AdamW (β = 0.9, 0.95; weight decay on matrices only), gradient clipping at
    ``grad_clip``, linear warmup over ``warmup`` updates then cosine decay to ``min_lr_ratio · lr``.
    Master weights are float32; ``dtype`` other than float32 trains under autocast.

    Outputs in ``out_dir``: ``config.json`` + ``model.safetensors`` + tokenizer files (load with
    ``causalpos.models.load_model``; NoPE needs its ``causalpos_rope`` honoured), ``loss_curve.csv``
    (step, train_loss, heldout_loss, lr) and ``training.json`` (settings, final losses, unigram
    baselines, parameter count, wall and CPU time), written last. Checkpoints (``step-NNNNNN``:
    model, tokenizer, ``trainer_state.pt``) go to ``checkpoint_dir`` (default: the sibling
    ``<out_dir>.checkpoints``, outside ``out_dir`` because Snakemake deletes a failed job's
    ``directory()`` output — the checkpoints must survive it for the rerun to resume).

    ``stop_after`` ends the run after that many updates, with a checkpoint, without final outputs
    (an interruption on purpose; the next call resumes). Returns the ``training.json`` content (or
    a partial summary when stopped early).

    A checkpoint is resumed only if it was made with the same settings and the same
    ``provenance`` (free JSON-able data recorded in the checkpoint and ``training.json``, e.g. the
    code fingerprint of the pipeline rule). Otherwise ``on_mismatch="raise"`` (default) refuses
    it, and ``"restart"`` deletes the stale checkpoints and trains from scratch — what a pipeline
    rerun after a changed hyper-parameter or code needs. ``keep_final_checkpoint=False`` deletes
    the checkpoint directory once the final outputs are written (its last checkpoint duplicates
    them). ``out_dir`` is written under a temporary name and renamed into place at the end.
    """
    t_start, cpu_start = time.perf_counter(), time.process_time()
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} not supported; allowed: {', '.join(DTYPES)}")
    for name, val in (
        ("steps", steps),
        ("batch", batch),
        ("context", context),
        ("eval_every", eval_every),
        ("n_eval", n_eval),
        ("checkpoint_every", checkpoint_every),
        ("keep_checkpoints", keep_checkpoints),
    ):
        if val < 1:
            raise ValueError(f"{name} must be >= 1 (got {val})")
    if not 0 <= warmup <= steps:
        raise ValueError(f"warmup={warmup} must be in [0, steps={steps}]")
    if on_mismatch not in ("raise", "restart"):
        raise ValueError(f"on_mismatch={on_mismatch!r}; allowed: 'raise' | 'restart'")
    provenance = json.loads(json.dumps(dict(provenance or {})))
    tokenizer_dir = Path(tokenizer_dir)
    out_dir = Path(out_dir)
    ckpt_dir = (
        Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir(out_dir)
    )
    dev = torch.device(resolve_device(device))
    autocast_dtype = None if dtype == "float32" else DTYPES[dtype]

    tok = load_tokenizer(tokenizer_dir)
    train_ids = _stream(tokenizer_dir, train_ids, train_texts, "train")
    heldout_ids = _stream(tokenizer_dir, heldout_ids, heldout_texts, "heldout")
    vocab_size = len(tok)
    if int(max(train_ids.max(), heldout_ids.max())) >= vocab_size:
        raise ValueError(
            f"token ids exceed the tokenizer's vocabulary ({vocab_size}): were they encoded with {tokenizer_dir}?"
        )
    bos_id = tok.bos_token_id
    if bos_id is None:
        raise ValueError(
            f"tokenizer in {tokenizer_dir} has no BOS token; train it with train_tokenizer"
        )
    eval_tokens = heldout_windows(heldout_ids, n=n_eval, length=context, bos_id=bos_id)

    shape = ModelShape(hidden, layers, heads, kv_heads, intermediate, rope_theta, tie_embeddings)
    settings = TrainSettings(
        variant=variant,
        vocab_size=vocab_size,
        shape=shape,
        context=context,
        steps=steps,
        batch=batch,
        lr=lr,
        warmup=warmup,
        min_lr_ratio=min_lr_ratio,
        weight_decay=weight_decay,
        grad_clip=grad_clip,
        seed=seed,
        window=(window if window is not None else context // 4) if variant == "swa" else None,
        ntk_factor=ntk_factor if variant == "ntk" else 0.0,
        ntk_original_context=(ntk_original_context or context) if variant == "ntk" else None,
        eval_every=eval_every,
        n_eval=n_eval,
        dtype=dtype,
        train_tokens=len(train_ids),
        heldout_tokens=len(heldout_ids),
        data_hash=_data_hash(train_ids, heldout_ids),
    )
    config = build_config(
        variant,
        vocab_size=vocab_size,
        shape=shape,
        context=context,
        window=settings.window,
        ntk_factor=ntk_factor,
        ntk_original_context=settings.ntk_original_context,
        bos_id=bos_id,
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
    )

    # Resume from the newest complete checkpoint, refusing one made with other settings.
    state: dict[str, Any] | None = None
    ckpts = _checkpoints(ckpt_dir)
    if ckpts:
        step0, path = ckpts[-1]
        state = load_trainer_state(path)
        now = {**settings.to_dict(), "provenance": provenance}
        then = {**state["settings"], "provenance": state.get("provenance", {})}
        if then != now:
            diff = {k: (then.get(k), v) for k, v in now.items() if then.get(k) != v}
            if on_mismatch == "raise":
                raise ValueError(
                    f"checkpoint {path} was made with other settings (key: (checkpoint, now)) {diff}; "
                    f"delete {ckpt_dir} to start over or pass another checkpoint_dir"
                )
            log.warning(
                "discarding checkpoints in %s made with other settings %s; training from scratch",
                ckpt_dir,
                diff,
            )
            for _, old in ckpts:
                shutil.rmtree(old, ignore_errors=True)
            state = None
    if state is not None:
        from safetensors.torch import load_file

        model = build_model(config, seed=seed, base_state=load_file(path / "model.safetensors"))
        log.info("resuming %s from %s (step %d)", variant, path, step0)
    else:
        model = build_model(config, seed=seed)
    model.to(dev)
    model.train()

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, steps=steps, warmup=warmup, min_lr_ratio=min_lr_ratio)
    )
    rows: list[dict[str, float]]
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        if dev.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"], dev)
        start, rows = int(state["step"]), list(state["rows"])
        elapsed_before = float(state.get("elapsed_s", 0.0))
        cpu_before = float(state.get("cpu_s", 0.0))
    else:
        start = 0
        rows = [
            {
                "step": 0,
                "train_loss": math.nan,
                "lr": math.nan,
                "heldout_loss": evaluate(
                    model, eval_tokens, batch=batch, autocast_dtype=autocast_dtype
                ),
            }
        ]
        elapsed_before = cpu_before = 0.0
        if progress:
            log.info("%s step 0 held-out %.4f", variant, rows[0]["heldout_loss"])

    def checkpoint(step: int) -> None:
        def write(tmp: Path) -> None:
            save_model_dir(model, tokenizer_dir, tmp)
            torch.save(
                plain_state(
                    {
                        "step": step,
                        "settings": settings.to_dict(),
                        "provenance": provenance,
                        "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(),
                        "torch_rng": torch.get_rng_state(),
                        "cuda_rng": torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None,
                        "rows": rows,
                        "elapsed_s": elapsed_before + time.perf_counter() - t_start,
                        "cpu_s": cpu_before + time.process_time() - cpu_start,
                    }
                ),
                tmp / TRAINER_STATE,
            )

        ckpt_dir.mkdir(parents=True, exist_ok=True)
        with atomic_dir(ckpt_dir / f"{CHECKPOINT_PREFIX}{step:06d}") as tmp:
            write(tmp)
        for _, old in _checkpoints(ckpt_dir)[:-keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)

    end = steps if stop_after is None else min(steps, stop_after)
    for step in range(start, end):
        x = batch_at(train_ids, step, batch=batch, context=context, bos_id=bos_id, seed=seed).to(
            dev
        )
        lr_now = sched.get_last_lr()[0]
        loss = sequence_nll(model, x, autocast_dtype=autocast_dtype).mean()
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        done = step + 1
        row = {
            "step": done,
            "train_loss": float(loss.detach()),
            "lr": lr_now,
            "heldout_loss": math.nan,
        }
        if done % eval_every == 0 or done == steps:
            row["heldout_loss"] = evaluate(
                model, eval_tokens, batch=batch, autocast_dtype=autocast_dtype
            )
            if progress:
                log.info(
                    "%s step %d train %.4f held-out %.4f",
                    variant,
                    done,
                    row["train_loss"],
                    row["heldout_loss"],
                )
        rows.append(row)
        if done % checkpoint_every == 0 or done == end:
            checkpoint(done)

    # Wall time depends on what else runs on the machine; process CPU time (all threads) less so.
    elapsed = elapsed_before + time.perf_counter() - t_start
    cpu = cpu_before + time.process_time() - cpu_start
    base = unigram_baselines(train_ids, eval_tokens, vocab_size)
    summary: dict[str, Any] = {
        "variant": variant,
        "settings": settings.to_dict(),
        "step": end,
        "n_parameters": count_parameters(model),
        "initial_heldout_loss": rows[0]["heldout_loss"],
        "final_heldout_loss": next(
            (r["heldout_loss"] for r in reversed(rows) if not math.isnan(r["heldout_loss"])),
            math.nan,
        ),
        "final_train_loss": rows[-1]["train_loss"],
        **base,
        "elapsed_s": elapsed,
        "cpu_s": cpu,
        "device": str(dev),
        "torch_threads": torch.get_num_threads(),
        "tokenizer_dir": str(tokenizer_dir),
        "provenance": provenance,
    }
    if end < steps:
        return summary

    def write(tmp: Path) -> None:
        save_model_dir(model, tokenizer_dir, tmp)
        _write_curve(rows, tmp / LOSS_CURVE)
        (tmp / TRAINING_JSON).write_text(json.dumps(summary, indent=2) + "\n")

    with atomic_dir(out_dir) as tmp:
        write(tmp)
    if not keep_final_checkpoint:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    return summary


def _stream(
    tokenizer_dir: Path, ids: np.ndarray | None, texts: Sequence[str] | None, name: str
) -> np.ndarray:
    if (ids is None) == (texts is None):
        raise ValueError(f"pass exactly one of {name}_ids or {name}_texts")
    if ids is None:
        ids = encode_documents(tokenizer_dir, texts)
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or ids.size == 0:
        raise ValueError(
            f"{name}_ids must be a non-empty 1-D integer token stream (got shape {ids.shape}, dtype {ids.dtype})"
        )
    return ids.astype(np.int64, copy=False)
